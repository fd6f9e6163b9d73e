"""Tool-definition pins: a server may not change what a tool does under the agent.

The gateway hashes each upstream tool's definition (SHA-256 of the canonical JSON of its
``name``, ``description`` and ``inputSchema``) and keeps the hashes in a pins file
(default ``.continuum/gateway-pins.json``), one section per upstream server::

    {"version": 1, "servers": {"NAME": {
        "tools":   {"send_invoice": {"sha256": "...", "description": "...", "pinned_at": "...",
                                     "accepted_at"?: "..."}},
        "pending": {"send_invoice": {"sha256": "...", "pinned_sha256": "...",
                                     "description": "...", "seen_at": "..."}}}},
     "accepted": [{"server": "NAME", "tool": "send_invoice", "old_sha256": "...",
                   "new_sha256": "...", "accepted_at": "...", "by": "human",
                   "via": {"channel": "terminal"}}, ...]}

- A tool never seen before is pinned on first sight (trust on first use: the first
  definition is the one the operator wired the gateway in front of).
- A tool whose definition differs from its pin is not exposed and calls to it are
  refused; the new definition is recorded under ``pending`` so that a person can review
  and accept it offline (``continuum gateway accept``), which moves it to ``tools``
  (with ``accepted_at``: a pin a person accepted, not one taken on first sight) and
  appends the acceptance to ``accepted``, a history that is only ever appended to (a
  file written before it existed has none; ``continuum audit --all`` exports it).
- A pinned tool the server no longer lists stays pinned (if it comes back changed, it is
  refused like any other change).

The file is replaced atomically (a private temporary file, fsynced, renamed, the
directory fsynced): a crash leaves the old pins or the new ones, never half a file. Every
change is read, made and written under an exclusive lock (``locked_pins``: ``flock`` on
``gateway-pins.json.lock`` beside it), so a gateway pinning a tool while a person accepts
a change cannot write over the acceptance (or the person over the new pin).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from continuum.errors import UsageError
from continuum.eventlog.canonical import digest
from continuum.safe_files import create_private, fsync_dir, partial_name

PINS_PATH = os.path.join(".continuum", "gateway-pins.json")
VERSION = 1


def tool_digest(name: str, description: str | None, input_schema: Any) -> str:
    """The pin of one tool definition."""
    return digest({"name": name, "description": description, "inputSchema": input_schema})


@dataclass
class Judgement:
    """What ``judge`` found in one tool listing."""

    exposed: list[str] = field(default_factory=list)  # names whose definition matches its pin
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (pinned, new)
    pinned_now: list[str] = field(default_factory=list)  # new tools pinned on first sight
    digests: dict[str, str] = field(default_factory=dict)  # name -> its definition's digest
    modified: bool = False  # the pins changed: a new pin, or a pending change added or gone


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bad(path: Path, problem: str) -> UsageError:
    return UsageError(
        f"gateway pins {path}: {problem}",
        code="gateway.bad_pins",
        hint="restore the file from a backup, or remove it so every tool is pinned again "
        "on first sight (only if you trust the servers' current definitions)",
        path=str(path),
    )


class Pins:
    """The pins file, in memory; ``save`` writes it back."""

    def __init__(self, path: Path, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = data or {"version": VERSION, "servers": {}}

    @classmethod
    def load(cls, path: str | Path | None = None) -> Pins:
        p = Path(path if path is not None else PINS_PATH)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(p)
        except (OSError, UnicodeDecodeError) as e:
            raise _bad(p, f"cannot be read ({e})") from e
        try:
            data = json.loads(text)
        except ValueError as e:
            raise _bad(p, f"not JSON ({e})") from e
        if (
            not isinstance(data, dict)
            or data.get("version") != VERSION
            or not isinstance(data.get("servers"), dict)
        ):
            raise _bad(p, f"not a version {VERSION} pins file")
        if not isinstance(data.get("accepted", []), list):
            raise _bad(p, "its accepted history is not a list")
        return cls(p, data)

    def server(self, name: str) -> dict[str, Any]:
        servers: dict[str, Any] = self.data["servers"]
        entry = servers.setdefault(name, {})
        entry.setdefault("tools", {})
        entry.setdefault("pending", {})
        return entry  # type: ignore[no-any-return]

    def servers(self) -> list[str]:
        return sorted(self.data["servers"])

    def judge(self, server: str, tools: Iterable[tuple[str, str | None, Any]]) -> Judgement:
        """Compare a listing (name, description, inputSchema) with the pins: pin new tools,
        record changed ones as pending. Call ``save`` after it when anything changed."""
        entry = self.server(server)
        pinned: dict[str, Any] = entry["tools"]
        pending: dict[str, Any] = entry["pending"]
        out = Judgement()
        for name, description, schema in tools:
            new = tool_digest(name, description, schema)
            out.digests[name] = new
            pin = pinned.get(name)
            if pin is None:
                pinned[name] = {"sha256": new, "description": description, "pinned_at": _now()}
                out.pinned_now.append(name)
                out.exposed.append(name)
                out.modified = True
            elif pin.get("sha256") == new:
                out.modified |= pending.pop(name, None) is not None
                out.exposed.append(name)
            else:
                out.changed[name] = (str(pin.get("sha256")), new)
                seen = pending.get(name)
                if seen is None or seen.get("sha256") != new:
                    out.modified = True
                    pending[name] = {
                        "sha256": new,
                        "pinned_sha256": pin.get("sha256"),
                        "description": description,
                        "input_schema": schema,
                        "seen_at": _now(),
                    }
        return out

    def accept(
        self, server: str, tool: str | None = None, *, via: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Make pending definitions the pins (one tool, or all of ``server``'s) and append
        each to the history (``via``: how the person gave it); returns what was accepted
        (name, old and new hash, description)."""
        entry = self.server(server)
        history = self.history()
        pending: dict[str, Any] = entry["pending"]
        names = [tool] if tool is not None else sorted(pending)
        out = []
        for name in names:
            change = pending.pop(name, None)
            if change is None:
                continue
            now = _now()
            entry["tools"][name] = {
                "sha256": change["sha256"],
                "description": change.get("description"),
                "pinned_at": now,
                "accepted_at": now,
            }
            record: dict[str, Any] = {
                "server": server,
                "tool": name,
                "old_sha256": change.get("pinned_sha256"),
                "new_sha256": change["sha256"],
                "accepted_at": now,
                "by": "human",
            }
            if via:
                record["via"] = dict(via)
            history.append(record)
            out.append(
                {
                    "server": server,
                    "tool": name,
                    "old_sha256": change.get("pinned_sha256"),
                    "new_sha256": change["sha256"],
                    "description": change.get("description"),
                }
            )
        return out

    def history(self) -> list[dict[str, Any]]:
        """Every acceptance, oldest first (the file's ``accepted`` list, made if absent)."""
        history = self.data.setdefault("accepted", [])
        if not isinstance(history, list):
            raise _bad(self.path, "its accepted history is not a list")
        return history

    def pending(self, server: str | None = None) -> list[dict[str, Any]]:
        """Every change waiting for a person, as (server, tool, old, new, description)."""
        out = []
        for name in [server] if server is not None else self.servers():
            for tool, change in sorted(
                self.data["servers"].get(name, {}).get("pending", {}).items()
            ):
                out.append(
                    {
                        "server": name,
                        "tool": tool,
                        "old_sha256": change.get("pinned_sha256"),
                        "new_sha256": change.get("sha256"),
                        "description": change.get("description"),
                    }
                )
        return out

    def save(self) -> None:
        """Replace the file atomically (private, fsynced, renamed, directory fsynced)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = partial_name(self.path, "pins")
        temporary.unlink(missing_ok=True)  # our own leftover (same pid) from a failed save
        with create_private(temporary) as f:
            f.write(json.dumps(self.data, indent=2, sort_keys=True).encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        fsync_dir(self.path.parent)


@contextmanager
def locked_pins(path: str | Path | None = None) -> Iterator[Pins]:
    """The pins file, read under an exclusive lock held until the block ends: make the
    change and ``save`` inside it. Another writer (a gateway's ``tools/list``, a person's
    ``gateway accept``) waits meanwhile, then reads what this one wrote."""
    p = Path(path if path is not None else PINS_PATH)
    lock = p.with_name(p.name + ".lock")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        raise _bad(p, f"its lock {lock} cannot be opened ({e.strerror or e})") from e
    try:
        _lock(fd, p, lock)  # released when fd is closed
        yield Pins.load(p)
    finally:
        os.close(fd)


LOCK_WAIT_SECONDS = 10.0  # how long a writer waits for another one to finish


def _lock(fd: int, path: Path, lock: Path) -> None:
    """Take the exclusive lock, waiting at most ``LOCK_WAIT_SECONDS`` (a holder that never
    lets go must not hang a gateway or a person's accept): else ``gateway.pins_locked``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: one writer is the operator's care
        return
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"gateway pins {path}: another process has held its lock {lock} for "
                    f"{LOCK_WAIT_SECONDS:g} s; nothing was changed",
                    code="gateway.pins_locked",
                    hint="another gateway or `continuum gateway accept` is writing it; try "
                    "again, and if it persists, find the process holding the lock file",
                    path=str(path),
                ) from None
            time.sleep(0.05)
