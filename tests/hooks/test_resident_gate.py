"""The resident gate (``continuum hooks serve``): hook processes hand their calls to a warm
process, which runs each in a forked worker on the hook process's own descriptors.

Proof by equivalence: one scripted session of real ``continuum hook`` processes (the plain
path's session of ``test_effect_path``, plus a session start, a call matching no rule, a
refused change of continuum's own files and a pre-compaction) is played on a fresh store
with the hooks in their own processes and again through a real gate: every answer (exit
status, stdout, stderr), every event and the action index must be the same, and the gate
must have served every call. Then what must never happen: a call run twice when a
worker dies (the hook process refuses it instead; control: without a gate the same fault
lets the host run the tool), a call handed to a gate that is not there or not ours, a
gate left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continuum.errors import ContinuumError
from continuum.hooks import resident, resident_call, resident_worker
from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin
from tests.hooks.gates import gate_counts, start_gate, stop_gate
from tests.hooks.test_effect_path import OK, RUN, _normal, _project, _script, _send

HOOK = [sys.executable, "-m", "continuum", "hook"]


def _hook(
    kind: str, payload: dict[str, Any], project: Path, db: Path, gate: Path | None
) -> tuple[int, str, str]:
    data = json.dumps({"session_id": "s1", "cwd": str(project), **payload})
    argv = [kind, "--host", "claude-code", "--db", str(db), "--run", RUN, "--project", str(project)]
    env = {**os.environ, "CONTINUUM_GATE_SOCKET": str(gate) if gate else "off"}
    done = subprocess.run(
        [*HOOK, *argv],
        input=data,
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _session(project: Path) -> Iterator[tuple[str, Any]]:
    yield "session-start", {"source": "startup"}
    yield "pre-tool", {"tool_name": "Bash", "tool_input": {"command": "echo hi"}}  # no rule
    guarded = {"file_path": str(project / ".continuum" / "effects.toml"), "content": "x"}
    yield "pre-tool", {"tool_name": "Write", "tool_input": guarded}  # continuum's own file
    yield from _script(project)
    yield "pre-compact", {"trigger": "auto"}
    yield "session-start", {"source": "resume"}  # briefed on what happened


def _play(root: Path, gate: Path | None) -> tuple[dict[str, Any], int]:
    project, db = _project(root)
    answers: list[tuple[str, int | str, str, str]] = []
    for kind, step in _session(project):
        if kind == "act":
            cx = Continuum(open_store(str(db)), cwd=str(project), origin=Origin.HUMAN)
            try:
                step(cx)
            except ContinuumError as e:  # what the hooks wrote did not allow it
                answers.append(("act", e.code, "", ""))
            finally:
                cx.close()
            continue
        answers.append((kind, *_hook(kind, step, project, db, gate)))
    store = open_store(str(db))
    try:
        runs = [r.run_id for r in store.list_runs()]
        events = {
            r: [(str(e.type), str(e.source), e.payload) for e in store.read_events(r)] for r in runs
        }
        actions = {
            r: [(a.record, a.lease_expires is None) for a in store.list_actions(r)] for r in runs
        }
    finally:
        store.close()
    played = {"answers": answers, "events": events, "actions": actions}
    text = json.dumps(played).replace(str(root), "<root>")
    return _normal(json.loads(text), {}), len(answers)


def test_calls_through_the_gate_answer_and_write_what_hook_processes_do(tmp_path: Path) -> None:
    alone, calls = _play(tmp_path / "alone", None)
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    try:
        through, _ = _play(tmp_path / "gated", path)
    finally:
        served = stop_gate(gate, log)
    assert served == calls  # every hook process handed its call over
    assert through["answers"] == alone["answers"]
    assert through["events"] == alone["events"]
    assert through["actions"] == alone["actions"]
    # The session did what it says, so the comparison covers each kind of answer.
    codes = [(kind, code) for kind, code, _, _ in alone["answers"]]
    assert codes.count(("pre-tool", 2)) == 8  # seven refusals of effects, one guarded write
    assert any("already happened" in err for _, _, _, err in alone["answers"])
    briefed = [out for kind, _, out, _ in alone["answers"] if kind == "session-start"]
    assert "INV-1" in briefed[-1]  # the resumed session was briefed from the log
    assert not path.exists()  # a stopped gate takes its socket away


def test_control_a_gate_that_answers_otherwise_is_caught(tmp_path: Path) -> None:
    """The comparison can fail: a gate whose workers keep the gate's environment instead of
    taking on the hook process's (the gate started with a malformed wait setting)."""
    alone, _ = _play(tmp_path / "alone", None)
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    forgetful = (
        "import sys\n"
        "from continuum.hooks import resident, resident_worker\n"
        "real = resident_worker.become\n"
        "def keeps_env(call, fds, parent):\n"
        "    call.environ.clear(); call.environ.update(__import__('os').environb)\n"
        "    real(call, fds, parent)\n"
        "resident_worker.become = keeps_env\n"
        "sys.exit(resident.serve(sys.argv[1], lambda l: print(l, file=sys.stderr, flush=True)))\n"
    )
    gate = start_gate(path, log, env={"CONTINUUM_HOOK_WAIT_MS": "soon"}, code=forgetful)
    try:
        through, _ = _play(tmp_path / "gated", path)
    finally:
        stop_gate(gate, log)
    assert through["answers"] != alone["answers"]
    assert any("CONTINUUM_HOOK_WAIT_MS" in err for _, _, _, err in through["answers"])


