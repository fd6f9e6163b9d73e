"""The resident gate: ``continuum hooks serve`` answers hook calls from a warm process.

A hook process spends most of its time starting: the interpreter, then continuum's gate,
the store and the ledger, the models for a refusal. The resident gate imports all of that
once and keeps spare workers, forks of itself, waiting on a Unix socket; each takes one
call a hook process hands over (``resident_call.py``), becomes that process and runs the
very same ``entry.process_main`` (``resident_worker.py``), and ends with it. Nothing is
carried from one call to the next: each worker is a fresh copy of the warm gate.

What the gate trusts is what a hook process trusts: the caller runs as this user (the
kernel says so, ``SO_PEERCRED``; any other gets no answer), the host is the caller's
parent (read from ``/proc`` for the caller's pid, as a hook process reads its own), and
everything written has origin ``external_agent``, as before. A caller the worker would
not answer as itself (another continuum version, interpreter or setting, another
namespace) is told to run the call itself. The gate stops by itself within
``CHECK_EVERY`` seconds of continuum's code changing on disk (an upgrade), to be started
again on the new code.

Workers live in sessions of their own (a Ctrl-C at the gate's terminal, or a stop of the
gate, never cuts a call short: a call taken is served to its end). Spares waiting for a
call end with the gate, however it ends (``PR_SET_PDEATHSIG``). The socket's directory is
created for this user alone (mode 0700); one that exists with other owners or modes is
refused, never repaired. Linux only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from typing import Any

from continuum.errors import UsageError
from continuum.hooks import resident_call as wire
from continuum.hooks import resident_worker as worker
from continuum.version import __version__

SPARES = 4  # workers waiting for a call (a host's parallel calls, a call during a fork)
CHECK_EVERY = 2.0  # seconds between two looks at continuum's code on disk
PR_SET_PDEATHSIG = 1  # prctl(2)
LOST_SPARES = 5  # spares lost in a row before the gate forks more slowly
DRAIN = 2.0  # seconds a stopping gate waits for the workers serving calls to say they ended
QUIET = 0.2  # seconds after an answer before new spares are forked (unless one is left)
DEFER = 0.05  # seconds a new spare's fork waits for a worker serving a call
# A worker's messages to the gate, each with its pid (4 bytes): it took a connection; it
# ran the call and is done; it ran nothing and is done.
TOOK, DONE, DECLINED = b"T", b"D", b"d"
MESSAGE = 5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
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
    "locale",
    "socket",
    "threading",
)


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
    worker.remember_gate_env()
    for name in PRELOAD:
        importlib.import_module(name)
    from continuum.digest import use_builtin_sha256

    use_builtin_sha256()
    with contextlib.suppress(OSError):
        _libc()
    gc.collect()
    gc.freeze()  # workers share these pages instead of copying them on the first collection


def standard_fds() -> None:
    """Descriptors 0-2 open (on /dev/null where closed), so that the gate's own socket and
    pipes are never among them: a worker puts the hook process's there."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


