"""verify reads the head and the events in one snapshot: a concurrent append is not damage."""

from __future__ import annotations

import threading
from pathlib import Path

from continuum.eventlog.events import EventType
from continuum.store import Run, open_store


def test_verify_during_concurrent_appends_never_reports_damage(tmp_path: Path) -> None:
    path = str(tmp_path / "v.db")
    writer = open_store(path)
    writer.create_run(Run(run_id="r"))
    reader = open_store(path)
    done = threading.Event()

    def append() -> None:
        for i in range(300):
            writer.append_event("r", EventType.WORK_COMPLETED, {"doc": i})
        done.set()

    t = threading.Thread(target=append)
    t.start()
    reports = []
    while not done.is_set():
        reports.append(reader.verify_events("r"))
    t.join()
    reports.append(reader.verify_events("r"))
    bad = [r.violations for r in reports if not r.ok]
    assert bad == []
    assert reports[-1].head_sequence == 300 and len(reports) > 1
