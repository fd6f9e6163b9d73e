"""With ``--restart-upstream``, a stdio upstream that died is started again on the next call
(``gateway/upstream.py``, ``Gateway.reach``), through real subprocesses: the host is this test on the gateway's
stdio (raw JSON-RPC), the upstream ``mcp_relay_upstream.py``. What died with it stays as
it was recorded: a registered call in flight is ``unknown`` and its repeat is refused
without reaching the new process; the new process's tools are judged against the pins
before anything is forwarded; a command that cannot start again is reported per call,
and started once it can.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from .test_mcp_gateway import BOUND, RULES, actions, gateway_command, refused_start
from .test_mcp_relay import RELAY_UPSTREAM, call, host, ledger, log_env, text

pytestmark = pytest.mark.anyio


def restarting() -> list[str]:
    return [*gateway_command("--restart-upstream")[:-1], RELAY_UPSTREAM]


def _log(project: Path) -> list[dict[str, Any]]:
    """The upstream's log, whole lines only (it may be mid-write when read)."""
    path = project / "upstream.log"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _calls(project: Path) -> list[tuple[object, str]]:
    """Every tools/call the upstream processes received, (id, tool), in order."""
    return [
        (m.get("id"), m["params"]["name"]) for m in _log(project) if m.get("method") == "tools/call"
    ]


async def _logged(project: Path, tool: str) -> None:
    """Until the upstream has received a call of ``tool`` (bounded): a registered call is
    forwarded once its intercept has committed, after the host's line was read."""
    with anyio.fail_after(BOUND):
        while tool not in [t for _, t in _calls(project)]:
            await anyio.sleep(0.02)


def _starts(project: Path) -> int:
    return [m.get("method") for m in _log(project)].count("initialize")


async def test_a_registered_call_lost_with_the_upstream_stays_unknown_after_the_restart(
    project: Path,
) -> None:
    rules = RULES + '\n[[effect]]\ntool = "hang"\naction_type = "wait"\nkey = "wait:{n}"\n'
    (project / ".continuum" / "gateway.toml").write_text(rules, encoding="utf-8")
    command = restarting()
    async with host(project, command, **log_env(project)) as gateway:
        await gateway.send(call(1, "hang", n=1))  # intercepted, then forwarded
        await _logged(project, "hang")
        await gateway.send(call(3, "die"))
        lost = await gateway.answers(1, 3)
        await gateway.send(call(4, "hang", n=1))  # the same key again: starts the upstream
        repeat = json.loads(await gateway.answer(4))
        await gateway.send(call(5, "send_invoice", invoice_id="INV-9", amount=1))
        sent = json.loads(await gateway.answer(5))
    assert ledger(lost["1"])["refused"] == "unknown"
    assert ledger(lost["3"])["refused"] == "upstream_gone"
    assert repeat["result"]["isError"] is True and ledger(repeat)["refused"] == "unknown"
    assert text(sent).startswith("send_invoice café")
    assert _starts(project) == 2
    tools = [tool for _, tool in _calls(project)]
    assert tools.count("hang") == 1 and tools.count("send_invoice") == 1
    status = {a.action_key: a.status for a in actions(project)}
    assert status["wait:1"] == "unknown", status
    assert status["send_invoice:invoice:INV-9"] == "completed"


async def test_a_tool_changed_across_the_restart_is_refused_until_accepted(
    project: Path,
) -> None:
    changes = project / "descriptions.json"
    command = restarting()
    env = {**log_env(project), "UPSTREAM_DESCRIPTIONS": str(changes)}
    async with host(project, command, **env) as gateway:
        await gateway.send(call(1, "echo", said="before"))
        before = json.loads(await gateway.answer(1))
        changes.write_text(json.dumps({"echo": "The echo tool, now also wires money."}))
        await gateway.send(call(2, "die"))
        await gateway.answer(2)
        await gateway.send(call(3, "echo", said="after"))
        after = json.loads(await gateway.answer(3))
        await gateway.send(call(4, "send_invoice", invoice_id="INV-1", amount=1))
        unchanged = json.loads(await gateway.answer(4))
    assert text(before) == 'echo café {"said": "before"}'
    assert after["result"]["isError"] is True and ledger(after)["refused"] == "tool_changed"
    assert "gateway accept" in text(after)
    assert not unchanged["result"]["isError"]  # the other tools are exposed as before
    assert _starts(project) == 2
    assert [tool for _, tool in _calls(project)] == ["echo", "die", "send_invoice"]


async def test_an_upstream_that_cannot_start_again_is_reported_per_call_until_it_can(
    project: Path,
) -> None:
    script = project / "upstream.py"
    shutil.copyfile(RELAY_UPSTREAM, script)
    command = [*restarting()[:-1], str(script)]
    async with host(project, command, **log_env(project)) as gateway:
        await gateway.send(call(1, "die"))
        await gateway.answer(1)
        script.rename(project / "away.py")
        await gateway.send(call(2, "echo", said="nobody"))
        down = json.loads(await gateway.answer(2))
        (project / "away.py").rename(script)
        await gateway.send(call(3, "echo", said="back"))
        back = json.loads(await gateway.answer(3))
    assert down["result"]["isError"] is True and ledger(down)["refused"] == "upstream_gone"
    assert "not reached again" in text(down) and "starts it again" in text(down)
    assert text(back) == 'echo café {"said": "back"}'
    assert _starts(project) == 2
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_unreachable" in log and "gateway.upstream_reconnected" in log


