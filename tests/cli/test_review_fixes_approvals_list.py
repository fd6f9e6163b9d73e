"""Review fix: `continuum approvals` is bounded (--limit, oldest request first) and says
how many more wait beyond what it shows. Real CLI subprocess, real SQLite store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from continuum import Continuum, Origin
from continuum.store import open_store
from tests.cli.pty_support import cli_env

RUN = "payments"


def pending(tmp_path: Path, n: int) -> list[str]:
    rules = tmp_path / ".continuum" / "approvals.toml"
    rules.parent.mkdir()
    rules.write_text('[[approval]]\naction_type = "wire_money"\n', encoding="utf-8")
    agent = Continuum(
        open_store(str(tmp_path / "store.db")), origin=Origin.EXTERNAL_AGENT, cwd=str(tmp_path)
    )
    try:
        agent.start_run(RUN, "pay")
        ids = [
            agent.intercept(RUN, "wire_money", {"n": i}, key=f"w{i}").approval_id or ""
            for i in range(n)
        ]
    finally:
        agent.close()
    return ids


def approvals(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "continuum", "--db", str(tmp_path / "store.db"), "approvals", *args],
        cwd=tmp_path,
        env=cli_env(),
        text=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_the_pending_list_shows_the_oldest_up_to_the_limit_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    ids = pending(tmp_path, 5)
    r = approvals(tmp_path, "--json", "--limit", "2")
    assert r.returncode == 20, r.stderr
    doc = json.loads(r.stdout)
    assert [a["approval_id"] for a in doc["approvals"]] == ids[:2]  # oldest first
    assert (doc["shown"], doc["more"], doc["pending"]) == (2, 3, 5)
    text = approvals(tmp_path, "--limit", "2")
    assert "3 more not shown" in text.stdout and ids[2] not in text.stdout
    everything = json.loads(approvals(tmp_path, "--json", "--limit", "10").stdout)
    assert (everything["shown"], everything["more"]) == (5, 0)  # negative control
    assert approvals(tmp_path, "--limit", "0").returncode == 1  # refused, a usage error