# -- a worker that dies ------------------------------------------------------------------------


def _fault_call(project: Path, db: Path, gate: Path | None, fault: str) -> tuple[int, str]:
    data = json.dumps({"session_id": "s1", "cwd": str(project), **_send("INV-1", "t1")})
    argv = ["pre-tool", "--host", "claude-code", "--db", str(db), "--run", RUN]
    env = {
        **os.environ,
        "CONTINUUM_GATE_SOCKET": str(gate) if gate else "off",
        "CONTINUUM_FAULTS": fault,
    }
    done = subprocess.run(
        [*HOOK, *argv, "--project", str(project)],
        input=data,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stderr


def _statuses(db: Path) -> list[str]:
    store = open_store(str(db))
    try:
        return [str(a.record["status"]) for a in store.list_actions(RUN)]
    finally:
        store.close()


@pytest.mark.parametrize("fault", ["before_append_commit", "after_intercept_commit"])
def test_a_worker_that_dies_mid_call_is_a_refusal_not_a_call_to_run(
    tmp_path: Path, fault: str
) -> None:
    project, db = _project(tmp_path / "p")
    assert _hook("session-start", {"source": "startup"}, project, db, None)[0] == 0  # the run
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    try:
        code, err = _fault_call(project, db, path, fault)
    finally:
        stop_gate(gate, log)
    assert code == 2, err  # every host blocks the tool on 2
    assert "resident gate" in err and "gave no answer" in err
    # What the worker committed before it died stays, and nothing says it completed.
    assert _statuses(db) == (["started"] if fault == "after_intercept_commit" else [])
    # Control: the same fault in a hook's own process is an exit the hosts let the tool run on.
    project2, db2 = _project(tmp_path / "q")
    assert _hook("session-start", {"source": "startup"}, project2, db2, None)[0] == 0
    code, _ = _fault_call(project2, db2, None, fault)
    assert code == 86


# -- when the gate is not used --------------------------------------------------------------------


def _one_call(project: Path, db: Path, gate: Path, invoice: str) -> int:
    call = _send(invoice, f"t-{invoice}")
    assert _hook("pre-tool", call, project, db, gate)[0] == 0
    code = _hook("post-tool", {**call, **OK}, project, db, gate)[0]
    assert code == 0
    return code


def test_without_a_usable_gate_a_hook_runs_in_its_own_process(tmp_path: Path) -> None:
    project, db = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    _one_call(project, db, path, "INV-1")  # no gate at all
    gate = start_gate(path, log)
    try:
        _one_call(project, db, path, "INV-2")  # served
        path.parent.chmod(0o755)  # a directory others can open: not used
        _one_call(project, db, path, "INV-3")
        path.parent.chmod(0o700)
    finally:
        served = stop_gate(gate, log)
    assert served == 2  # INV-2's pre-tool and post-tool, nothing else
    gate = start_gate(path, log)
    spares = _spares(gate.pid)
    gate.send_signal(signal.SIGKILL)  # a gate killed outright: its spares go with it
    gate.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in spares):
        assert time.monotonic() < deadline, "spares outlived a killed gate"
        time.sleep(0.02)
    assert path.exists()  # its socket answers nobody now
    _one_call(project, db, path, "INV-4")
    gate = start_gate(path, log)  # a new gate replaces the dead one's socket
    try:
        _one_call(project, db, path, "INV-5")
    finally:
        served = stop_gate(gate, log)
    assert served == 2
    assert _statuses(db) == ["completed"] * 5


