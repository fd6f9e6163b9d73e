"""Start-line helper shared by the multi-process tests (SQLite and PostgreSQL "hosts")."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def release_together(procs: list[subprocess.Popen[str]], deadline_s: float) -> list[dict[str, Any]]:
    """Wait until every worker prints ``ready``, send ``go`` to all, return their JSON reports.

    Workers that are still running when anything fails are killed, so a broken test
    never leaves processes behind.
    """
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.communicate(timeout=deadline_s)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=deadline_s)
            assert p.returncode == 0, err
            reports.append(json.loads(out))
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
