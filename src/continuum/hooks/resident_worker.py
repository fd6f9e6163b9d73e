"""One call in the resident gate: a forked worker becomes the hook process that handed it
over and runs its ``continuum hook`` there (``resident.py`` keeps the workers).

The worker takes the call only when it would answer as the hook process would: the same
continuum version, interpreter and interpreter settings (flags, UTF-8 mode, file-system
encoding, the ``PYTHON*`` variables that change what code runs or what it writes), the
same namespaces (mount, pid, network, user...), a caller the kernel names (its pid and
user, ``SO_PEERCRED``). Anything else is ``RUN_HERE``: the hook process runs the call itself.

Taking it, the worker says ``READY`` and waits for the hook process's ``GO`` (a hook
process that gave up waiting sends none, and then nothing is done); it then takes on the
hook process's standard input, output and error (``dup2`` of the descriptors passed),
directory, environment, locale, umask and text encodings, reads the host's parent from the
caller (the host of the call, as a hook process reads its own), and runs
``entry.process_main``; its exit status goes back as ``EXITED`` + status.

Before waiting for a call, a spare rehearses (``Rehearsal``): it plays a gated call, its
settlement and a call matching no rule on a copy of a scratch store, so the pages a call
writes to are its own already (a fork shares the gate's memory until written: about a
thousand page copies, milliseconds, otherwise on the caller's path). The rehearsal runs
in a thread of its own at idle priority (``SCHED_IDLE`` is per thread: the worker itself
keeps the normal policy, which an unprivileged process could not get back).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from continuum.hooks import resident_call as wire
from continuum.version import __version__

MAX_BODY = 4 * 1024 * 1024  # argument list and environment: far below this
GO_WAIT = 5.0  # seconds a worker waits for GO after READY
# Variables that change which code runs or what it writes: a caller whose differ from the
# gate's runs its call itself.
INTERPRETER_ENV = (
    b"PYTHONPATH",
    b"PYTHONHOME",
    b"PYTHONOPTIMIZE",
    b"PYTHONUTF8",
    b"PYTHONWARNINGS",
    b"PYTHONSAFEPATH",
    b"PYTHONNOUSERSITE",
    b"PYTHONUSERBASE",
    b"PYTHONPLATLIBDIR",
    b"PYTHONDEVMODE",
    b"PYTHONINTMAXSTRDIGITS",
)
NAMESPACES = ("mnt", "pid", "net", "user", "ipc", "uts")


@dataclass(frozen=True)
class Call:
    """One hook call as its process handed it over (``resident_call.request_body``)."""

    version: str
    executable: str
    interpreter: str
    umask: int
    cwd: bytes
    stdout_text: tuple[str, str]  # encoding, errors
    stderr_text: tuple[str, str]
    argv: list[str]
    environ: dict[bytes, bytes]


def parse_call(body: bytes) -> Call:
    """The request's fields; ValueError when malformed."""
    parts = body.split(b"\0")
    if len(parts) < 11 or parts[0] != wire.PROTOCOL.encode():
        raise ValueError("not a continuum gate request")
    argc = int(parts[10])
    if argc < 0 or 11 + argc > len(parts):
        raise ValueError("argument count out of range")
    environ: dict[bytes, bytes] = {}
    for entry in parts[11 + argc :]:
        key, sep, value = entry.partition(b"=")
        if not sep or not key:
            raise ValueError("malformed environment entry")
        environ[key] = value
    umask = int(parts[4])
    if not 0 <= umask <= 0o777:
        raise ValueError("umask out of range")
    return Call(
        version=parts[1].decode(),
        executable=os.fsdecode(parts[2]),
        interpreter=parts[3].decode(),
        umask=umask,
        cwd=parts[5],
        stdout_text=(parts[6].decode(), parts[7].decode()),
        stderr_text=(parts[8].decode(), parts[9].decode()),
        argv=[os.fsdecode(a) for a in parts[11 : 11 + argc]],
        environ=environ,
    )


# -- whether to take a call ----------------------------------------------------------------------


_GATE_ENV: dict[bytes, bytes | None] = {}


def remember_gate_env() -> None:
    """The gate's own interpreter variables, as it started (compared with each caller's)."""
    _GATE_ENV.update({k: os.environb.get(k) for k in INTERPRETER_ENV})


