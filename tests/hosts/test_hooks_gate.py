"""The hooks' gate through each real host that has hooks, as `continuum hooks install`
wrote it: a registered effect runs once and its repeat is refused to the model; the host
killed mid-effect leaves it unknown, the next session is briefed and refused until a
person settles it; an unusable store refuses registered effects while the rest runs; a
file write is recorded with its digest; a pre-compaction checkpoint is taken. Negative
control: without the hooks, the same crash sends the invoice twice through the host.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.hooks.gates import start_gate, stop_gate
from tests.hosts.conftest import make_project
from tests.hosts.harness import Host, Project
from tests.hosts.host_codex import MODEL as CODEX_MODEL
from tests.hosts.hosts_all import COMPACTING_HOSTS, HOOK_HOSTS
from tests.hosts.scenarios import (
    KILL_MARKER,
    die_after_sending,
    duplicates,
    register_send,
    setup_send,
)

SHELL_TOOLS = "Bash|run_shell_command|bash|exec_command|shell"


def gated(host: Host, tmp_path: Path, *, hooks: bool = True) -> Project:
    """A project whose registry gates ``./send``, then the hooks installed (which accepts
    that registry: the person installing has seen its rules)."""
    p = make_project(host, tmp_path)
    setup_send(p)
    register_send(p, SHELL_TOOLS)
    if hooks:
        p.install_hooks()
    return p


def sent_once_and_refused_again(p: Project, s: Any) -> dict[str, Any]:
    """The session sent INV-001 once and the model read why its repeat was refused; the
    action (completed)."""
    assert s.code == 0 and not s.model.problems, s.describe()
    assert p.outbox() == ["INV-001"], s.describe()
    first, repeat = s.model.results()
    assert "sent INV-001" in first.text, s.describe()
    assert "already happened" in repeat.text and "Do not run it again" in repeat.text, repeat
    (action,) = p.actions()
    assert action["status"] == "completed" and action["result"]["exit_code"] == 0, action
    return dict(action)


def events(p: Project) -> list[dict]:
    return list(p.continuum_json("events", p.run)["events"])


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_a_registered_effect_runs_once_and_the_model_reads_why_its_repeat_was_refused(
    host: Host, tmp_path: Path
) -> None:
    p = gated(host, tmp_path)
    s = p.session([[host.shell("./send INV-001")], [host.shell("./send INV-001")]])
    action = sent_once_and_refused_again(p, s)
    # Version pinning (issue 24): Codex's hook payloads name the model, pinned with the
    # effect; the other hosts' do not, and nothing is made up for them.
    if host.name == "codex":
        assert action.get("versions") == {"model": CODEX_MODEL}, action
    else:
        assert action.get("versions") is None, action
    # The hook processes sealed these events with the interpreter's own sha256 (they do
    # not load OpenSSL); the CLI verifies the chain with OpenSSL's: the same digests.
    checked = p.continuum_json("verify", p.run)
    assert checked["ok"] is True and checked["reports"][0]["events_checked"] >= 2, checked


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_through_a_resident_gate_the_effect_runs_once_and_its_repeat_is_refused(
    host: Host, tmp_path: Path
) -> None:
    """The same session with every hook process handing its call to `continuum hooks
    serve`: the host passes the setting on to its hooks, the gate's worker answers on the
    hook process's own output and exit status, and the host obeys it."""
    p = gated(host, tmp_path)
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    try:
        p.extra_env = {"CONTINUUM_GATE_SOCKET": str(path)}
        s = p.session([[host.shell("./send INV-001")], [host.shell("./send INV-001")]])
    finally:
        served = stop_gate(gate, log)
    sent_once_and_refused_again(p, s)
    # Every hook the host ran went through the gate: the effect's pre-tool and post-tool
    # and its repeat's pre-tool at least (and the session's other hooks).
    assert served >= 3, (served, log.read_text(encoding="utf-8"))


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_a_host_killed_mid_effect_leaves_it_unknown_briefed_and_refused_until_settled(
    host: Host, tmp_path: Path
) -> None:
    p = gated(host, tmp_path)
    die_after_sending(p, "INV-002")
    s1 = p.session([[host.shell("./send INV-002")]], kill_marker=KILL_MARKER)
    assert s1.killed, s1.describe()
    assert p.outbox() == ["INV-002"]
    (action,) = p.actions()
    assert action["status"] == "started" and action["interrupted"] is True, action
    assert p.continuum("resume", p.run, check=False).returncode == 20

    s2 = p.session([[host.shell("./send INV-002")]])
    assert s2.code == 0 and not s2.model.problems, s2.describe()
    first = s2.model.main_turns()[0]
    assert "crash-recovery briefing" in first.text and "INV-002" in first.text, first.text[-3000:]
    (repeat,) = s2.model.results()
    assert "outcome is unknown" in repeat.text and "continuum" in repeat.text, repeat
    assert "reconcile" in repeat.text, repeat
    assert p.outbox() == ["INV-002"], "the repeat of an unknown effect ran"

    p.continuum("reconcile", p.run, action["action_id"], "--occurred", "--yes")
    s3 = p.session([[host.shell("./send INV-002")]])
    (again,) = s3.model.results()
    assert "already happened" in again.text, s3.describe()
    assert p.outbox() == ["INV-002"]


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_control_without_the_hooks_the_same_crash_sends_the_invoice_twice(
    host: Host, tmp_path: Path
) -> None:
    p = gated(host, tmp_path, hooks=False)
    die_after_sending(p, "INV-002")
    assert p.session([[host.shell("./send INV-002")]], kill_marker=KILL_MARKER).killed
    s2 = p.session([[host.shell("./send INV-002")]])
    assert s2.code == 0, s2.describe()
    assert duplicates(p.outbox()) == {"INV-002": 2}


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_an_unusable_store_refuses_registered_effects_while_other_calls_run(
    host: Host, tmp_path: Path
) -> None:
    p = gated(host, tmp_path)
    p.db.write_text("this is not a database\n", encoding="utf-8")
    s = p.session([[host.shell("./send INV-009")], [host.shell("echo hello > hello.txt")]])
    assert s.code == 0 and not s.model.problems, s.describe()
    refused, other = s.model.results()
    assert "continuum refused this tool call" in refused.text, refused
    assert p.outbox() == [], "a registered effect ran without its ledger"
    assert (p.dir / "hello.txt").read_text().strip() == "hello", s.describe()
    assert p.db.read_text() == "this is not a database\n"  # refused, never "repaired"


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_a_file_written_by_the_host_is_recorded_with_its_digest(host: Host, tmp_path: Path) -> None:
    p = gated(host, tmp_path)
    s = p.session([[host.write(str(p.dir / "notes.md"), "hello from the host\n")]])
    assert s.code == 0 and not s.model.problems, s.describe()
    on_disk = (p.dir / "notes.md").read_bytes()
    found = [
        e["payload"]
        for e in events(p)
        if e["type"] == "evidence_added"
        and str(e["payload"].get("evidence_id", "")).startswith("file:")
    ]
    assert [f["path"] for f in found] == [str(p.dir / "notes.md")], found
    assert found[0]["sha256"] == "sha256:" + hashlib.sha256(on_disk).hexdigest()
    assert found[0]["size"] == len(on_disk)


