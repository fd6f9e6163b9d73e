"""The agent process the recovery benchmark starts, kills and restarts.

Usage: ``python -m continuum.bench.worker DIR --strategy S --total N [--stop PHASE:INDEX]``

It sends one invoice per item of a batch: compute the amount from the dataset file
(the work), deliver it into the outbox (the side effect: one line appended to
``outbox/invoice-<i>.txt`` per delivery), record it. How it records and restarts is
the strategy:

- ``continuum``: the library facade. A fresh process asks ``resume`` first, settles
  what it reports as uncertain by looking in the outbox, repairs stale state, skips
  what the ledger says is done, and routes each delivery through intercept, deliver,
  complete.
- ``full_replay``: no record but a transcript; a restart re-runs every item from the
  start, as replaying a transcript would.
- ``naive_checkpoint``: after each item it saves the next index to a file (atomic
  rename); a restart resumes from that counter.

With ``--stop PHASE:INDEX`` it prints ``STOP PHASE INDEX`` when it reaches that point
and waits on stdin, so the benchmark can SIGKILL it exactly there. Phases:
``before_effect`` (the intercept is committed, nothing delivered), ``after_effect``
(delivered, not yet recorded), ``between`` (the item is fully done and recorded).
A fresh start writes nothing to stdout but the STOP line; the result of a restart goes
to ``result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from continuum.bench.batch import PHASES, RUN, STRATEGIES, Batch, Rejected
from continuum.errors import NotFoundError
from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
from continuum.types import ActionStatus, DependencyStatus

# -- strategies -------------------------------------------------------------------------


def run_full_replay(b: Batch) -> dict[str, Any]:
    restarted = (b.root / "transcript.jsonl").exists()
    failed: list[tuple[int, str]] = []
    for i in range(b.total):
        amount = b.compute(i)
        b.transcript(step="compute", item=i, amount=amount)
        b.at("before_effect", i)
        try:
            b.deliver(i, amount)
        except Rejected as e:
            b.transcript(step="failed", item=i, error=str(e))
            failed.append((i, amount))
            b.at("between", i)
            continue
        b.transcript(step="deliver", item=i)
        b.at("after_effect", i)
        b.at("between", i)
    _retry_in_memory(b, failed)
    return {"restarted": restarted}


def _retry_in_memory(b: Batch, failed: list[tuple[int, str]]) -> None:
    """End of the batch: retry, once, the rejected deliveries this process remembers."""
    for i, amount in failed:
        b.deliver(i, amount)
        b.transcript(step="deliver", item=i, retry=True)


def _save_counter(path: Path, value: int) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"next": value}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_naive_checkpoint(b: Batch) -> dict[str, Any]:
    path = b.root / "checkpoint.json"
    start = json.loads(path.read_text(encoding="utf-8"))["next"] if path.exists() else 0
    failed: list[tuple[int, str]] = []  # in memory: a counter cannot hold "retry item i"
    for i in range(start, b.total):
        amount = b.compute(i)
        b.transcript(step="compute", item=i, amount=amount)
        b.at("before_effect", i)
        try:
            b.deliver(i, amount)
            b.transcript(step="deliver", item=i)
        except Rejected as e:
            b.transcript(step="failed", item=i, error=str(e))
            failed.append((i, amount))
        b.at("after_effect", i)
        _save_counter(path, i + 1)
        b.at("between", i)
    _retry_in_memory(b, failed)
    return {"restarted": start > 0, "resumed_from": start}


def _declare_dataset(rt: Continuum, b: Batch) -> None:
    """The dataset is a declared file dependency; what was derived from it cites it."""
    dep = f"file:{b.dataset}"
    rt.declare_dependencies(RUN, files=[str(b.dataset)])
    rt.append(
        RUN,
        EventType.EVIDENCE_ADDED,
        {
            "evidence_id": "amounts",
            "dependencies": [dep],
            "text": "invoice amounts read from the dataset",
        },
    )
    rt.append(
        RUN,
        EventType.FINDING_ADDED,
        {"finding_id": "batch-total", "evidence": ["amounts"], "text": "the batch total"},
    )
    rt.append(
        RUN,
        EventType.DECISION_CREATED,
        {
            "decision_id": "send-batch",
            "findings": ["batch-total"],
            "text": "send every invoice of the batch",
        },
    )


def run_continuum(b: Batch) -> dict[str, Any]:
    rt = Continuum.open(str(b.root / "continuum.db"))
    out: dict[str, Any] = {"restarted": False}
    try:
        rt.store.get_run(RUN)
    except NotFoundError:
        rt.start_run(RUN, f"send {b.total} invoices exactly once", total=b.total)
        _declare_dataset(rt, b)
    else:
        out.update(_recover(rt, b))
    actions = {a.key: a for a in rt.actions(RUN)}
    completed = sum(a.status == ActionStatus.COMPLETED for a in actions.values())
    retry: list[int] = []
    for i in range(b.total):
        key = f"invoice:{i}"
        known = actions.get(key)
        if known is not None and known.status == ActionStatus.COMPLETED:
            continue  # the ledger says it is done: no work, no delivery
        if (
            known is not None
            and known.status == ActionStatus.FAILED
            and not out.get("stale_detected")
        ):
            amount = str(known.arguments["amount"])  # the recorded intent: no need to recompute
        else:
            amount = b.compute(i)
        r = rt.intercept(RUN, "send_invoice", {"invoice": i, "amount": amount}, key=key)
        if not r.proceed:
            out.setdefault("skipped", []).append({"item": i, "status": r.status})
            continue
        b.at("before_effect", i)
        try:
            b.deliver(i, amount)
        except Rejected as e:
            rt.fail(RUN, r.action_key, error=str(e), certain=True)  # certainly not done
            retry.append(i)
            b.at("between", i)
            continue
        b.at("after_effect", i)
        rt.complete(RUN, r.action_key, external_id=f"outbox:invoice-{i}")
        completed += 1
        rt.append(RUN, EventType.PROGRESS_RECORDED, {"completed": completed})
        b.at("between", i)
    for i in retry:  # end of the batch: a failed action proceeds again as a new attempt
        known = next(a for a in rt.actions(RUN) if a.key == f"invoice:{i}")
        r = rt.intercept(RUN, "send_invoice", known.arguments, key=known.key)
        if r.proceed:
            b.deliver(i, str(known.arguments["amount"]))
            rt.complete(RUN, r.action_key, external_id=f"outbox:invoice-{i}")
            completed += 1
            rt.append(RUN, EventType.PROGRESS_RECORDED, {"completed": completed})
    if out["restarted"]:
        out["final_verdict"] = rt.resume(RUN).mode
    rt.close()
    return out


def _recover(rt: Continuum, b: Batch) -> dict[str, Any]:
    """What a resumed agent does first: read the verdict, settle, repair."""
    rec = rt.resume(RUN)
    context = canonical_json(rec.model_dump(mode="json"))
    (b.root / "resume.json").write_text(context, encoding="utf-8")
    contract = rec.contract or {}
    deps = contract.get("evidence", {}).get("dependencies", {})
    stale = sorted(
        n for n, s in deps.items() if s in (DependencyStatus.CHANGED, DependencyStatus.REMOVED)
    )
    reconciled = []
    for action in rec.uncertain_actions:
        i = int(action["arguments"]["invoice"])
        occurred = b.delivered(i)  # look in the external system; never just redo it
        rt.reconcile(
            RUN,
            action["action_key"],
            occurred=occurred,
            external_id=f"outbox:invoice-{i}" if occurred else None,
            note="checked the outbox",
        )
        reconciled.append({"item": i, "occurred": occurred})
    if stale:
        _declare_dataset(rt, b)  # refresh the dependency and re-derive what rested on it
    return {
        "restarted": True,
        "verdict": rec.mode,
        "next_allowed_action": rec.next_allowed_action,
        "uncertain_reported": len(rec.uncertain_actions),
        "reconciled": reconciled,
        "stale_detected": stale,
        "invalidated": [c["component"] for c in contract.get("invalidated_components", [])],
        "context_bytes": len(context.encode("utf-8")),
    }


RUNNERS = {
    "continuum": run_continuum,
    "full_replay": run_full_replay,
    "naive_checkpoint": run_naive_checkpoint,
}


def parse_stop(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    phase, _, index = text.partition(":")
    if phase not in PHASES or not index.isdigit():
        raise SystemExit(f"--stop {text!r}: use PHASE:INDEX with PHASE one of {', '.join(PHASES)}")
    return phase, int(index)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m continuum.bench.worker")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--strategy", choices=STRATEGIES, required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--stop", default=None, metavar="PHASE:INDEX")
    ap.add_argument(
        "--reject-first",
        action="store_true",
        help="the receiver rejects items i %% 5 == 2 on their first delivery",
    )
    args = ap.parse_args(argv)
    batch = Batch(args.dir, args.total, parse_stop(args.stop), args.reject_first)
    result = RUNNERS[args.strategy](batch)
    if result.get("restarted"):
        (args.dir / "result.json").write_text(canonical_json(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
