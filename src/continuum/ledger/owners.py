"""Who performs an action and whether they are still alive: the owner record (host, pid,
process start time, session), compared exactly, and the lease that lets another host judge
a started action interrupted. Reads /proc; imports only the leaves."""

from __future__ import annotations

import os
from typing import Any


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state first), or None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return data.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), against pid reuse."""
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None  # field 22: start time in ticks


def host_name() -> str:
    """This machine's name as an owner records it: the kernel's node name, which is what
    ``socket.gethostname()`` returns (without importing ``socket``; a test compares them)."""
    uname = getattr(os, "uname", None)
    if uname is None:  # not Unix: ask the socket module
        import socket

        return socket.gethostname()
    return str(uname().nodename)


def current_owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": host_name(), "pid": pid, "start": process_start(pid)}


def same_owner(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Is ``a`` the process (or host session) ``b`` names? Host and pid must match, the
    process start time where both have one, and the session exactly: an owner without a
    session (a process acting for itself, such as the operator page inside an HTTP server)
    is not the owner of one of that process's sessions, nor the other way round."""
    return (
        bool(a)
        and (a.get("host"), a.get("pid")) == (b.get("host"), b.get("pid"))
        and (a.get("start") is None or b.get("start") is None or a["start"] == b["start"])
        and a.get("session") == b.get("session")
    )


def describe_owner(owner: dict[str, Any]) -> str:
    where = f"process {owner.get('pid')} on host {owner.get('host')}"
    return where + (f" (session {owner['session']})" if owner.get("session") else "")


def owner_alive(owner: dict[str, Any], lease_expires: float | None, now: float) -> bool:
    """Is the process that intercepted still there to finish the action?

    Same host: its process id (and start time, against pid reuse) tells at once.
    Another host: only the lease can tell.
    """
    if owner.get("host") == host_name() and isinstance(owner.get("pid"), int):
        pid = owner["pid"]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        fields = _proc_stat(pid)
        if fields is None:
            return True  # kill() says it exists and /proc cannot say more
        if fields[0] in ("Z", "X"):
            return False  # a zombie nobody reaped (common in containers) is dead
        start = fields[19] if len(fields) > 19 else None
        return start is None or owner.get("start") in (None, start)
    return lease_expires is not None and lease_expires > now
