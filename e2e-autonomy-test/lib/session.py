"""Run one scripted agent session; optionally SIGKILL it, with its server, mid-batch.

Usage: session.py WORK LOG [--kill-after-send INVOICE] [--sink URL]

Without --kill-after-send the agent runs to the end and this exits with its code.
With it, the agent is told to pause right after that invoice's side effect (before it
records completion); when it prints "SENT <invoice>", this kills the agent and every
process below it (its continuum-mcp server, which the MCP SDK starts in a session of its
own, so a process-group kill would miss it) with SIGKILL at once, as when a machine or a
container goes away. It then waits, through pidfds and without sleeping, until each one
has exited (a zombie has exited: nothing runs in it any more), and exits 0.

Why the server must die too: the server process owns the actions it intercepted. While
it is alive, continuum correctly reports its action as in progress, not interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXIT_WAIT_SECONDS = 60


def say(text: str) -> None:
    print(text, flush=True)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # the process went away while we looked
    found, frontier = [], {pid}
    while frontier:
        kids = {c for c, p in parents.items() if p in frontier}
        found += sorted(kids)
        frontier = kids
    return found


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def has_exited(pid: int) -> bool:
    """Gone, or a zombie (exited, not yet reaped by whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def kill_tree(proc: subprocess.Popen[str]) -> list[tuple[int, str]]:
    """SIGKILL ``proc`` and all its descendants at once; return when every one has exited."""
    victims = [proc.pid, *descendants(proc.pid)]
    names = [(pid, cmdline(pid)) for pid in victims]
    pidfds = {}
    for pid in victims[1:]:
        try:
            pidfds[pid] = os.pidfd_open(pid)  # opened before the kill: immune to pid reuse
        except ProcessLookupError:
            continue
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=EXIT_WAIT_SECONDS)
    poller = select.poll()
    for fd in pidfds.values():
        poller.register(fd, select.POLLIN)
    waiting = set(pidfds.values())
    while waiting:  # a pidfd becomes readable when its process exits
        ready = poller.poll(EXIT_WAIT_SECONDS * 1000)
        if not ready:
            raise SystemExit(f"processes {sorted(waiting)} did not exit after SIGKILL")
        for fd, _ in ready:
            poller.unregister(fd)
            waiting.discard(fd)
    for fd in pidfds.values():
        os.close(fd)
    still = [pid for pid in victims if not has_exited(pid)]
    if still:
        raise SystemExit(f"processes {still} are still running after SIGKILL")
    return names


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("log", type=Path, help="the agent's (and its server's) stderr goes here")
    ap.add_argument("--kill-after-send", default=None, metavar="INVOICE")
    ap.add_argument("--sink", default=None)
    ap.add_argument("--run-id", default="invoice-batch")
    args = ap.parse_args()
    cmd = [sys.executable, str(HERE / "agent.py"), str(args.work), "--run-id", args.run_id]
    if args.sink:
        cmd += ["--sink", args.sink]
    if args.kill_after_send:
        cmd += ["--pause-after-send", args.kill_after_send]
    with args.log.open("a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            say(f"   agent: {line.rstrip()}")
            if args.kill_after_send and line.strip() == f"SENT {args.kill_after_send}":
                killed = kill_tree(proc)
                server = [
                    pid
                    for pid, cmd_ in killed
                    if "continuum-mcp" in cmd_ or "continuum.mcp" in cmd_
                ]
                if not server:
                    raise SystemExit(
                        "the agent's continuum-mcp server was not found among "
                        f"its processes: {killed}"
                    )
                say(
                    f"   SIGKILL: agent (pid {proc.pid}) and its continuum-mcp server "
                    f"(pid {', '.join(map(str, server))}), between the send of "
                    f"{args.kill_after_send} and its completion; all exited "
                    f"(agent exit {proc.returncode})"
                )
                return 0 if proc.returncode == -signal.SIGKILL else 1
        proc.wait()
    if args.kill_after_send:
        say(
            f"   the agent ended (exit {proc.returncode}) before sending {args.kill_after_send}; "
            f"see {args.log}"
        )
        return 1
    if proc.returncode != 0:
        say(f"   the agent failed (exit {proc.returncode}); last lines of {args.log}:")
        for line in args.log.read_text(encoding="utf-8").splitlines()[-15:]:
            say(f"     {line}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
