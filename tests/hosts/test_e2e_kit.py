"""The invoice-batch kit with a real host: `run.sh --host HOST` (issue 21, item 4).

The same task as `run.sh --scripted`, but sessions 1 and 2 are the real host (the scripted
model of tests/hosts/ as its model), killed with its continuum-mcp by a real SIGKILL right
after it sent INV-003; the kit scores the outcome out of band: 7/7. Here for Claude Code
and Codex; Gemini CLI and Kilo Code run the same way by hand (slower to start).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "e2e-autonomy-test"


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_the_kit_scores_7_of_7_through_the_real_host(tmp_path: Path, host: str) -> None:
    work = tmp_path / "kit"
    p = subprocess.run(
        ["bash", str(KIT / "run.sh"), "--host", host],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KIT_WORK": str(work)},
        check=False,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert out.rstrip().splitlines()[-1] == "7/7", out[-2000:]
    assert f"SIGKILLed {host}" in out and "right after it sent INV-003" in out, out[-4000:]
    # The mid-run view (`continuum actions`) saw the interrupted send.
    assert "unknown (interrupted: its process is gone)" in out
    assert sorted(f.name for f in (work / "outbox").iterdir()) == [
        f"INV-00{i}.txt" for i in range(1, 6)
    ]
