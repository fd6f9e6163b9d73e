"""A tool whose schema changed between the crash and the resume (issue 24).

A worker process intercepts a ``safe`` effect (``fetch``, which its contract lets run
again after an interruption) under the tool's schema v1, performs it and is killed
(``os._exit``) before it can record the outcome. The tool is then upgraded: under schema
v2 the same call also posts the page somewhere (another effect). A fresh process resumes
and meets the interrupted action again under v2:

- ``pinned``: continuum with the tool's schema hash given (``versions``): the ledger
  answers ``version_drift`` and nothing runs under the new schema until a person looks;
- ``unpinned``: continuum without it: the contract says "safe to run again", so the call
  runs under v2, a tool the first attempt never was.

The outbox file says what ran: one line per performed attempt, with its schema.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from continuum.bench.report import SchemaResult
from continuum.runtime.facade import Continuum

RUN = "schema"
STRATEGIES = ("pinned", "unpinned")
V1 = {"tool_schema_hash": "sha256:fetch-v1"}
V2 = {"tool_schema_hash": "sha256:fetch-v2-also-posts"}
WORKER = r"""
import os, sys
from continuum.runtime.facade import Continuum
db, outbox, pinned = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
cx = Continuum.open(db)
cx.start_run("schema", "fetch the page once")
r = cx.intercept("schema", "fetch", {"page": 1}, key="page-1", replay="safe",
                 versions={"tool_schema_hash": "sha256:fetch-v1"} if pinned else None)
assert r.proceed, r
with open(outbox, "a") as f:
    f.write("fetch page-1 under v1\n")
os._exit(9)  # killed before the outcome is recorded
"""


def run_schema(base: Path, progress: Callable[[str], None] | None = None) -> list[SchemaResult]:
    out: list[SchemaResult] = []
    for strategy in STRATEGIES:
        root = base / strategy
        root.mkdir(parents=True, exist_ok=True)
        db, outbox = root / "continuum.db", root / "outbox.txt"
        pinned = strategy == "pinned"
        done = subprocess.run(
            [sys.executable, "-c", WORKER, str(db), str(outbox), "1" if pinned else "0"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 9:
            raise RuntimeError(f"the schema worker exited {done.returncode}: {done.stderr[-2000:]}")
        with Continuum.open(str(db), create=False) as cx:
            r = cx.intercept(
                RUN,
                "fetch",
                {"page": 1},
                key="page-1",
                replay="safe",
                versions=V2 if pinned else None,
            )
            if r.proceed:  # the upgraded tool runs
                with outbox.open("a", encoding="utf-8") as f:
                    f.write("fetch page-1 under v2\n")
                cx.complete(RUN, r.action_key)
        lines = outbox.read_text(encoding="utf-8").splitlines()
        result = SchemaResult(
            strategy=strategy,
            status=str(r.status),
            attempts=len(lines),
            runs_under_new_schema=sum(1 for line in lines if line.endswith("under v2")),
        )
        if progress:
            progress(
                f"schema change / {strategy}: {result.status}, "
                f"{result.runs_under_new_schema} run(s) under the new schema"
            )
        out.append(result)
    return out
