"""A store with something of everything in it, for the export/import tests."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

from continuum.ops.transfer import export_runs
from continuum.runtime.facade import Continuum
from continuum.store import Storage, open_store


def fill(store: Storage) -> None:
    """Two runs: one active with actions in every state and a checkpoint, one completed."""
    rt = Continuum(store)
    rt.start_run("run_rich", "send the invoices", total=4, metadata={"team": "billing"})
    rt.record_progress("run_rich", completed=1)
    rt.append("run_rich", "finding_added", {"finding_id": "f1", "text": "naïve ☃ \u0000 ok"})
    done = rt.intercept("run_rich", "send_invoice", {"invoice": "INV-1"}, key="invoice:INV-1")
    rt.complete("run_rich", done.action_key, external_id="ext-1", result={"ok": True})
    doubt = rt.intercept("run_rich", "send_invoice", {"invoice": "INV-2"}, key="invoice:INV-2")
    rt.fail("run_rich", doubt.action_key, error="timeout")
    rt.intercept("run_rich", "write_file", {"path": "out/a.txt"}, replay="safe")  # still started
    rt.checkpoint("run_rich", reason="midway", env={"dataset": "v1"})
    rt.record_progress("run_rich", completed=2)
    rt.start_run("run_done", "a finished one")
    rt.finish_run("run_done", reason="all done")


def snapshot(store: Storage, run_id: str) -> dict[str, Any]:
    """Everything an import must carry over (leases aside: they are not exported)."""
    info = store.get_run(run_id)
    return {
        "run": info.model_dump(),
        "events": [e.model_dump() for e in store.read_events(run_id)],
        "actions": [a.record for a in store.list_actions(run_id)],
        "checkpoints": [c.model_dump() for c in store.list_checkpoints(run_id)],
    }


def export_file(
    url: str, path: Path, run_ids: list[str] | None = None, *, sign: Path | None = None
) -> Path:
    with closing(open_store(url)) as store, open(path, "w", encoding="utf-8") as f:
        export_runs(store, f, run_ids, sign=sign)
    return path
