"""A server's verdict watch (issue 26, item 2), on both backends: a run whose verdict
turns ``request_human`` is announced once (a ``run_needs_human`` notification, no event
written), not on every look; a new cause is a new notification; a run that may resume, or
a finished one, is not announced. Control: the same runs before anything needs a person
give no notification."""

from __future__ import annotations

from typing import Any

from continuum.runtime.facade import Continuum
from continuum.runtime.verdicts import RECHECK_SECONDS, VerdictWatch
from continuum.store import Storage
from continuum.types import Origin


def verdicts(store: Storage) -> list[dict[str, Any]]:
    return [row.body for row in store.list_outbox() if row.kind == "run_needs_human"]


def test_a_run_that_turns_request_human_is_announced_once_per_cause(store: Storage) -> None:
    now = [0.0]
    watch = VerdictWatch(clock=lambda: now[0])
    code = Continuum(store, origin=Origin.DETERMINISTIC)
    code.start_run("quiet", "nothing to ask")
    code.start_run("busy", "send mail")
    r = code.intercept("busy", "send_mail", {"to": "a"}, key="m1")
    code.complete("busy", r.action_key)
    watch(store)
    assert verdicts(store) == []  # control: nothing needs a person yet
    head = store.get_run("busy").head_sequence
    r = code.intercept("busy", "send_mail", {"to": "b"}, key="m2")
    code.fail("busy", r.action_key, error="timeout", certain=False)  # may have happened
    watch(store)
    watch(store)  # the same head: not looked at again
    now[0] += RECHECK_SECONDS + 1
    watch(store)  # looked at again: the same cause, the same notification
    (told,) = verdicts(store)
    assert told["run_id"] == "busy" and told["command"] == "continuum resume busy"
    assert told["details"]["required_actions"] == [f"reconcile_action:{r.action_id}"]
    assert told["sequence"] > head and told["event_id"] is None
    assert [e.type for e in store.read_events("busy")][-1] == "action_marked_unknown"  # no event
    # a second cause: another unknown action is a new notification
    r2 = code.intercept("busy", "send_mail", {"to": "c"}, key="m3")
    code.fail("busy", r2.action_key, error="reset", certain=False)
    watch(store)
    assert len(verdicts(store)) == 2
    # a finished run is not watched; a run that may resume is not announced
    code.finish_run("quiet")
    watch(store)
    assert {v["run_id"] for v in verdicts(store)} == {"busy"}