def same_interpreter(call: Call) -> bool:
    """Whether this worker, set to the caller's locale, runs as the caller's interpreter
    would (this worker serves this call or none: its locale is changed for good)."""
    if not (
        call.version == __version__
        and call.executable == sys.executable
        and all(call.environ.get(k) == v for k, v in _GATE_ENV.items())
    ):
        return False
    import locale

    for name in (b"LC_ALL", b"LC_CTYPE", b"LANG"):
        if name in call.environ:
            os.environb[name] = call.environ[name]
        else:
            os.environb.pop(name, None)
    with contextlib.suppress(locale.Error):
        locale.setlocale(locale.LC_CTYPE, "")  # what Python sets at start-up
    return call.interpreter == wire.interpreter()


def same_namespaces(caller: int) -> bool:
    """Whether the caller lives in this process's namespaces (a caller the gate cannot see
    is pid 0: no)."""
    if caller <= 0:
        return False
    try:
        return all(
            os.readlink(f"/proc/{caller}/ns/{ns}") == os.readlink(f"/proc/self/ns/{ns}")
            for ns in NAMESPACES
        )
    except OSError:
        return False


def take(conn: object) -> tuple[Call, list[int], int] | None:
    """Read one call from ``conn`` and hand-shake it: the call, its descriptors and the
    caller's parent (read once the caller said ``GO``: it waits, alive, so its pid is its
    own); None when nothing is to be done (another user's process: no answer at all; a
    malformed request; a caller this worker would not answer as itself: ``RUN_HERE``; no
    ``GO``)."""
    import socket

    assert isinstance(conn, socket.socket)
    fds: list[int] = []
    try:
        if wire.peer_uid(conn) != os.getuid():
            return None
        caller = wire.peer_pid(conn)
        conn.settimeout(5.0)  # a caller that connects and sends nothing is dropped
        header = _recv_exactly(conn, wire.HEADER_BYTES)
        size = int.from_bytes(header or b"", "big")
        body = _recv_exactly(conn, size) if header and size <= MAX_BODY else None
        if body is None:
            raise ValueError("a request cut short")
        call = parse_call(body)
        if not same_interpreter(call) or not same_namespaces(caller):
            conn.sendall(wire.RUN_HERE)
            raise ValueError("not a call this worker answers as its caller would")
        conn.sendall(wire.READY)
        conn.settimeout(GO_WAIT)
        go, fds, _flags, _addr = socket.recv_fds(conn, 1, 3)
        if go != wire.GO or len(fds) != 3:
            raise ValueError("no GO: the caller runs the call itself")
        conn.settimeout(None)
        parent = caller_parent(caller)
        if parent is None:
            raise ValueError("the caller is gone")
        return call, fds, parent
    except (OSError, ValueError, UnicodeDecodeError):
        _close(fds)
        return None


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _recv_exactly(conn: object, size: int) -> bytes | None:
    import socket

    assert isinstance(conn, socket.socket)
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(min(65536, size - len(chunks)))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


# -- becoming the hook process ---------------------------------------------------------------------


def become(call: Call, fds: list[int], parent: int) -> None:
    """Take on the hook process's descriptors, directory, environment, locale, umask, text
    streams and parent. The gate keeps its own descriptors above 2 (``resident.serve``),
    so ``fds`` never land on 0-2 before this."""
    import locale

    import continuum.log as log
    from continuum.hooks import effect_path

    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(call.cwd)
    os.umask(call.umask)
    os.environ.clear()
    for key, value in call.environ.items():
        os.environb[key] = value
    with contextlib.suppress(locale.Error):
        locale.setlocale(locale.LC_CTYPE, "")  # what Python sets at start-up
    sys.stdin = _stream(0, "r", None, line=False)
    sys.stdout = _stream(1, "w", call.stdout_text, line=os.isatty(1))
    sys.stderr = _stream(2, "w", call.stderr_text, line=True)  # as Python's own stderr
    sys.argv = ["continuum", "hook", *call.argv]
    log.reset()  # the caller's CONTINUUM_LOG_LEVEL, not the gate's
    effect_path.CALLER_PARENT = parent