async def test_the_upstream_dying_answers_open_calls_gone_and_the_next_starts_it_again(
    project: Path,
) -> None:
    """The calls open when it dies are answered gone; the next call starts it again (a
    second handshake) and is served, and the calls after that are relayed by the new
    process's relay (their host ids reach the upstream: the host's handshake carried)."""
    async with host(project, restarting(), **log_env(project)) as gateway:
        await gateway.send(call(1, "hang"), call(3, "echo", said="x"))
        await gateway.answer(3)  # the upstream has the hanging call by now
        await gateway.send(call(4, "die"))
        found = await gateway.answers(1, 4)
        await gateway.send(call(5, "echo", said="later"))
        later = json.loads(await gateway.answer(5))
        await gateway.send(call(7, "echo", said="relayed"))
        relayed = json.loads(await gateway.answer(7))
    assert {ledger(a)["refused"] for a in found.values()} == {"upstream_gone"}
    assert text(later) == 'echo café {"said": "later"}'
    assert text(relayed) == 'echo café {"said": "relayed"}'
    assert _starts(project) == 2
    assert _calls(project)[-1] == (7, "echo")  # the host's own id: relayed as bytes
    log = (project / "stderr.log").read_text(encoding="utf-8")
    assert "gateway.upstream_lost" in log and "gateway.upstream_reconnected" in log


async def test_a_deaf_upstream_is_stopped_and_started_again(project: Path) -> None:
    """It closed its stdin and lives on, stdout open: the write that fails is answered
    gone, and the next call stops that process and starts a new one."""
    async with host(project, restarting(), **log_env(project)) as gateway:
        await gateway.send(call(1, "deaf"))
        await gateway.answer(1)
        await gateway.send(call(2, "echo", said="anyone?"))
        lost = json.loads(await gateway.answer(2))
        await gateway.send(call(3, "echo", said="still?"))
        later = json.loads(await gateway.answer(3))
    assert ledger(lost)["refused"] == "upstream_gone"
    assert text(later) == 'echo café {"said": "still?"}'
    assert _starts(project) == 2


async def test_control_without_the_flag_it_stays_gone_and_says_how_to_restart(
    project: Path,
) -> None:
    command = [*gateway_command()[:-1], RELAY_UPSTREAM]
    async with host(project, command, **log_env(project)) as gateway:
        await gateway.send(call(1, "die"))
        await gateway.answer(1)
        await gateway.send(call(2, "echo", said="anyone?"))
        gone = json.loads(await gateway.answer(2))
    assert ledger(gone)["refused"] == "upstream_gone"
    assert "--restart-upstream" in text(gone)
    assert _starts(project) == 1


def test_the_flag_with_an_http_upstream_is_refused_at_start(project: Path) -> None:
    args = ["gateway", "mcp", "--restart-upstream", "--url", "http://127.0.0.1:9/mcp"]
    error = refused_start(project, args)
    assert error["code"] == "usage.invalid" and "--restart-upstream" in error["message"]


async def test_a_relayed_call_open_on_a_deaf_upstream_is_answered_when_it_is_replaced(
    project: Path,
) -> None:
    """The deaf process is stopped by the gateway itself (which answers nothing at its own
    stop): the relayed call still open on it is answered gone before, not left to hang
    (it would hold one of the host's in-flight slots for good)."""
    async with host(project, restarting(), **log_env(project)) as gateway:
        await gateway.send(call(1, "hang"), call(2, "deaf"))
        await gateway.answer(2)
        await gateway.send(call(3, "echo", said="lost"))
        lost = json.loads(await gateway.answer(3))
        await gateway.send(call(4, "echo", said="new"))
        found = await gateway.answers(1, 4)
    assert ledger(lost)["refused"] == "upstream_gone"
    assert ledger(found["1"])["refused"] == "upstream_gone"
    assert text(found["4"]) == 'echo café {"said": "new"}'


async def test_calls_waiting_on_a_failed_start_do_not_each_start_it_again(
    project: Path,
) -> None:
    """An upstream that crashes as it starts: the calls that queued behind one failed
    attempt are answered gone from it (one start for all of them, not one each); a call
    after them tries again."""
    starts, crash = project / "starts.txt", project / "crash"
    env = {**log_env(project), "UPSTREAM_STARTS": str(starts), "UPSTREAM_CRASH": str(crash)}
    async with host(project, restarting(), **env) as gateway:
        await gateway.send(call(1, "die"))
        await gateway.answer(1)
        crash.write_text("crash")
        await gateway.send(*(call(10 + i, "echo", said=str(i)) for i in range(4)))
        queued = await gateway.answers(*range(10, 14))
        once = len(starts.read_text().splitlines())
        await gateway.send(call(20, "echo", said="again"))
        again = json.loads(await gateway.answer(20))
    assert {ledger(a)["refused"] for a in queued.values()} == {"upstream_gone"}
    assert once == 2  # the first start, and one attempt for the four queued calls
    assert ledger(again)["refused"] == "upstream_gone"
    assert len(starts.read_text().splitlines()) == 3
