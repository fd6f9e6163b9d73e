"""Model switch: model A dies, model B resumes, and A's model-specific assumptions are flagged.

    .venv/bin/python examples/model_switch.py

An agent driven by "model-a" extracts the clauses of four contracts. Along the way it
relies on two things that are true of model A only, and records them as model-specific
assumptions (``EventType.MODEL_ASSUMPTION_RECORDED``): a whole contract fits in its
context, and its JSON output needs no repair. After two contracts the process is killed.
A fresh process continues with "model-b" and says so (``resume(expected_model=...)``):
continuum answers ``repair_and_resume`` and names each assumption to re-verify, while
everything that does not depend on the model (goal, progress, the work done) stays
verified. Model B re-verifies: one assumption does not hold for it (it is retracted,
and B works in chunks instead), the other does (it is recorded again under model-b).
Then the verdict is ``resume`` and B finishes the job.

The harness records what the model stated (origin ``deterministic``: trusted local code),
so no human confirmation is involved here. Every claim below is checked; the script
exits 0 only if all of them held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from continuum import Continuum, EventType

RUN = "clause-extraction"
CONTRACTS = ["contract-1", "contract-2", "contract-3", "contract-4"]
ASSUMPTIONS = {
    "whole-contract-in-context": "a whole contract fits in one 200k-token context, so its "
                                 "clauses are compared in a single pass",
    "json-without-repair": "the clause table comes back as valid JSON without repair",
}
claims: list[tuple[str, bool]] = []


def say(text: str) -> None:
    print(text, flush=True)


def claim(text: str, ok: bool) -> None:
    claims.append((text, ok))
    say(f"  [{'ok' if ok else 'FAILED'}] {text}")


def extract(cx: Continuum, out: Path, contract: str, how: str) -> None:
    """The work: one row of the clause table per contract."""
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"contract": contract, "clauses": 12, "how": how}) + "\n")
    cx.append(RUN, EventType.WORK_COMPLETED, {"item_id": contract})


# -- model A (a process that dies) -------------------------------------------------------------


def model_a(db: str, out: Path) -> int:
    cx = Continuum.open(db)
    cx.start_run(RUN, "extract the clauses of four contracts into one table",
                 total=len(CONTRACTS), model="model-a")
    for assumption_id, text in ASSUMPTIONS.items():
        cx.append(RUN, EventType.MODEL_ASSUMPTION_RECORDED,
                  {"assumption_id": assumption_id, "text": text})
    for contract in CONTRACTS[:2]:
        extract(cx, out, contract, "single pass")
        say(f"model-a: extracted {contract}")
    say("model-a: working on contract-3 ... (killed)")
    os.kill(os.getpid(), signal.SIGKILL)
    return 1  # never reached


# -- model B (a fresh process) ----------------------------------------------------------------


def model_b(db: str, out: Path) -> int:
    cx = Continuum.open(db, create=False)
    rec = cx.resume(RUN, expected_model="model-b")
    say(f"model-b: resume -> {rec.mode}; required {rec.required_actions}")
    if rec.mode not in ("resume", "repair_and_resume"):
        return 1
    # Repair, in the order given: re-verify each assumption for model B.
    cx.append(RUN, EventType.MODEL_CHANGED, {"model": "model-b"})
    for action in rec.required_actions:
        verb, _, assumption_id = action.partition(":")
        if verb != "reverify_assumption":
            return 1
        if assumption_id == "whole-contract-in-context":  # model B has a 32k context
            cx.append(RUN, EventType.MODEL_ASSUMPTION_RECORDED, {
                "assumption_id": assumption_id, "status": "retracted",
                "text": "does not hold for model-b (32k context): contracts are chunked"})
            cx.append(RUN, EventType.MODEL_ASSUMPTION_RECORDED, {
                "assumption_id": "chunked-extraction",
                "text": "20k-token chunks; clauses that cross a chunk border are re-checked"})
            say(f"model-b: {assumption_id}: does not hold for me; retracted, working in chunks")
        else:
            cx.append(RUN, EventType.MODEL_ASSUMPTION_RECORDED, {
                "assumption_id": assumption_id, "text": ASSUMPTIONS[assumption_id]})
            say(f"model-b: {assumption_id}: holds for me too; recorded again under model-b")
    rec = cx.resume(RUN, expected_model="model-b")
    say(f"model-b: resume -> {rec.mode}")
    if not rec.safe:
        return 1
    done = {w.id for w in cx.state(RUN).work.values() if w.status == "completed"}
    for contract in [c for c in CONTRACTS if c not in done]:
        extract(cx, out, contract, "chunked")
        say(f"model-b: extracted {contract}")
    return 0


# -- the demonstration -------------------------------------------------------------------------


def spawn(which: str, db: str, out: Path) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, __file__, which, db, str(out)], capture_output=True,
                       text=True, timeout=300)
    for line in p.stdout.splitlines():
        say(f"   {line}")
    return p


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="continuum-model-switch-") as tmp:
        return demonstrate(Path(tmp))


def demonstrate(work: Path) -> int:
    db, out = str(work / "agent.db"), work / "clauses.jsonl"

    say("1. model A works, recording two model-specific assumptions, and dies")
    p = spawn("--model-a", db, out)
    cx = Continuum.open(db, create=False)
    state = cx.state(RUN)
    claim(f"model A really died by SIGKILL after {state.progress.completed} of 4 contracts",
          p.returncode == -signal.SIGKILL and state.progress.completed == 2)

    say("2. before anyone continues: what would each model be told?")
    same = cx.resume(RUN, expected_model="model-a")
    say(f"   resuming with model-a: {same.mode}")
    claim("control: resuming with the same model flags nothing (verdict resume)",
          same.mode == "resume")
    other = cx.resume(RUN, expected_model="model-b")
    assert other.contract is not None
    flagged = {c["component"]: c["reason"] for c in other.contract["invalidated_components"]}
    say(f"   resuming with model-b: {other.mode}; required {other.required_actions}")
    for component, reason in flagged.items():
        say(f"     {component}: {reason}")
    claim("switching to model-b flags exactly model A's two assumptions, in order",
          other.mode == "repair_and_resume"
          and other.required_actions == [f"reverify_assumption:{a}" for a in ASSUMPTIONS]
          and sorted(flagged) == sorted(f"model_assumption:{a}" for a in ASSUMPTIONS)
          and all("model-a" in r and "model-b" in r for r in flagged.values()))
    verified = other.contract["verified_components"]
    claim(f"what does not depend on the model stays verified ({', '.join(verified)})",
          "goal" in verified and "progress" in verified)

    say("3. model B re-verifies the assumptions, then finishes the job")
    p = spawn("--model-b", db, out)
    claim("model B exited cleanly", p.returncode == 0)
    final = cx.resume(RUN, expected_model="model-b")
    claim(f"after the re-verification, resuming with model-b: {final.mode}",
          final.mode == "resume")
    back = cx.resume(RUN, expected_model="model-a")
    claim(f"and model A coming back would now be asked to re-verify model B's assumptions "
          f"({', '.join(back.required_actions)})",
          back.mode == "repair_and_resume" and back.required_actions == [
              "reverify_assumption:json-without-repair", "reverify_assumption:chunked-extraction"])

    say("4. checks")
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    say(f"   clause table: {[(r['contract'], r['how']) for r in rows]}")
    claim("each contract extracted exactly once; 3 and 4 in chunks, as model B must",
          [r["contract"] for r in rows] == CONTRACTS
          and [r["how"] for r in rows] == ["single pass"] * 2 + ["chunked"] * 2)
    state = cx.state(RUN)
    claim(f"progress {state.progress.completed}/{state.progress.total}, model {state.model}",
          state.progress.completed == 4 and state.model == "model-b")
    report = cx.verify(RUN)
    claim(f"hash chain verified ({report.events_checked} events)", report.ok)

    held = sum(ok for _, ok in claims)
    say(f"\n{held}/{len(claims)} claims held")
    return 0 if held == len(claims) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("--model-a", "--model-b"):
        role = model_a if sys.argv[1] == "--model-a" else model_b
        sys.exit(role(sys.argv[2], Path(sys.argv[3])))
    sys.exit(main())