def caller_parent(caller: int) -> int | None:
    """The caller's parent, read while the caller waits for its answer (alive, so its pid
    is its own): the host's side of the call."""
    from continuum.hooks.effect_path import _parent_of

    found = _parent_of(caller)
    return None if found is None else found[0]


def _stream(fd: int, mode: str, text: tuple[str, str] | None, *, line: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    encoding, errors = text or ("utf-8", "strict")
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors=errors)
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=line
    )


def run(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)``'s exit status, as the hook process would have exited with it; the
    hook's output let go of before this copy of the gate exits (the host reads it to its
    end, and tearing a copy down takes milliseconds)."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - what an uncaught error ends a process with
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"continuum hook failed in the resident gate: {type(e).__name__}: {e}\n"
            )
        status = 2 if argv[:1] == ["pre-tool"] else 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the host may have closed its end
            stream.flush()
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.close(fd)
    return status


# -- the rehearsal ----------------------------------------------------------------------------------


class Rehearsal:
    """A scratch project whose calls every spare plays before it waits for a real one (see
    the module). Best effort: a rehearsal that fails leaves a spare that is merely slower."""

    REGISTRY = (
        "[[effect]]\n"
        'tool = "Bash"\n'
        "match = { command = '^\\./send ' }\n"
        'action_type = "rehearsal"\n'
        'key = "{command}"\n'
    )

    def __init__(self, folder: str) -> None:
        import subprocess
        import tempfile

        _remove_stale(folder)
        self.folder = tempfile.mkdtemp(prefix=f"rehearsal-{os.getpid()}-", dir=folder)
        self.project = os.path.join(self.folder, "project")
        self.template = os.path.join(self.folder, "template.db")
        os.makedirs(os.path.join(self.project, ".continuum"))
        registry = os.path.join(self.project, ".continuum", "effects.toml")
        with open(registry, "w", encoding="utf-8") as f:
            f.write(self.REGISTRY)
        accept = ["hooks", "accept", "--dir", self.project, "--run", "rehearsal", "--yes"]
        done = subprocess.run(
            [sys.executable, "-m", "continuum", "--db", self.template, *accept],
            capture_output=True,
            env={**os.environ, wire.SOCKET_ENV: "off"},
            timeout=60,
            check=False,
        )
        self.ready = done.returncode == 0

    def play_idle(self) -> None:
        """``play`` in a thread of its own at idle priority; back when it is done."""
        import threading

        def idle_play() -> None:
            with contextlib.suppress(OSError, AttributeError):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread
            self.play()

        player = threading.Thread(target=idle_play, name="rehearsal", daemon=True)
        player.start()
        player.join()

    def play(self) -> None:
        """The calls, on a copy of the template store, then the copy removed."""
        import json
        import shutil

        if not self.ready:
            return
        from continuum.faults import arm
        from continuum.hooks import entry

        arm("")  # the gate's own environment arms nothing in a rehearsal
        db = os.path.join(self.folder, f"spare-{os.getpid()}.db")
        saved = sys.stdin, sys.stdout, sys.stderr
        try:
            shutil.copyfile(self.template, db)
            with open(os.devnull, "w", encoding="utf-8") as null:
                sys.stdout = sys.stderr = null
                args = ["--host", "claude-code", "--db", db, "--run", "rehearsal"]
                send = {"tool_name": "Bash", "tool_input": {"command": "./send it"}}
                echo = {"tool_name": "Bash", "tool_input": {"command": "echo it"}}
                done = {**send, "tool_response": {"stdout": "", "stderr": "", "interrupted": False}}
                for kind, event in (("pre-tool", echo), ("pre-tool", send), ("post-tool", done)):
                    data = json.dumps({"session_id": "rehearsal", "cwd": self.project, **event})
                    sys.stdin = io.TextIOWrapper(io.BytesIO(data.encode()))
                    entry.main([kind, *args, "--project", self.project])
        except Exception:  # noqa: BLE001 - a rehearsal only ever saves time
            pass
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(db + suffix)

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _remove_stale(folder: str) -> None:
    """Rehearsal folders of gates that are gone (killed before they could remove theirs)."""
    import re
    import shutil

    for name in os.listdir(folder):
        found = re.fullmatch(r"rehearsal-(\d+)-\w+", name)
        if found and not os.path.exists(f"/proc/{found.group(1)}"):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