class Gate:
    """Spare workers waiting on the socket, kept ready by this (parent) process.

    Each spare is a fork of the warm gate blocked in ``accept``: the kernel hands a hook
    process's connection to one of them, which tells the parent, serves that one call,
    tells the parent again and exits; the parent forks new spares once calls have been
    quiet for a moment (a fork's CPU kept off the next call's way) or at once when at most
    one is left. ``say`` writes one line for the person who started the gate."""

    def __init__(
        self,
        path: str,
        say: Callable[[str], None],
        spares: int = SPARES,
        rehearsal: worker.Rehearsal | None = None,
    ) -> None:
        self.path = path
        self.say = say
        self.spares = spares
        self.rehearsal = rehearsal
        self.served = 0
        self.declined = 0
        self.idle: set[int] = set()  # spares waiting in accept
        self.busy: dict[int, float] = {}  # workers serving a call, since when
        self.lost = 0  # spares that ended without taking a call, since one last served
        self.forked_at = 0.0
        self.answered_at = 0.0  # when a worker last said it was done
        self.pending = b""  # a message read in part
        self.stopping = False
        self.fingerprint = code_fingerprint()
        self.sock = listen(path)
        self.inode = os.stat(path).st_ino

    def serve(self) -> int:
        import select
        import socket

        assert isinstance(self.sock, socket.socket)
        taken_r, taken_w = os.pipe()
        os.set_blocking(taken_r, False)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)

        def stop(signum: int, frame: object) -> None:
            self.stopping = True
            with contextlib.suppress(OSError):
                os.write(wake_w, b"!")

        old = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
        self.say(
            f"continuum resident gate {__version__} listening on {self.path} "
            f"(pid {os.getpid()}, {self.spares} spare workers)"
        )
        why = "stopped"
        try:
            checked = time.monotonic()
            while not self.stopping:
                wait = self._replenish(taken_r, taken_w)
                ready, _, _ = select.select([taken_r, wake_r], [], [], wait)
                if taken_r in ready:
                    self._heard(os.read(taken_r, 4096))
                self._reap(taken_r)
                if time.monotonic() - checked >= CHECK_EVERY:
                    checked = time.monotonic()
                    if code_fingerprint() != self.fingerprint:
                        why = "stopped: continuum's code changed on disk since it started"
                        break
        finally:
            self.close()
            os.close(taken_w)  # the pipe ends when every worker has ended
            self._drain(taken_r)
            os.close(taken_r)
            for sig, handler in old.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
        busy = f", {len(self.busy)} still serving" if self.busy else ""
        self.say(
            f"continuum resident gate {why} after {self.served} calls "
            f"({self.declined} declined{busy})"
        )
        return 0

    def _drain(self, taken_r: int) -> None:
        """At the end: the workers' last messages, until every one has ended (spares
        waiting in ``accept`` are woken by the shut socket; one that takes a call left in
        the queue serves it) or ``DRAIN`` seconds passed (workers still serving finish on
        their own)."""
        import select

        deadline = time.monotonic() + DRAIN
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([taken_r], [], [], left)
            if not ready:
                break
            try:
                data = os.read(taken_r, 4096)
            except BlockingIOError:
                continue
            if not data:
                break  # every worker has ended
            self._heard(data)
        self._reap(taken_r)

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
        while len(self.idle) < self.spares and not self.stopping:
            self._spawn(taken_r, taken_w)
            self.forked_at = time.monotonic()
            if self.lost >= LOST_SPARES:
                break  # one at a time
        return CHECK_EVERY

    def _heard(self, data: bytes) -> None:
        """Workers' messages (``TOOK``, ``DONE``, ``DECLINED``, each with a pid); ``served``
        counts the calls run to their end."""
        data = self.pending + data
        whole = len(data) - len(data) % MESSAGE
        self.pending = data[whole:]
        for at in range(0, whole, MESSAGE):
            kind, pid = data[at : at + 1], int.from_bytes(data[at + 1 : at + MESSAGE], "big")
            if kind == TOOK:
                self.idle.discard(pid)
                self.busy[pid] = time.monotonic()
                continue
            self.busy.pop(pid, None)
            self.answered_at = time.monotonic()
            if kind == DONE:
                self.served += 1
                self.lost = 0
            else:
                self.declined += 1

    def _spawn(self, taken_r: int, taken_w: int) -> None:
        import socket

        assert isinstance(self.sock, socket.socket)
        gate = os.getpid()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the spare: never returns into the gate's loop
                code = 0
                try:
                    for sig in (*STOP_SIGNALS, signal.SIGCHLD):
                        signal.signal(sig, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    os.setsid()  # no terminal, no signal to the gate's process group
                    os.close(taken_r)
                    _spare(self.sock, taken_w, self.rehearsal, gate)
                except BaseException:  # noqa: BLE001
                    code = 1
                os._exit(code)
            self.idle.add(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _reap(self, taken_r: int) -> None:
        """Collect ended workers: a spare that ended without taking a call is replaced (ever
        more slowly while spares keep dying so); a worker that ended mid-call is said. The
        messages already written are read first: a worker's last words precede its end."""
        with contextlib.suppress(BlockingIOError, OSError):
            while data := os.read(taken_r, 4096):
                self._heard(data)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.idle:
                self.idle.discard(pid)
                self.lost += 1
                if self.lost == LOST_SPARES:
                    self.say(f"{self.lost} spare workers ended before taking a call: slowing down")
            elif pid in self.busy:
                del self.busy[pid]
                self.say(
                    f"worker {pid} ended while serving a call ({_ended(status)}): its hook "
                    "process refuses a pre-tool call; what it recorded is in the log"
                )

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


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def _spare(listener: object, taken_w: int, rehearsal: worker.Rehearsal | None, gate: int) -> None:
    """A spare worker: rehearse, wait for one call, tell the parent, serve it, return."""
    import socket

    from continuum.faults import arm
    from continuum.hooks import entry

    assert isinstance(listener, socket.socket)
    _die_with_the_gate(signal.SIGTERM, gate)
    if rehearsal is not None:
        rehearsal.play_idle()
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
            taken = worker.take(conn) if conn.fileno() > 2 else None
            if taken is None:
                return
            call, fds, parent = taken
            ended = DONE  # from GO on, the call is this worker's
            worker.become(call, fds, parent)
            arm(os.environ.get("CONTINUUM_FAULTS", ""))
            status = worker.run(entry.process_main, call.argv)
            with contextlib.suppress(OSError):
                conn.sendall(wire.EXITED + bytes([status & 0xFF]))
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
    standard_fds()
    preload()
    prepare_dir(where)
    rehearsal = worker.Rehearsal(os.path.dirname(where))
    try:
        if not rehearsal.ready:
            say("the rehearsal store could not be made: spares start cold (slower calls)")
        gate = Gate(where, say, rehearsal=rehearsal)
        say(f"loaded in {time.monotonic() - started:.2f} s")
        return gate.serve()
    finally:
        rehearsal.close()
