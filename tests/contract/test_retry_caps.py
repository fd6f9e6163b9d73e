"""Retry caps (issue 25, item 4), on both backends: ``[[retry]]`` rules of approvals.toml
cap the attempts of an action type (``max_attempts``) and the new attempts of a run
(``run_retries``); an intercept past a cap answers ``retry_cap_reached`` with the count
and writes nothing. The counts are the ledger's, so a padded argument does not reset
them and they hold across processes SIGKILLed mid-effect. Negative controls: without the
rule the same retries go on.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from continuum.errors import UsageError
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import InterceptStatus, Origin
from tests.contract.conftest import StoreFactory

RUN = "run_retries"
WORKER = r"""
import os, signal, sys
from continuum.runtime.facade import Continuum
url, run = sys.argv[1], sys.argv[2]
os.chdir(sys.argv[3])  # the project: its .continuum/approvals.toml
cx = Continuum.open(url)
r = cx.intercept(run, "fetch", {"page": 1}, key="page-1", replay="safe")
print(r.status, r.attempt, flush=True)
if r.proceed:
    os.kill(os.getpid(), signal.SIGKILL)  # the effect ran; killed before complete
"""


def rules(project: Path, text: str) -> None:
    path = project / ".continuum" / "approvals.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def cx(store: Storage, project: Path) -> Continuum:
    rt = Continuum(store)
    rt.start_run(RUN, "send and fetch")
    return rt


def head(store: Storage) -> int:
    return store.get_run(RUN).head_sequence


def attempt(cx: Continuum, action_type: str = "send", **arguments: object) -> tuple[str, int]:
    """Intercept; on proceed, the effect certainly failed (trusted code says so)."""
    r = cx.intercept(RUN, action_type, arguments or {"to": "a@b"})
    if r.proceed:
        cx.fail(RUN, r.action_key, error="503", certain=True)
    return str(r.status), r.attempt


def test_an_action_type_gets_at_most_max_attempts_and_the_refusal_writes_nothing(
    store: Storage, project: Path, cx: Continuum
) -> None:
    rules(project, '[[retry]]\naction_type = "send"\nmax_attempts = 3\ndescription = "mail"\n')
    assert [attempt(cx) for _ in range(3)] == [("started", 1), ("started", 2), ("started", 3)]
    before = head(store)
    r = cx.intercept(RUN, "send", {"to": "a@b"})
    assert (r.proceed, r.status, r.attempt) == (False, InterceptStatus.RETRY_CAP_REACHED, 3)
    assert "It has had 3 attempt(s)" in r.guidance and "retry rule #1 (line 1)" in r.guidance
    assert "allows at most 3 for send" in r.guidance
    assert head(store) == before
    # control: another type, no rule: retried past three
    assert [attempt(cx, "fetch") for _ in range(5)][-1] == ("started", 5)


def test_a_padded_or_respelled_argument_does_not_reset_the_count(
    store: Storage, project: Path, cx: Continuum
) -> None:
    rules(project, '[[retry]]\naction_type = "send"\nmax_attempts = 2\n')
    assert attempt(cx, to="a@b", amount=100) == ("started", 1)
    assert attempt(cx, to=" a@b ", amount=100.0) == ("started", 2)  # the same action
    renamed = cx.intercept(RUN, "send", {"recipient": "a@b", "amount": 100})
    assert renamed.status == "possible_duplicate"  # a renamed field: refused, no fresh count
    assert attempt(cx, to="a@b", amount=100) == ("retry_cap_reached", 2)


def test_a_run_wide_budget_counts_new_attempts_of_every_action(
    store: Storage, project: Path, cx: Continuum
) -> None:
    rules(project, "[[retry]]\nrun_retries = 2\n")
    assert attempt(cx, to="a") == ("started", 1)
    assert attempt(cx, to="b") == ("started", 1)  # a first attempt is no retry
    assert attempt(cx, to="a") == ("started", 2)
    assert attempt(cx, to="b") == ("started", 2)
    refused = cx.intercept(RUN, "send", {"to": "a"})
    assert refused.status == InterceptStatus.RETRY_CAP_REACHED
    assert "This run has made 2 new attempt(s)" in refused.guidance
    assert attempt(cx, to="c") == ("started", 1)  # new work still starts


def test_the_cap_holds_across_processes_killed_mid_effect(
    store_factory: StoreFactory, store: Storage, project: Path, cx: Continuum
) -> None:
    def worker() -> str:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, store_factory.url, RUN, str(project)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode in (0, -signal.SIGKILL), done.stderr[-2000:]
        return done.stdout.strip()

    rules(project, '[[retry]]\naction_type = "fetch"\nmax_attempts = 3\n')
    # a safe effect interrupted is run again by the next process: attempts 1, 2, 3
    assert [worker() for _ in range(3)] == ["started 1", "started 2", "started 3"]
    assert worker() == "retry_cap_reached 3"  # the fourth process is refused
    assert worker() == "retry_cap_reached 3"
    # negative control: without the rule the next process runs it a fourth time
    (project / ".continuum" / "approvals.toml").write_text("# no caps\n", encoding="utf-8")
    assert worker() == "started 4"


def test_a_malformed_retry_rule_refuses_the_retry_and_a_vanished_one_still_caps(
    store: Storage, project: Path, cx: Continuum
) -> None:
    rules(project, '[[retry]]\naction_type = "send"\nmax_attempts = 1\n')
    assert attempt(cx) == ("started", 1)
    assert attempt(cx) == ("retry_cap_reached", 1)
    (project / ".continuum" / "approvals.toml").unlink()  # a missing file lifts no limit
    assert attempt(cx) == ("retry_cap_reached", 1)
    rules(project, '[[retry]]\naction_type = "send"\nmax_attempts = 0\n')
    before = head(store)
    with pytest.raises(UsageError) as e:
        cx.intercept(RUN, "send", {"to": "a@b"})
    assert e.value.code == "approvals.bad_rules" and "max_attempts must be" in e.value.message
    assert head(store) == before


def test_an_agents_retry_is_capped_too(store: Storage, project: Path, cx: Continuum) -> None:
    rules(project, '[[retry]]\naction_type = "fetch"\nmax_attempts = 2\n')
    agent = Continuum(store, origin=Origin.EXTERNAL_AGENT)
    for n in (1, 2):
        r = agent.intercept(RUN, "fetch", {"page": 1}, replay="idempotent")
        assert (r.status, r.attempt) == ("started", n)
        agent.fail(RUN, r.action_key, error="timeout")  # unknown: idempotent, may re-run
    assert agent.intercept(RUN, "fetch", {"page": 1}, replay="idempotent").status == (
        "retry_cap_reached"
    )


def test_a_person_is_told_once_when_a_cap_is_reached(
    store: Storage, project: Path, cx: Continuum
) -> None:
    """Issue 26: a needs-human notice for a reached retry cap, written with the refusal
    (no event), once per cap however often the agent knocks; none before the cap."""
    rules(project, '[[retry]]\naction_type = "send"\nmax_attempts = 2\n')
    assert [attempt(cx) for _ in range(2)] == [("started", 1), ("started", 2)]
    assert [n for n in store.list_outbox() if n.kind == "retry_cap_reached"] == []
    for _ in range(3):
        assert attempt(cx)[0] == "retry_cap_reached"
    (notice,) = [n for n in store.list_outbox() if n.kind == "retry_cap_reached"]
    body = notice.body
    assert body["run_id"] == RUN and body["command"] == f"continuum actions {RUN} --all"
    assert "a retry cap is reached" in body["summary"] and body["details"]["action_type"] == "send"
