"""``OwnWrites`` hands back a store object's own committed events only when they are
exactly the stretch asked for (store/own_writes.py); anything else is None (read)."""

from __future__ import annotations

from continuum.eventlog.events import RawEvent
from continuum.store import own_writes
from continuum.store.own_writes import OwnWrites, readable
from continuum.types import Origin


def chain(first: int, count: int, prev: str | None, tag: str = "") -> list[tuple[RawEvent, str]]:
    out = []
    for seq in range(first, first + count):
        h = f"h{seq}{tag}"
        event = RawEvent(
            f"e{seq}", "r", seq, "progress_recorded", "t", {}, None, Origin.HUMAN, prev, h
        )
        out.append((event, f'{{"completed": {seq}}}'))
        prev = h
    return out


def test_consecutive_commits_make_one_tail_handed_back_by_stretch() -> None:
    own = OwnWrites()
    own.watch("r")
    own.committed("r", 0, None, chain(1, 2, None))
    own.committed("r", 2, "h2", chain(3, 2, "h2"))
    got = own.since("r", 1, "h1", 4, "h4")
    assert got is not None and [e.sequence for e, _ in got] == [2, 3, 4]
    assert readable(*got[0]).payload == {"completed": 2}  # parsed from the stored text
    assert [e.sequence for e, _ in own.since("r", 0, None, 2, "h2") or []] == [1, 2]


def test_anything_but_the_exact_stretch_is_none() -> None:
    own = OwnWrites()
    own.watch("r")
    own.committed("r", 0, None, chain(1, 3, None))
    assert own.since("r", 1, "h1", 4, "h4") is None  # past what it wrote (another writer)
    assert own.since("r", 1, "hX", 3, "h3") is None  # the caller's link is not ours
    assert own.since("r", 1, "h1", 3, "other") is None  # the head is another history
    assert own.since("r", 3, "h3", 3, "h3") is None  # nothing after
    assert own.since("q", 0, None, 1, "h1") is None  # another run


def test_a_commit_that_does_not_start_at_the_tail_starts_a_new_one() -> None:
    own = OwnWrites()
    own.watch("r")
    own.committed("r", 0, None, chain(1, 2, None))
    own.committed("r", 5, "h5", chain(6, 1, "h5"))  # someone else wrote 3-5
    assert own.since("r", 0, None, 2, "h2") is None
    assert [e.sequence for e, _ in own.since("r", 5, "h5", 6, "h6") or []] == [6]


def test_a_write_whose_events_do_not_link_to_its_start_is_forgotten() -> None:
    own = OwnWrites()
    own.watch("r")
    own.committed("r", 0, None, chain(1, 2, None))
    own.committed("r", 2, "h2", chain(4, 1, "h3"))  # not sealed after 2: not ours alone
    assert own.since("r", 0, None, 2, "h2") is None


def test_it_keeps_the_last_events_of_the_last_runs() -> None:
    own = OwnWrites()
    own.watch("r")
    total = own_writes.MAX_EVENTS + 5
    own.committed("r", 0, None, chain(1, total, None))
    assert own.since("r", 0, None, total, f"h{total}") is None  # the oldest were dropped
    assert own.since("r", 5, "h5", total, f"h{total}") is not None
    for i in range(own_writes.MAX_RUNS):
        own.watch(f"run{i}")
        own.committed(f"run{i}", 0, None, chain(1, 1, None))
    assert own.since("r", 5, "h5", total, f"h{total}") is None


def test_nothing_is_kept_of_a_run_nobody_asked_about() -> None:
    own = OwnWrites()
    own.committed("r", 0, None, chain(1, 2, None))
    assert own.since("r", 0, None, 2, "h2") is None  # not watched then: read it
    own.committed("r", 2, "h2", chain(3, 1, "h2"))  # watched since that question
    assert [e.sequence for e, _ in own.since("r", 2, "h2", 3, "h3") or []] == [3]


def test_a_run_asked_about_lately_stays_watched_past_many_others() -> None:
    """The watched runs are the ones asked about most lately: a busy run is not dropped
    because many others were asked about once (it was, with a set cleared when full)."""
    own = OwnWrites()
    own.watch("busy")
    own.committed("busy", 0, None, chain(1, 1, None))
    for i in range(4 * own_writes.MAX_RUNS + 10):
        own.since(f"other{i}", 0, None, 1, "x")  # asked about once each
        if i % 50 == 0:  # the busy run keeps being asked about, and written
            seq = i // 50 + 1
            assert own.since("busy", seq - 1, f"h{seq - 1}" if seq > 1 else None, seq, f"h{seq}")
            own.committed("busy", seq, f"h{seq}", chain(seq + 1, 1, f"h{seq}"))
    last = (4 * own_writes.MAX_RUNS + 9) // 50 + 2
    assert own.since("busy", last - 1, f"h{last - 1}", last, f"h{last}") is not None


def test_a_run_pushed_out_of_the_watch_loses_its_tail() -> None:
    """Control: one not asked about while more than 4 x MAX_RUNS others were is no longer
    kept, and what was kept of it is dropped (it would go stale), then watched again."""
    own = OwnWrites()
    own.watch("quiet")
    own.committed("quiet", 0, None, chain(1, 1, None))
    for i in range(4 * own_writes.MAX_RUNS):
        own.watch(f"other{i}")
    assert own.since("quiet", 0, None, 1, "h1") is None  # dropped; asking watches it again
    own.committed("quiet", 1, "h1", chain(2, 1, "h1"))
    assert own.since("quiet", 1, "h1", 2, "h2") is not None