def test_a_caller_of_another_continuum_runs_its_own_code(tmp_path: Path) -> None:
    project, db = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    other = (
        "import sys, continuum.version as v; v.__version__ = '0.0.0-other'\n"
        "from continuum.cli.launch import main; sys.argv = ['continuum', *sys.argv[1:]]; main()"
    )
    gate = start_gate(path, log)
    try:
        data = json.dumps({"session_id": "s1", "cwd": str(project), **_send("INV-1", "t1")})
        argv = ["hook", "pre-tool", "--host", "claude-code", "--db", str(db), "--run", RUN]
        done = subprocess.run(
            [sys.executable, "-c", other, *argv, "--project", str(project)],
            input=data,
            capture_output=True,
            text=True,
            env={**os.environ, "CONTINUUM_GATE_SOCKET": str(path)},
            timeout=120,
            check=False,
        )
    finally:
        served = stop_gate(gate, log)
    assert done.returncode == 0, done.stderr
    assert served == 0 and _statuses(db) == ["started"]  # run, and run by itself


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a process as another user")
def test_another_users_process_is_never_served(tmp_path: Path) -> None:
    import shutil
    import tempfile

    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python is not None
    # Under /tmp, opened up by hand: the gate's own check of its callers is all that is left.
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        folder.chmod(0o711)
        path, log = folder / "g" / "gate.sock", tmp_path / "gate.log"
        gate = start_gate(path, log)
        try:
            path.parent.chmod(0o711)
            path.chmod(0o777)
            code = (
                "import os, socket, sys\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])\n"
                "body = b'continuum-gate/2'\n"
                "try:\n"
                "    s.sendall(len(body).to_bytes(4, 'big') + body)\n"
                "    said = repr(s.recv(16))\n"
                "except (ConnectionResetError, BrokenPipeError):\n"
                "    said = 'reset'\n"
                "print(os.getuid(), said)\n"
            )
            done = subprocess.run(
                [python, "-c", code, str(path)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                user=65534,
                group=65534,
            )
        finally:
            served = stop_gate(gate, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    uid, said = done.stdout.split()
    assert uid == "65534" and said in ("b''", "reset")  # closed without a word
    assert served == 0


def test_a_gate_started_without_standard_descriptors_serves_every_call(tmp_path: Path) -> None:
    """Started with stdin and stdout closed, its socket must not take their numbers (a
    worker puts the hook process's there)."""
    project, db = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"

    def close_stdio() -> None:
        os.close(0)
        os.close(1)

    gate = start_gate(path, log, preexec=close_stdio)
    try:
        _one_call(project, db, path, "INV-1")
        _one_call(project, db, path, "INV-2")
    finally:
        served = stop_gate(gate, log)
    assert (served, gate_counts(log)[1]) == (4, 0)
    assert _statuses(db) == ["completed"] * 2


def test_a_gate_that_does_not_answer_is_waited_for_briefly_then_the_hook_runs_itself(
    tmp_path: Path,
) -> None:
    """A stopped gate (Ctrl-Z, SIGSTOP): a hook process that hears nothing within
    FIRST_ANSWER seconds runs the call itself, and the worker that takes it later does
    nothing (no GO). Never a hook that waits until its host gives up (and runs the tool)."""
    project, db = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    frozen = [gate.pid, *_spares(gate.pid)]
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        _one_call(project, db, path, "INV-1")
        waited = time.monotonic() - started
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        served = stop_gate(gate, log)
    assert waited >= resident_call.FIRST_ANSWER  # it did wait for the gate, first
    assert served == 0 and _statuses(db) == ["completed"]  # run once, by the hook itself


def test_ctrl_c_at_the_gate_never_cuts_a_call_short(tmp_path: Path) -> None:
    """The gate's process group interrupted while a worker waits for the store's lock: the
    gate stops, the worker serves its call to the end."""
    import apsw

    project, db = _project(tmp_path / "p")
    assert _hook("session-start", {"source": "startup"}, project, db, None)[0] == 0
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    holder = apsw.Connection(str(db))
    holder.execute("BEGIN IMMEDIATE")  # the worker's intercept waits for this lock
    data = json.dumps({"session_id": "s1", "cwd": str(project), **_send("INV-1", "t1")})
    argv = ["pre-tool", "--host", "claude-code", "--db", str(db), "--run", RUN]
    hook = subprocess.Popen(
        [*HOOK, *argv, "--project", str(project)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "CONTINUUM_GATE_SOCKET": str(path)},
    )
    try:
        assert hook.stdin is not None
        hook.stdin.write(data.encode())
        hook.stdin.close()
        time.sleep(1.0)  # taken, and waiting for the lock
        os.killpg(gate.pid, signal.SIGINT)
        time.sleep(0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    hook.stdin = None  # written and closed above
    _, err = hook.communicate(timeout=60)
    assert gate.wait(timeout=30) == 0
    assert hook.returncode == 0, err
    assert gate_counts(log)[0] == 1  # served, and counted, though the gate stopped
    assert _statuses(db) == ["started"]


def test_the_hook_processes_umask_is_the_one_its_files_get(tmp_path: Path) -> None:
    """A hook that creates the store creates it as its own process would (umask 077 here,
    the gate's 022)."""
    project, _ = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"

    def gate_umask() -> None:
        os.umask(0o022)

    gate = start_gate(path, log, preexec=gate_umask)
    try:
        for name, gated in (("alone.db", None), ("gated.db", path)):
            data = json.dumps({"session_id": "s1", "cwd": str(project), **_send("INV-1", "t")})
            done = subprocess.run(
                [*HOOK, "pre-tool", "--host", "claude-code", "--db", str(tmp_path / name)]
                + ["--run", RUN, "--project", str(project)],
                input=data,
                capture_output=True,
                text=True,
                env={**os.environ, "CONTINUUM_GATE_SOCKET": str(gated) if gated else "off"},
                preexec_fn=lambda: os.umask(0o077) and None,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
    finally:
        served = stop_gate(gate, log)
    assert served == 1
    modes = {n: (tmp_path / n).stat().st_mode & 0o777 for n in ("alone.db", "gated.db")}
    assert modes == {"alone.db": 0o600, "gated.db": 0o600}, modes


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_spares_keep_the_normal_policy_without_the_right_to_raise_it(tmp_path: Path) -> None:
    """The rehearsal runs at idle priority in a thread of its own: a gate that may not
    raise a priority (no CAP_SYS_NICE, as for any user) serves calls at the normal one."""
    project, db = _project(tmp_path / "p")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    setpriv = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"]
    gate = start_gate(path, log, prefix=setpriv if os.getuid() == 0 else None)
    try:
        spares = _spares(gate.pid)
        time.sleep(1.0)  # rehearsed, waiting in accept
        assert {os.sched_getscheduler(pid) for pid in spares} == {os.SCHED_OTHER}
        _one_call(project, db, path, "INV-1")
    finally:
        served = stop_gate(gate, log)
    assert served == 2


# -- the gate's own life --------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != b"Z":
                found.add(int(entry))
    return found


def _serve(socket_path: Path) -> subprocess.CompletedProcess[str]:
    """`continuum hooks serve` where it must refuse to start (it returns at once)."""
    return subprocess.run(
        [*HOOK[:-1], "hooks", "serve", "--socket", str(socket_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _spares(gate: int) -> set[int]:
    """The gate's spare workers, once it forked them all."""
    deadline = time.monotonic() + 30
    while len(found := _children(gate)) < resident.SPARES:
        assert time.monotonic() < deadline, found
        time.sleep(0.02)
    return found


def test_the_gate_refuses_to_start_where_it_should_not_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    gate = start_gate(path, log)
    try:
        spares = _spares(gate.pid)
        assert len(spares) == resident.SPARES  # forked workers waiting for calls
        again = _serve(path)
        assert again.returncode != 0 and "already answers" in again.stderr
        assert "[hooks.gate_running]" in again.stderr
    finally:
        stop_gate(gate, log)
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in spares):
        assert time.monotonic() < deadline, "spare workers outlived their gate"
        time.sleep(0.02)
    assert not path.exists()
    # A directory open to others is refused and left as it was.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    refused = _serve(shared / "gate.sock")
    assert refused.returncode != 0 and "[hooks.gate_dir]" in refused.stderr
    assert "open to other users" in refused.stderr
    assert oct(shared.stat().st_mode & 0o777) == oct(0o755) and list(shared.iterdir()) == []
    # A file that is not a socket is never replaced.
    (tmp_path / "h").mkdir(mode=0o700)
    (tmp_path / "h" / "gate.sock").write_text("mine", encoding="utf-8")
    refused = _serve(tmp_path / "h" / "gate.sock")
    assert refused.returncode != 0 and "is not a socket" in refused.stderr
    assert (tmp_path / "h" / "gate.sock").read_text(encoding="utf-8") == "mine"


def test_the_gate_stops_when_continuums_code_changes_on_disk(tmp_path: Path) -> None:
    """An upgrade must not be answered by the old code: the gate stops within seconds."""
    probe = tmp_path / "probe_module.py"
    probe.write_text("X = 1\n", encoding="utf-8")
    path, log = tmp_path / "g" / "gate.sock", tmp_path / "gate.log"
    code = (
        "import sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('continuum.zz_probe', {str(probe)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "sys.modules['continuum.zz_probe'] = m\n"
        "from continuum.hooks.resident import serve\n"
        "sys.exit(serve(sys.argv[1], lambda line: print(line, file=sys.stderr, flush=True)))\n"
    )
    gate = start_gate(path, log, code=code)
    try:
        time.sleep(resident.CHECK_EVERY / 2)
        assert gate.poll() is None  # nothing changed yet
        probe.write_text("X = 2  # upgraded\n", encoding="utf-8")
        assert gate.wait(timeout=resident.CHECK_EVERY * 5) == 0
    finally:
        if gate.poll() is None:
            gate.kill()
    said = log.read_text(encoding="utf-8")
    assert "code changed on disk" in said, said
    assert not path.exists()


# -- pieces ----------------------------------------------------------------------------------------


def test_the_socket_path_and_the_switch() -> None:
    assert resident_call.socket_path({"CONTINUUM_GATE_SOCKET": "off"}) is None
    assert resident_call.socket_path({"CONTINUUM_GATE_SOCKET": " "}) is None
    assert resident_call.socket_path({"CONTINUUM_GATE_SOCKET": "/x/g.sock"}) == "/x/g.sock"
    default = f"/tmp/continuum-{os.getuid()}/gate.sock"
    assert resident_call.socket_path({}) == default
    assert resident_call.socket_path({"XDG_RUNTIME_DIR": "/run/user/1"}) == default


def test_a_request_round_trips_and_a_malformed_one_is_refused() -> None:
    body = resident_call.request_body(["pre-tool", "--db", "x y"], b"/some/where")
    call = resident_worker.parse_call(body)
    assert call.argv == ["pre-tool", "--db", "x y"] and call.cwd == b"/some/where"
    assert call.environ[b"PATH"] == os.environb[b"PATH"]
    assert call.executable == sys.executable and call.interpreter == resident_call.interpreter()
    mask = os.umask(0o022)
    os.umask(mask)
    assert call.umask == mask
    for bad in (b"", b"not\0a\0request", body.replace(b"continuum-gate/2", b"other/1")):
        with pytest.raises(ValueError):
            resident_worker.parse_call(bad)
    parts = body.split(b"\0")
    parts[10] = b"999"  # more arguments than there are fields
    with pytest.raises(ValueError):
        resident_worker.parse_call(b"\0".join(parts))


def test_the_hook_processes_lock_wait_default_is_the_effect_paths() -> None:
    from continuum.hooks import effect_path

    assert resident_call.WAIT_MS == effect_path.WAIT_MS


def test_a_gate_whose_queue_is_full_is_never_waited_on_without_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener nobody accepts on (a stopped gate whose spares were used up): past its
    queue a connect would wait for ever; every hook process gives up and runs the call
    itself (None: nothing handed over)."""
    import socket

    folder = tmp_path / "g"
    folder.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "gate.sock"))
    listener.listen(2)
    monkeypatch.setenv("CONTINUUM_GATE_SOCKET", str(folder / "gate.sock"))
    monkeypatch.setattr(resident_call, "FIRST_ANSWER", 0.05)
    import threading

    answers: list[int | None] = []
    caller = threading.Thread(
        target=lambda: answers.extend(resident_call.call(["pre-tool"]) for _ in range(12)),
        daemon=True,
    )
    try:
        caller.start()
        caller.join(timeout=60)  # a bound, not a timing: a blocked connect never returns
        assert not caller.is_alive(), "a hook process waits on a full queue without end"
    finally:
        listener.close()
    assert answers == [None] * 12
