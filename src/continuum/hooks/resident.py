"""The resident gate: ``continuum hooks serve`` answers hook calls from a warm process.

A hook process spends most of its time starting: the interpreter, then continuum's gate,
the store and the ledger, the models for a refusal. The resident gate imports all of that
once and then, for every call a hook process hands it (``resident_call.py``), forks a
worker that takes the hook process's own standard input, output and error (passed as
descriptors), working directory, environment and text encodings and runs the very same
``entry.process_main`` the hook process would have run; the worker's exit status goes
back to the hook process, which exits with it. Nothing is shared between calls: each
worker is a fresh copy of the warm process and ends with its call.

What the gate trusts is what a hook process trusts: the caller runs as this user (the
kernel says so, ``SO_PEERCRED``; any other is refused), the host is the caller's parent
(read from ``/proc`` for the caller's pid, as the hook process reads its own parent), and
everything written has origin ``external_agent``, as before. A caller of another
continuum version or interpreter, or a gate whose code changed on disk since it started,
is told to run the hook itself (nothing done); the gate then stops, to be started again on
the new code.

The socket's directory is created for this user alone (mode 0700); one that exists with
other owners or modes is refused, never repaired. Linux only.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from continuum.errors import UsageError
from continuum.hooks import resident_call as wire
from continuum.version import __version__

MAX_BODY = 4 * 1024 * 1024  # argument list and environment: far below this
SPARES = 4  # workers waiting for a call (a host's parallel calls, a call during a fork)
CHECK_EVERY = 2.0  # seconds between two looks at continuum's code on disk
PR_SET_PDEATHSIG = 1  # prctl(2)
LOST_SPARES = 5  # spares lost in a row before the gate forks more slowly
DRAIN = 2.0  # seconds a stopping gate waits for the workers serving calls to say they ended
QUIET = 0.2  # seconds after an answer before new spares are forked (unless one is left)
DEFER = 0.05  # seconds a new spare's fork waits for a worker serving a call
# A worker's messages to the gate, each with its pid: it took a connection; it ran the call
# and is done; it declined the call (nothing run) and is done.
TOOK, DONE, DECLINED = b"T", b"D", b"d"
PRELOAD = (
    "continuum.hooks.entry",
    "continuum.hooks.effect_path",
    "continuum.hooks.gate",
    "continuum.hooks.advice",
    "continuum.hooks.guard",
    "continuum.hooks.registry",
    "continuum.hooks.hosts",
    "continuum.hooks.briefing",
    "continuum.ledger.core",
    "continuum.ledger.gate",
    "continuum.ledger.budget",
    "continuum.ledger.approval_rules",
    "continuum.ledger.owners",
    "continuum.recovery.plain_state",
    "continuum.recovery.revalidation",
    "continuum.state.records",
    "continuum.state.action_fields",
    "continuum.store",
    "continuum.store.sqlite",
    "continuum.runtime.facade",
    "continuum.telemetry",
)


@dataclass(frozen=True)
class Call:
    """One hook call as its process handed it over."""

    version: str
    executable: str
    cwd: bytes
    stdout_text: tuple[str, str]  # encoding, errors
    stderr_text: tuple[str, str]
    argv: list[str]
    environ: dict[bytes, bytes]


def parse_call(body: bytes) -> Call:
    """The request's fields (``resident_call.request_body``); ValueError when malformed."""
    parts = body.split(b"\0")
    if len(parts) < 10 or parts[0] != wire.PROTOCOL.encode():
        raise ValueError("not a continuum gate request")
    argc = int(parts[8])
    if argc < 0 or 9 + argc > len(parts):
        raise ValueError("argument count out of range")
    argv = [os.fsdecode(a) for a in parts[9 : 9 + argc]]
    environ: dict[bytes, bytes] = {}
    for entry in parts[9 + argc :]:
        key, sep, value = entry.partition(b"=")
        if not sep or not key:
            raise ValueError("malformed environment entry")
        environ[key] = value
    return Call(
        version=parts[1].decode(),
        executable=os.fsdecode(parts[2]),
        cwd=parts[3],
        stdout_text=(parts[4].decode(), parts[5].decode()),
        stderr_text=(parts[6].decode(), parts[7].decode()),
        argv=argv,
        environ=environ,
    )


# -- the code on disk -------------------------------------------------------------------------


def code_fingerprint() -> tuple[tuple[str, int, int], ...]:
    """Every loaded continuum module's file, modification time and size: a gate whose code
    changed on disk (an upgrade, an edit of a development install) must not answer for it."""
    seen = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not (name == "continuum" or name.startswith("continuum.")):
            continue
        try:
            st = os.stat(path)
        except OSError:
            seen.append((path, -1, -1))
            continue
        seen.append((path, st.st_mtime_ns, st.st_size))
    return tuple(sorted(seen))