@pytest.mark.parametrize("host", COMPACTING_HOSTS, ids=lambda h: h.name)
def test_the_host_compacting_its_context_records_a_checkpoint(host: Host, tmp_path: Path) -> None:
    p = gated(host, tmp_path)
    assert p.session([[host.shell("./send INV-001")]]).code == 0
    steps, prompt = host.compaction()
    s = p.session(steps, prompt=prompt)
    assert s.code == 0, s.describe()
    checkpoints = [e for e in events(p) if e["type"] == "checkpointed"]
    assert len(checkpoints) == 1, json.dumps(checkpoints)
    assert "before the host compacted its context" in checkpoints[0]["payload"]["reason"]


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_a_registered_shell_commands_redirect_is_recorded_and_an_unregistered_ones_is_not(
    host: Host, tmp_path: Path
) -> None:
    """No host reports what a shell command wrote. For a registered effect the gate reads
    the command line's redirect targets and records their digests after it ran; a file
    an unregistered command writes through the shell is not seen (references/hooks.md)."""
    p = gated(host, tmp_path)
    s = p.session(
        [[host.shell("./send INV-005 > receipt.txt")], [host.shell("echo unseen > notes.md")]]
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    assert (p.dir / "receipt.txt").exists() and (p.dir / "notes.md").exists(), s.describe()
    files = {
        e["payload"]["path"]: e["payload"]["sha256"]
        for e in events(p)
        if e["type"] == "evidence_added"
        and str(e["payload"].get("evidence_id", "")).startswith("file:")
    }
    receipt = (p.dir / "receipt.txt").read_bytes()
    assert files == {str(p.dir / "receipt.txt"): "sha256:" + hashlib.sha256(receipt).hexdigest()}


@pytest.mark.parametrize("host", HOOK_HOSTS, ids=lambda h: h.name)
def test_a_handoff_note_reaches_the_next_sessions_first_model_request(
    host: Host, tmp_path: Path
) -> None:
    """A reset with a handoff (issue 25) through the real host: the note a person leaves
    opens the briefing the host puts before the next session's first model request."""
    p = gated(host, tmp_path)
    s1 = p.session([[host.shell("./send INV-004")]])
    assert s1.code == 0 and p.outbox() == ["INV-004"], s1.describe()
    note = "INV-005 bounced: fix the address before sending it"
    assert p.continuum("handoff", p.run, "--note", note, check=False).returncode == 0
    s2 = p.session([[host.shell("echo hi")]])
    assert s2.code == 0 and not s2.model.problems, s2.describe()
    first = s2.model.main_turns()[0]
    assert "Handoff note from an earlier session" in first.text, first.text[-3000:]
    assert note in first.text
