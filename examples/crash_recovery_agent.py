"""Crash recovery with the Python library: a real kill between a side effect and its record.

    .venv/bin/python examples/crash_recovery_agent.py

A worker process sends five invoices, each by appending a line to a mail spool file (a
real side effect outside the store), through the action ledger: intercept, perform,
complete. It SIGKILLs itself right after sending INV-003, before recording that send:
the one moment no replay of a transcript can get right. A fresh process then asks
continuum what happened and a second worker finishes the batch.

Every claim below is checked; the script exits 0 only if all of them held.

The workers are trusted local code (origin ``deterministic``), so their records need no
human confirmation. An agent reporting over MCP is ``external_agent`` and does
(see ``make demo`` and ``e2e-autonomy-test/``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from continuum import Continuum, EventType, NotFoundError

RUN = "invoices"
INVOICES = [f"INV-00{i}" for i in range(1, 6)]
claims: list[tuple[str, bool]] = []


def say(text: str) -> None:
    print(text, flush=True)


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    say(f"  [{'ok' if ok else 'FAILED'}] {text}")


def sent_lines(spool: Path) -> list[str]:
    return spool.read_text(encoding="utf-8").splitlines() if spool.exists() else []


# -- the worker (a separate process) -------------------------------------------------------


def send(spool: Path, invoice: str) -> str:
    """The side effect: deliver the invoice (append to the spool, flushed to disk)."""
    with spool.open("a", encoding="utf-8") as f:
        f.write(f"{invoice} sent to billing@example.test\n")
        f.flush()
        os.fsync(f.fileno())
    return f"spool:{invoice}"


def worker(db: str, spool: Path, die_after: str | None) -> int:
    cx = Continuum.open(db)
    try:
        cx.store.get_run(RUN)
    except NotFoundError:
        cx.start_run(RUN, "send five invoices exactly once", total=len(INVOICES))
    # Settle what a crash left uncertain, by looking at the external system itself.
    for action in cx.resume(RUN).uncertain_actions:
        invoice = action["arguments"]["invoice"]
        happened = any(line.startswith(invoice + " ") for line in sent_lines(spool))
        cx.reconcile(RUN, action["action_id"], occurred=happened,
                     external_id=f"spool:{invoice}" if happened else None,
                     note="checked the mail spool")
        say(f"worker: reconciled {invoice}: occurred={happened}")
    for invoice in INVOICES:
        r = cx.intercept(RUN, "send_invoice", {"invoice": invoice}, key=f"invoice:{invoice}")
        if not r.proceed:
            say(f"worker: skip {invoice} ({r.status})")
            if r.status == "completed":  # done earlier (or reconciled): count it, once
                cx.append(RUN, EventType.WORK_COMPLETED, {"item_id": invoice})
            continue
        external_id = send(spool, invoice)
        if invoice == die_after:
            say(f"worker: sent {invoice}; dying before recording it")
            os.kill(os.getpid(), signal.SIGKILL)  # a real kill: no finally, no atexit
        cx.complete(RUN, r.action_key, external_id=external_id)
        cx.append(RUN, EventType.WORK_COMPLETED, {"item_id": invoice})
        say(f"worker: sent {invoice}")
    return 0


# -- the demonstration (the parent process) -------------------------------------------------


def spawn(db: str, spool: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, __file__, "--worker", db, str(spool), *extra],
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        say(f"   {line}")
    return p


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="continuum-crash-") as tmp:
        return demonstrate(Path(tmp))


def demonstrate(work: Path) -> int:
    db, spool = str(work / "agent.db"), work / "spool.txt"
    say(f"store {db}, mail spool {spool}\n")

    say("1. a worker process sends invoices and is killed right after sending INV-003")
    p = spawn(db, spool, "INV-003")
    claim("the worker really died by SIGKILL", p.returncode == -signal.SIGKILL)
    claim("INV-001..003 reached the spool before the kill",
          [line.split()[0] for line in sent_lines(spool)] == INVOICES[:3])

    say("2. a fresh process asks whether the run may resume")
    cx = Continuum.open(db)
    rec = cx.resume(RUN)
    say(f"   verdict {rec.mode}; next allowed action {rec.next_allowed_action}")
    say(f"   why: {rec.rationale}")
    unknown = [a for a in rec.uncertain_actions if a["arguments"] == {"invoice": "INV-003"}]
    claim("resume refuses to go on blindly: request_human, INV-003 reported unknown",
          rec.mode == "request_human" and len(unknown) == 1
          and rec.next_allowed_action == f"reconcile_action:{unknown[0]['action_id']}")
    retry = cx.intercept(RUN, "send_invoice", {"invoice": "INV-003"}, key="invoice:INV-003")
    say(f"   a blind retry of INV-003: proceed={retry.proceed}, status {retry.status}")
    claim("a blind retry is refused (proceed false, unknown): no second send",
          not retry.proceed and retry.status == "unknown")

    say("3. a second worker reconciles INV-003 against the spool and finishes the batch")
    p = spawn(db, spool)
    claim("the second worker exited cleanly", p.returncode == 0)
    claim("it sent only INV-004 and INV-005",
          p.stdout.count("skip") == 3 and "sent INV-004" in p.stdout and "sent INV-005" in p.stdout)

    say("4. checks")
    lines = sent_lines(spool)
    say(f"   spool: {[line.split()[0] for line in lines]}")
    claim("each invoice is in the spool exactly once",
          sorted(line.split()[0] for line in lines) == INVOICES)
    actions = cx.actions(RUN)
    claim("ledger: 5 completed, 0 unresolved",
          [str(a.status) for a in actions] == ["completed"] * 5)
    state = cx.state(RUN)
    claim(f"progress {state.progress.completed}/{state.progress.total}",
          state.progress.completed == 5 and state.progress.total == 5)
    report = cx.verify(RUN)
    claim(f"hash chain verified ({report.events_checked} events)", report.ok)
    rec = cx.resume(RUN)
    claim(f"verdict now {rec.mode} (trusted local code: no confirmation needed)", rec.safe)

    held = sum(ok for _, ok in claims)
    say(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.exit(worker(sys.argv[2], Path(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None))
    sys.exit(main())
