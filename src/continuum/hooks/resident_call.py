"""A hook process handing its call to the resident gate (``continuum hooks serve``).

A hook process pays an interpreter start plus the imports of continuum's gate, the store
and, for a refusal, the models, on every tool call. When the person running the agent has
started a resident gate (``resident.py``), the hook process only connects to it, hands it
its argument list, working directory, environment and its standard input, output and
error themselves (``SCM_RIGHTS``), and exits with the status the gate's forked worker
ended with: the worker ran the very same ``entry.process_main`` on those descriptors.

Loaded by the ``continuum`` console script before anything else of continuum, so it
imports only the interpreter's C ``_socket`` (the ``socket`` module would load ``enum``
and ``selectors``, a few milliseconds on every call).

When the gate is not there (no socket, nobody listening, a socket of another user, not
Linux) or does not take the call (another continuum version, interpreter or interpreter
setting, another namespace; a gate stopping, stopped (``SIGSTOP``) or too busy to take it
within ``FIRST_ANSWER`` seconds), ``call`` returns None and the hook runs in this process,
exactly as without a gate: nothing was done for it. The hand-over is two steps: a worker
says it is ready (``READY``), and only the hook process's ``GO`` lets it start; a hook
process that gave up waiting sends no ``GO``, and the worker then does nothing. After
``GO`` a lost answer is never retried here (the work may be done): a pre-tool call is
refused (fail closed), any other ends with status 1; so is a pre-tool call still
unanswered after its store's lock wait and ``ANSWER_MARGIN`` seconds more.

``CONTINUUM_GATE_SOCKET`` names the socket (``off`` or empty: never use a gate); by
default ``/tmp/continuum-UID/gate.sock``. Its directory must be this user's and closed to
everyone else, or it is not used.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping

SOCKET_ENV = "CONTINUUM_GATE_SOCKET"
HEADER_BYTES = 4  # the request body's length, big-endian
RUN_HERE = b"R"  # a worker's answer when it will not run the call: run it in this process
READY = b"A"  # a worker has checked the call and waits for GO
GO = b"G"  # the hook process's word, with its descriptors: run it (the work may be done)
EXITED = b"X"  # followed by one byte: the worker's exit status
PROTOCOL = "continuum-gate/2"
FIRST_ANSWER = 2.0  # seconds a hook process waits for a worker's READY or RUN_HERE
ANSWER_MARGIN = 30.0  # seconds past the store's lock wait a pre-tool call waits after GO
WAIT_MS = 10_000  # the hooks' lock wait when CONTINUUM_HOOK_WAIT_MS is unset (effect_path)


def socket_path(environ: Mapping[str, str] | None = None) -> str | None:
    """Where this user's resident gate listens, or None when gates are switched off.

    The default does not depend on the environment (hosts start hooks with environments
    of their own; some strip it), only on the user: ``/tmp/continuum-UID/gate.sock``."""
    env = os.environ if environ is None else environ
    named = env.get(SOCKET_ENV)
    if named is not None:
        named = named.strip()
        return None if named in ("", "off") else named
    return os.path.join("/tmp", f"continuum-{os.getuid()}", "gate.sock")


def private_dir(path: str) -> str | None:
    """None when ``path``'s directory is this user's and closed to others, else why not."""
    import stat

    folder = os.path.dirname(path) or "."
    try:
        st = os.lstat(folder)
    except OSError as e:
        return f"{folder} cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a directory"
    if st.st_uid != os.getuid():
        return f"{folder} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o077:
        return f"{folder} is open to other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def peer_uid(sock: object) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    import _socket

    assert isinstance(sock, _socket.socket)
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def peer_pid(sock: object) -> int:
    import _socket

    assert isinstance(sock, _socket.socket)
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[0:4], sys.byteorder)


def _connect(path: str) -> object | None:
    if private_dir(path) is not None:
        return None  # before importing _socket: most users never start a gate
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        # A gate that accepts nobody (stopped) fills its queue: never wait on it without end.
        sock.settimeout(FIRST_ANSWER)
        sock.connect(path)
        if peer_uid(sock) != os.getuid():
            sock.close()
            return None  # someone else's listener: never hand it a call
    except OSError:
        sock.close()
        return None
    return sock


def _text(stream: object) -> bytes:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    errors = getattr(stream, "errors", None) or "strict"
    return f"{encoding}\0{errors}".encode()


# The interpreter's flags that change which code runs or what it writes (not, say,
# dont_write_bytecode or hash_randomization, which some machines set everywhere).
ANSWERING_FLAGS = (
    "optimize",
    "isolated",
    "ignore_environment",
    "no_user_site",
    "no_site",
    "safe_path",
    "dev_mode",
    "bytes_warning",
    "warn_default_encoding",
    "int_max_str_digits",
)


def interpreter() -> str:
    """What of this interpreter's start-up settings could change a call's answer: the
    flags above (``-O``, ``-E``, ``-I``...), the file-system and the default encodings."""
    flags = ",".join(str(getattr(sys.flags, name, "")) for name in ANSWERING_FLAGS)
    return f"{flags}|{sys.getfilesystemencoding()}|{preferred_encoding()}"


def preferred_encoding() -> str:
    """The encoding ``open`` and ``subprocess`` use by default here (UTF-8 mode, or the
    locale's), without importing ``locale``."""
    if sys.flags.utf8_mode:
        return "utf-8"
    import _locale

    return str(_locale.nl_langinfo(_locale.CODESET)).lower().replace("_", "-")


def request_body(argv: list[str], cwd: bytes) -> bytes:
    """What the worker needs to run the hook as this process would: the fields NUL
    separated (none can hold a NUL), the environment last."""
    from continuum.version import __version__

    mask = os.umask(0o077)
    os.umask(mask)
    head = [
        PROTOCOL.encode(),
        __version__.encode(),
        os.fsencode(sys.executable),
        interpreter().encode(),
        str(mask).encode(),
        cwd,
        _text(sys.stdout),
        _text(sys.stderr),
        str(len(argv)).encode(),
        *(os.fsencode(a) for a in argv),
    ]
    env = [k + b"=" + v for k, v in os.environb.items()]
    return b"\0".join(head + env)


def call(argv: list[str]) -> int | None:
    """Run ``continuum hook ARGV`` in the resident gate: its exit status, or None when no
    gate took the call (nothing was sent; run it here)."""
    if not sys.platform.startswith("linux"):
        return None  # SO_PEERCRED: the gate knows its callers on Linux only
    path = socket_path()
    if path is None:
        return None
    try:
        cwd = os.fsencode(os.getcwd())
    except OSError:
        return None  # a removed working directory: the hook says so itself
    body = request_body(argv, cwd)  # before connecting: a worker waits from then on
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
    sock = _connect(path)
    if sock is None:
        return None
    import _socket

    assert isinstance(sock, _socket.socket)
    try:
        try:
            sock.sendall(len(body).to_bytes(HEADER_BYTES, "big") + body)  # timed, as connect
            first = sock.recv(1)
            if first != READY:
                return None  # told to run it here, or no worker took it: nothing was done
            sock.settimeout(None)
            # The descriptors go with GO, never before: in a queue nobody reads, they would
            # keep the host's pipes open (it waits for their end) after this process ran
            # the call itself.
            sock.sendmsg([GO], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        except OSError:  # the gate stopped, is stopped, or is too busy: nothing was done
            return None
        answer = b""
        try:
            sock.settimeout(_answer_bound(argv[:1]))
            while len(answer) < 2:
                chunk = sock.recv(2 - len(answer))
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    finally:
        sock.close()
    if len(answer) == 2 and answer[:1] == EXITED:
        return answer[1]
    return _lost(argv[:1])


def _answer_bound(kind: list[str]) -> float | None:
    """How long a hook process waits for its answer after GO: a pre-tool call as long as
    its store's lock wait and a margin (then it refuses: a host that times a hook out lets
    the tool run); the other hooks (a session start runs probes) as long as it takes."""
    if kind != ["pre-tool"]:
        return None
    text = os.environ.get("CONTINUUM_HOOK_WAIT_MS", "")
    wait = int(text) if text.isdigit() else WAIT_MS
    return wait / 1000 + ANSWER_MARGIN


def _lost(kind: list[str]) -> int:
    """The gate took the call and gave no status (its worker was killed, the gate
    stopped): never run it again here, the work may be done."""
    if kind == ["pre-tool"]:
        from continuum.hooks.args import deny

        return deny(
            "continuum refused this tool call: the resident gate (continuum hooks serve) took "
            "it and gave no answer (its worker ended, or did not answer in time), so it may "
            "or may not have been recorded. "
            "Tell the user; `continuum hooks serve` restarts the gate, and without it "
            "every hook runs in its own process"
        )
    sys.stderr.write(
        "continuum hook: the resident gate took this call and gave no answer; "
        "what it recorded is in the log (`continuum status`)\n"
    )
    return 1