# -- the socket ---------------------------------------------------------------------------------


def prepare_dir(path: str) -> None:
    """The socket's directory, made private to this user if missing; refused otherwise."""
    folder = os.path.dirname(path) or "."
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UsageError(
            f"cannot create the resident gate's directory {folder}: {e.strerror}",
            code="hooks.gate_dir",
            hint=f"pass another path with --socket or {wire.SOCKET_ENV}",
        ) from e
    why = wire.private_dir(path)
    if why is not None:
        raise UsageError(
            f"the resident gate's directory is not private: {why}",
            code="hooks.gate_dir",
            hint="hook processes would not use it; use a directory only you can open "
            f"(mode 700), with --socket or {wire.SOCKET_ENV}",
        )


def listen(path: str) -> object:
    """A listening Unix socket at ``path``: a stale socket (nobody answers) is replaced,
    a live gate or any other file is refused."""
    import socket

    prepare_dir(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            raise UsageError(
                f"{path} exists and is not a socket",
                code="hooks.gate_socket",
                hint="move it away, or pass another path with --socket",
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # a gate that died: its socket answers nobody
        else:
            raise UsageError(
                f"a resident gate already answers at {path}",
                code="hooks.gate_running",
                hint="one gate serves every project of this user; stop it first to restart it",
            )
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


# -- serving -------------------------------------------------------------------------------------


def preload() -> None:
    """Import what a hook call may need, so every worker starts warm."""
    import gc
    import importlib

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    for name in PRELOAD:
        importlib.import_module(name)
    from continuum.digest import use_builtin_sha256

    use_builtin_sha256()
    with contextlib.suppress(OSError):
        _libc()
    gc.collect()
    gc.freeze()  # workers share these pages instead of copying them on the first collection


class Rehearsal:
    """A scratch project whose calls every spare plays before it waits for a real one.

    A fork shares the gate's memory until it writes to it, and running a call writes to
    much of what it touches (reference counts): about a thousand page copies, several
    milliseconds, on the caller's path. A spare that has played a gated call, a settled
    one and a call matching no rule on a copy of a scratch store has made those copies
    already. Best effort: a rehearsal that fails leaves a spare that is merely slower."""

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

    def play(self) -> None:
        """In a spare: the calls, on a copy of the template store, then the copy removed."""
        import contextlib
        import shutil

        if not self.ready:
            return
        from continuum.hooks import entry

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
                    data = json_bytes({"session_id": "rehearsal", "cwd": self.project, **event})
                    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
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


def json_bytes(value: object) -> bytes:
    import json

    return json.dumps(value).encode()


class Gate:
    """Spare workers waiting on the socket, kept ready by this (parent) process.

    Each spare is a fork of the warm gate blocked in ``accept``: the kernel hands a hook
    process's connection to one of them, which tells the parent, serves that one call,
    tells the parent again and exits; the parent forks a new spare once that call was
    answered (the fork's CPU off the caller's path) or at once when none is left. The parent looks at
    continuum's code on disk every ``CHECK_EVERY`` seconds and stops when it changed.
    ``say`` writes one line for the person who started the gate."""

    def __init__(
        self,
        path: str,
        say: Callable[[str], None],
        spares: int = SPARES,
        rehearsal: Rehearsal | None = None,
    ) -> None:
        self.path = path
        self.rehearsal = rehearsal
        self.say = say
        self.spares = spares
        self.served = 0
        self.idle: set[int] = set()  # spares waiting in accept
        self.busy: dict[int, float] = {}  # workers serving a call, since when
        self.lost = 0  # spares that ended without taking a call, since one last served
        self.forked_at = 0.0
        self.answered_at = 0.0  # when a worker last said it was done
        self.fingerprint = code_fingerprint()
        self.sock = listen(path)
        self.inode = os.stat(path).st_ino

    def serve(self) -> int:
        import select
        import socket

        assert isinstance(self.sock, socket.socket)
        taken_r, taken_w = os.pipe()
        old = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.say(
            f"continuum resident gate {__version__} listening on {self.path} "
            f"(pid {os.getpid()}, {self.spares} spare workers)"
        )
        why = "stopped"
        try:
            checked = time.monotonic()
            while True:
                self._reap()
                wait = self._replenish(taken_r, taken_w)
                ready, _, _ = select.select([taken_r], [], [], wait)
                if ready:
                    self._heard(os.read(taken_r, 4096))
                if time.monotonic() - checked >= CHECK_EVERY:
                    checked = time.monotonic()
                    if code_fingerprint() != self.fingerprint:
                        why = "stopped: continuum's code changed on disk since it started"
                        break
        except _Stop:
            pass
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            self.close()
            self._drain(taken_r)
            os.close(taken_r)
            os.close(taken_w)
            self._reap_idle()
        self.say(f"continuum resident gate {why} after {self.served} calls")
        return 0

    def _drain(self, taken_r: int) -> None:
        """At the end: the messages of workers still serving a call (they finish it on their
        own), for at most ``DRAIN`` seconds, so the count said last is right."""
        import select

        deadline = time.monotonic() + DRAIN
        while True:
            left = deadline - time.monotonic()
            waiting = bool(self.busy) and left > 0
            ready, _, _ = select.select([taken_r], [], [], min(left, 0.05) if waiting else 0)
            if ready:
                self._heard(os.read(taken_r, 4096))
                continue
            if not waiting:
                return
            self._reap()  # a worker killed mid-call says nothing more

    def _replenish(self, taken_r: int, taken_w: int) -> float:
        """Fork the spares missing, and how long to wait before looking again. A fork, and
        the new spare's rehearsal, cost milliseconds of CPU: while a call is being served or
        was answered less than ``QUIET`` seconds ago (a host's pre-tool call is followed by
        its post-tool call), they wait, unless at most one spare is left."""
        if len(self.idle) >= self.spares:
            return CHECK_EVERY
        now = time.monotonic()
        if len(self.idle) > 1:
            busy = [at for at in self.busy.values() if now - at < DEFER]
            if busy:
                return max(0.001, DEFER - (now - min(busy)))
            if now - self.answered_at < QUIET:
                return max(0.001, QUIET - (now - self.answered_at))
        if self.lost >= LOST_SPARES:  # spares die before serving: do not fork in a loop
            wait = self.forked_at + min(5.0, 0.05 * 2.0 ** (self.lost - LOST_SPARES)) - now
            if wait > 0:
                return wait
        while len(self.idle) < self.spares:
            self._spawn(taken_r, taken_w)
            self.forked_at = time.monotonic()
            if self.lost >= LOST_SPARES:
                break  # one at a time
        return CHECK_EVERY

    def _heard(self, data: bytes) -> None:
        """Workers' messages (``TOOK``, ``DONE``, ``DECLINED``, each with a pid); ``served``
        counts the calls run to their end."""
        for at in range(0, len(data) - 4, 5):
            pid = int.from_bytes(data[at + 1 : at + 5], "big")
            if data[at : at + 1] == TOOK:
                self.idle.discard(pid)
                self.busy[pid] = time.monotonic()
                continue
            self.busy.pop(pid, None)
            self.answered_at = time.monotonic()
            if data[at : at + 1] == DONE:
                self.served += 1
                self.lost = 0

    def _spawn(self, taken_r: int, taken_w: int) -> None:
        import socket

        assert isinstance(self.sock, socket.socket)
        gate = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(taken_r)
                _spare(self.sock, taken_w, self.rehearsal, gate)
            except BaseException:  # noqa: BLE001 - a spare never returns into the loop
                code = 1
            os._exit(code)
        self.idle.add(pid)

    def _reap(self) -> None:
        """Collect ended workers; a spare that ended without taking a call is replaced,
        ever more slowly while spares keep dying so (``_replenish``)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.idle:
                self.idle.discard(pid)
                self.lost += 1
                if self.lost == LOST_SPARES:
                    self.say(f"{self.lost} spare workers ended before taking a call: slowing down")
            self.busy.pop(pid, None)

    def _reap_idle(self) -> None:
        """At the end: spares waiting in ``accept`` were woken by the shutdown and leave;
        workers serving a call finish it on their own."""
        deadline = time.monotonic() + 2.0
        while self.idle and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)
        for pid in self.idle:  # still waiting after the socket closed: not serving anyone
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self._reap()

    def close(self) -> None:
        """Stop taking calls: the path is removed first (new hook processes run their calls
        themselves), then the socket is shut, which wakes every spare's ``accept``."""
        import socket

        assert isinstance(self.sock, socket.socket)
        if self.sock.fileno() < 0:
            return
        try:  # only our own socket: another gate may have taken the path since
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _spare(listener: object, taken_w: int, rehearsal: Rehearsal | None, gate: int) -> None:
    """A spare worker: rehearse, wait for one call, tell the parent, serve it, return."""
    import socket

    from continuum.faults import arm

    assert isinstance(listener, socket.socket)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    from continuum.hooks import effect_path, entry

    _die_with_the_gate(signal.SIGTERM, gate)
    arm("")  # the gate's own environment arms nothing in a rehearsal
    if rehearsal is not None:
        with _only_when_idle():
            rehearsal.play()
    try:
        conn, _ = listener.accept()
    except OSError:
        return  # the gate is stopping
    _die_with_the_gate(0, gate)  # a call taken is served to its end, whatever becomes of the gate
    me = os.getpid().to_bytes(4, "big")
    os.write(taken_w, TOOK + me)
    listener.close()
    ended = DECLINED
    try:
        with conn:
            taken = _take(conn)
            if taken is None:
                return
            call, fds, caller = taken
            _become(call, fds)
            arm(os.environ.get("CONTINUUM_FAULTS", ""))
            effect_path.CALLER_PID = caller
            conn.sendall(wire.ACCEPTED)  # from here on, the call is this worker's
            ended = DONE
            status = _run(entry.process_main, call.argv)
            _send(conn, wire.EXITED + bytes([status & 0xFF]))
        with contextlib.suppress(OSError, AttributeError):  # the rest (this copy's exit)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # waits for idle CPU
    finally:
        os.write(taken_w, ended + me)


@functools.cache
def _libc() -> Any:
    """The C library's functions (``prctl``), loaded once in the gate for every spare."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _die_with_the_gate(signum: int, gate: int) -> None:
    """Have the kernel send ``signum`` to this spare when the gate ends, however it ends
    (``PR_SET_PDEATHSIG``; 0: no longer), so that spares of a gate killed outright do not
    go on answering at its socket. A spare whose gate is already gone leaves."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if signum and os.getppid() != gate:
        os._exit(0)


@contextlib.contextmanager
def _only_when_idle() -> Iterator[None]:
    """Run the block only on CPU time nobody else wants (``SCHED_IDLE``): a spare's
    rehearsal must not slow the calls being served meanwhile. Back to the normal policy
    after it (allowed without privileges at nice 0)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _take(conn: object) -> tuple[Call, list[int], int] | None:
    """Read one call from ``conn``: None when it is not to be served here (another user's
    process, a malformed request, another continuum; told to run it itself when it can
    be told)."""
    import socket

    assert isinstance(conn, socket.socket)
    fds: list[int] = []
    try:
        if wire.peer_uid(conn) != os.getuid():
            return None  # another user's process: no answer at all
        caller = wire.peer_pid(conn)
        conn.settimeout(5.0)  # a caller that connects and sends nothing is dropped
        header, fds, _flags, _addr = socket.recv_fds(conn, wire.HEADER_BYTES, 3)
        if len(header) != wire.HEADER_BYTES or len(fds) != 3:
            _close(fds)
            return None
        size = int.from_bytes(header, "big")
        body = _recv_exactly(conn, size) if size <= MAX_BODY else None
        if body is None:
            _close(fds)
            return None
        call = parse_call(body)
        conn.settimeout(None)
        if call.version != __version__ or call.executable != sys.executable:
            conn.sendall(wire.RUN_HERE)  # another install: it runs its own code
            _close(fds)
            return None
        return call, fds, caller
    except (OSError, ValueError, UnicodeDecodeError):
        _close(fds)
        return None


def _close(fds: list[int]) -> None:
    for fd in fds:
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


def _stream(fd: int, mode: str, text: tuple[str, str] | None) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    encoding, errors = text or ("utf-8", "strict")
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors=errors)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors)


def _become(call: Call, fds: list[int]) -> None:
    """Take on the hook process's descriptors, directory, environment and text streams."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(call.cwd)
    os.environ.clear()
    for key, value in call.environ.items():
        os.environb[key] = value
    sys.stdin = _stream(0, "r", None)
    sys.stdout = _stream(1, "w", call.stdout_text)
    sys.stderr = _stream(2, "w", call.stderr_text)
    sys.argv = ["continuum", "hook", *call.argv]


def _run(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)``'s exit status, as the hook process would have exited with it; the
    hook's output let go of before this copy of the gate exits (the host reads it to its
    end, and tearing a copy down takes milliseconds)."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
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


def _send(conn: object, data: bytes) -> None:
    import socket

    assert isinstance(conn, socket.socket)
    with contextlib.suppress(OSError):
        conn.sendall(data)


def serve(path: str | None, say: Callable[[str], None]) -> int:
    """``continuum hooks serve``: preload, listen, answer until SIGTERM or SIGINT."""
    if not sys.platform.startswith("linux"):
        raise UsageError(
            "the resident gate runs on Linux only",
            code="hooks.gate_platform",
            hint="hooks run in their own processes here, as without a gate",
        )
    where = path or wire.socket_path()
    if where is None:
        raise UsageError(
            f"{wire.SOCKET_ENV} switches the resident gate off",
            code="hooks.gate_off",
            hint=f"unset {wire.SOCKET_ENV}, or pass --socket PATH",
        )
    where = os.path.abspath(where)
    started = time.monotonic()
    preload()
    prepare_dir(where)
    rehearsal = Rehearsal(os.path.dirname(where))
    try:
        if not rehearsal.ready:
            say("the rehearsal store could not be made: spares start cold (slower calls)")
        gate = Gate(where, say, rehearsal=rehearsal)
        say(f"loaded in {time.monotonic() - started:.2f} s")
        return gate.serve()
    finally:
        rehearsal.close()
