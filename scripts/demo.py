"""`make demo`: crash an agent mid-batch, resume it, prove nothing ran twice.

1. An agent process sends invoices INV-001..INV-005 through the action ledger, each
   as a file in an outbox (a real side effect).
2. It is SIGKILLed right after writing INV-003 and before recording completion.
3. A fresh process asks continuum whether the run may resume: the interrupted action is
   reported `unknown` with the action to reconcile.
4. The operator checks the outbox (the external system) and reconciles it.
5. A fresh agent finishes the batch; continuum skips what was already done.
6. Checks: 5 files, one line each, no duplicates, chain verified, 0 unresolved.
Exit 0 only if every check held.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from continuum import Continuum
from continuum.types import Origin

HERE = Path(__file__).resolve().parent
RUN = "invoice-batch"
checks: list[tuple[str, bool]] = []


def say(text: str) -> None:
    print(text, flush=True)


def check(name: str, ok: bool) -> None:
    checks.append((name, ok))
    say(f"  [{'ok' if ok else 'FAILED'}] {name}")


def agent(store: Path, outbox: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / "demo_agent.py"), str(store), str(outbox),
                             *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="continuum-demo-"))
    store, outbox = work / "continuum.db", work / "outbox"
    outbox.mkdir()
    say(f"store: {store}\noutbox: {outbox}\n")

    say("1. agent starts sending invoices; it will be killed right after sending INV-003")
    proc = agent(store, outbox, "--pause-after", "INV-003")
    assert proc.stdout is not None
    for line in proc.stdout:
        say(f"   agent: {line.rstrip()}")
        if line.startswith("SENT INV-003"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    say(f"2. agent killed (exit {proc.returncode}); outbox now holds "
        f"{sorted(p.name for p in outbox.iterdir())}")
    check("the agent really died by SIGKILL", proc.returncode == -signal.SIGKILL)

    say("3. a fresh process asks: may this run resume?")
    cx = Continuum.open(str(store), create=False)
    r = cx.resume(RUN)
    say(f"   verdict: {r.mode}; next allowed action: {r.next_allowed_action}")
    say(f"   why: {r.rationale}")
    unknown = [a for a in r.uncertain_actions if a["action_key"] == "send_invoice:invoice:INV-003"]
    check("resume refuses to continue blindly (request_human)", r.mode == "request_human")
    check("the interrupted send of INV-003 is reported, with its action id", len(unknown) == 1
          and r.next_allowed_action == f"reconcile_action:{unknown[0]['action_id']}")

    say("4. operator checks the outbox (the external system) and reconciles INV-003")
    happened = (outbox / "INV-003.txt").exists()
    human = Continuum(cx.store, origin=Origin.HUMAN)
    rec = human.reconcile(RUN, unknown[0]["action_id"], occurred=happened,
                          external_id="outbox:INV-003", note="found in outbox")
    cx.append(RUN, "work_completed", {"item_id": "INV-003"})
    say(f"   INV-003 {'was' if happened else 'was not'} sent -> action now {rec.status}")
    r = cx.resume(RUN)
    say(f"   verdict now: {r.mode}")
    check("after reconciliation the run is safe to resume", r.mode == "resume")

    say("5. a fresh agent finishes the batch")
    proc = agent(store, outbox)
    out, _ = proc.communicate(timeout=120)
    for line in out.splitlines():
        say(f"   agent: {line}")
    check("the resumed agent exited cleanly", proc.returncode == 0)

    say("6. checks")
    files = sorted(p.name for p in outbox.iterdir())
    check("exactly 5 invoices in the outbox", files == [f"INV-00{i}.txt" for i in range(1, 6)])
    check("each invoice file has a single line (no double send)",
          all(len((outbox / f).read_text().splitlines()) == 1 for f in files))
    actions = cx.actions(RUN)
    check("ledger: 5 completed actions, 0 unresolved",
          sum(a.status == "completed" for a in actions) == 5
          and not any(a.status.unresolved for a in actions))
    check("projected progress is 5/5", cx.state(RUN).progress.completed == 5)
    report = cx.verify(RUN)
    check(f"hash chain verified ({report.events_checked} events)", report.ok)
    passed = sum(ok for _, ok in checks)
    say(f"\n{passed}/{len(checks)} checks held")
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
