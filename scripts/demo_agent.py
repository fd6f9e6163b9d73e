"""A scripted agent for `make demo`: sends invoices through the action ledger.

Usage: demo_agent.py STORE OUTBOX [--pause-after INVOICE]
With --pause-after, it prints "SENT <invoice>" after writing that invoice's file and
then waits on stdin before recording completion, so the demo can kill it exactly
between the side effect and its completion.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from continuum import Continuum

RUN = "invoice-batch"
INVOICES = [f"INV-00{i}" for i in range(1, 6)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("outbox")
    ap.add_argument("--pause-after", default=None)
    args = ap.parse_args()
    cx = Continuum.open(args.store)
    if RUN not in {r.run_id for r in cx.runs()}:
        cx.start_run(RUN, "send invoices INV-001..INV-005 exactly once", total=len(INVOICES))
    outbox = Path(args.outbox)
    for invoice in INVOICES:
        r = cx.intercept(RUN, "send_invoice", {"invoice": invoice, "to": "billing@example.test"},
                         key=f"invoice:{invoice}")
        if not r.proceed:
            print(f"SKIP {invoice}: {r.status}", flush=True)
            continue
        (outbox / f"{invoice}.txt").write_text(f"invoice {invoice} sent\n", encoding="utf-8")
        if invoice == args.pause_after:
            print(f"SENT {invoice}", flush=True)
            sys.stdin.readline()  # the demo kills us here: effect done, completion not recorded
        cx.complete(RUN, r.action_key, external_id=f"outbox:{invoice}")
        cx.append(RUN, "work_completed", {"item_id": invoice})
        print(f"DONE {invoice}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
