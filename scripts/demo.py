"""`make demo`: an agent is SIGKILLed mid-batch; a fresh one resumes through the MCP server.

1. An agent process (an MCP client) starts continuum-mcp and sends invoices INV-001..005,
   each as a file in an outbox (a real side effect), through intercept, perform, complete.
2. It is SIGKILLed (with its MCP server) right after writing INV-003, before recording
   completion.
3. The operator looks: `continuum resume` reports the interrupted send as unknown.
4. A fresh agent process resumes through continuum_resume, checks the outbox for the
   unknown action and, finding the invoice there, reconciles it as occurred (an agent may
   say an effect happened; its word that one did NOT happen would need a person), skips
   what was done, and finishes the batch.
5. A human confirms the self-reported progress (`continuum confirm`); the run is safe.
6. Checks: 5 files, one line each, no duplicates, chain verified, 0 unresolved.
Exit 0 only if every check held.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUN = "invoice-batch"
checks: list[tuple[str, bool]] = []


def say(text: str) -> None:
    print(text, flush=True)


def check(name: str, ok: bool) -> None:
    checks.append((name, ok))
    say(f"  [{'ok' if ok else 'FAILED'}] {name}")


def agent(store: Path, outbox: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "demo_agent.py"), str(store), str(outbox), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc), children first."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        kids = [c for c, p in parents.items() if p in frontier]
        found += kids
        frontier = kids
    return found


def continuum(store: Path, *args: str) -> tuple[int, dict[str, Any]]:
    p = subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(store), "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode, json.loads(p.stdout)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="continuum-demo-"))
    store, outbox = work / "continuum.db", work / "outbox"
    outbox.mkdir()
    say(f"store: {store}\noutbox: {outbox}\n")

    say("1. an agent (MCP client of continuum-mcp) sends invoices; it dies right after INV-003")
    proc = agent(store, outbox, "--pause-after", "INV-003")
    assert proc.stdout is not None
    for line in proc.stdout:
        say(f"   agent: {line.rstrip()}")
        if line.startswith("SENT INV-003"):
            # Kill the agent and everything it started (its continuum-mcp server) at once,
            # as when a machine, a container or a terminal goes away.
            for pid in [proc.pid, *descendants(proc.pid)]:
                os.kill(pid, signal.SIGKILL)
            break
    proc.wait()
    say(
        f"2. agent SIGKILLed (exit {proc.returncode}); outbox: "
        f"{sorted(p.name for p in outbox.iterdir())}"
    )
    check("the agent really died by SIGKILL", proc.returncode == -signal.SIGKILL)

    say("3. the operator asks: may this run resume?  (continuum resume)")
    code, r = continuum(store, "resume", RUN)
    say(f"   verdict: {r['mode']} (exit {code}); next allowed action: {r['next_allowed_action']}")
    say(f"   why: {r['rationale']}")
    inv3 = [a for a in r["uncertain_actions"] if a["action_key"] == "send_invoice:invoice:INV-003"]
    check(
        "resume refuses to continue blindly (request_human, exit 20)",
        r["mode"] == "request_human" and code == 20,
    )
    check(
        "the interrupted send of INV-003 is reported unknown, with its action id",
        len(inv3) == 1
        and inv3[0]["status"] == "unknown"
        and r["next_allowed_action"] == f"reconcile_action:{inv3[0]['action_id']}",
    )

    say("4. a fresh agent resumes through continuum_resume and finishes the batch")
    proc = agent(store, outbox)
    out, _ = proc.communicate(timeout=300)
    for line in out.splitlines():
        say(f"   agent: {line}")
    check("the resumed agent exited cleanly", proc.returncode == 0)
    check(
        "it skipped INV-001..003 and sent only INV-004 and INV-005",
        out.count("SKIP") == 3 and "DONE INV-004" in out and "DONE INV-005" in out,
    )

    say("5. a human reviews the agent's self-reported progress  (continuum confirm)")
    code, r = continuum(store, "resume", RUN)
    say(f"   before: {r['mode']} ({r['rationale']})")
    check(
        "self-reported progress is not trusted before a human confirms",
        r["mode"] == "request_human" and "confirm_run:" + RUN in r["required_actions"],
    )
    # The demo plays the human here; a person at a terminal would answer the prompt instead.
    code, r = continuum(store, "confirm", RUN, "--yes")
    say(
        f"   confirmed through sequence {r['confirmation']['through_sequence']}: "
        f"{r['confirmation']['confirmed']['progress']}"
    )
    check(
        "after confirmation the run is verified safe (verdict resume, exit 0)",
        code == 0 and r["verdict"] == "resume",
    )

    say("6. checks")
    files = sorted(p.name for p in outbox.iterdir())
    check("exactly 5 invoices in the outbox", files == [f"INV-00{i}.txt" for i in range(1, 6)])
    check(
        "each invoice file has a single line (no double send)",
        all(len((outbox / f).read_text().splitlines()) == 1 for f in files),
    )
    code, a = continuum(store, "actions", RUN)
    statuses = [x["status"] for x in a["actions"]]
    check(
        "ledger: 5 completed actions, 0 unresolved (exit 0)",
        code == 0 and statuses.count("completed") == 5 and a["unresolved"] == 0,
    )
    code, s = continuum(store, "status", RUN)
    check("projected progress is 5/5", s["progress"]["completed"] == 5)
    code, v = continuum(store, "verify", RUN)
    check(
        f"hash chain verified ({v['reports'][0]['events_checked']} events)",
        code == 0 and v["verified"],
    )
    passed = sum(ok for _, ok in checks)
    say(f"\n{passed}/{len(checks)} checks held")
    where_left(work, store)
    return 0 if passed == len(checks) else 1


def where_left(work: Path, store: Path) -> None:
    """Say where the demo's files are and how to look at them (they are kept)."""
    beside = Path(sys.executable).with_name("continuum")
    cli = (
        shlex.quote(str(beside))
        if beside.exists()
        else f"{shlex.quote(sys.executable)} -m continuum"
    )
    db = shlex.quote(str(store))
    say(
        f"\nthe demo's files are kept in {work}: the store (continuum.db) and the outbox.\n"
        "look at them with:\n"
        f"  {cli} --db {db} runs\n"
        f"  {cli} --db {db} events {RUN}\n"
        f"  {cli} --db {db} history {RUN}\n"
        f"  {cli} --db {db} watch {RUN} --once\n"
        f"  ls {shlex.quote(str(work / 'outbox'))}\n"
        f"remove them with: rm -rf {shlex.quote(str(work))}"
    )


if __name__ == "__main__":
    sys.exit(main())
