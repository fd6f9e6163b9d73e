"""The proofs a user can run (contract §12): every example and the invoice-batch kit, as a user
would start them (real subprocesses, real kills), each judged by its own exit code.

Each run is bounded by a subprocess timeout; nothing here sleeps or times anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "e2e-autonomy-test"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_the_three_promised_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"crash_recovery_agent.py", "context_compaction.py", "model_switch.py"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_exits_0_because_every_claim_held(example: Path) -> None:
    p = run([sys.executable, str(example)])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FAILED" not in p.stdout
    held, total = p.stdout.strip().splitlines()[-1].split()[0].split("/")
    assert held == total and int(total) >= 5


@pytest.mark.slow
def test_kit_scripted_run_scores_7_of_7_and_a_double_send_is_caught(tmp_path: Path) -> None:
    work = tmp_path / "work"
    p = run(["bash", str(KIT / "run.sh"), "--scripted"], KIT_WORK=str(work))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert out.strip().splitlines()[-1] == "7/7"
    assert "SIGKILL: agent" in out and "continuum-mcp server" in out
    assert "verdict: request_human" in out  # the mid-run view, before session 2
    assert "RECONCILED INV-003: unknown -> occurred=True" in out
    assert [f"SKIP INV-00{i}: completed" in out for i in (1, 2, 3)] == [True] * 3
    assert out.count("DONE INV-004") == 1 and out.count("DONE INV-005") == 1
    assert sorted(f.name for f in (work / "outbox").iterdir()) == [
        f"INV-00{i}.txt" for i in range(1, 6)
    ]

    # Negative control: the scorer must catch an invoice sent twice.
    line = (work / "outbox" / "INV-002.txt").read_text(encoding="utf-8")
    with (work / "outbox" / "INV-002.txt").open("a", encoding="utf-8") as f:
        f.write(line)
    p = run(["bash", str(KIT / "3-verify.sh")], KIT_WORK=str(work))
    assert p.returncode == 1
    assert p.stdout.strip().splitlines()[-1] == "6/7"
    assert "[FAIL] 2. each sent invoice is a single line (not: INV-002)" in p.stdout


@pytest.mark.slow
def test_kit_http_variant_scores_7_of_7_from_what_the_sink_received(tmp_path: Path) -> None:
    work = tmp_path / "work"
    p = run(["bash", str(KIT / "run.sh"), "--scripted", "--http"], KIT_WORK=str(work))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "7/7"
    assert "sent = what the HTTP sink received" in p.stdout
    assert not (work / "outbox").exists()
    journal = [
        json.loads(x)
        for x in (work / "sink" / "received.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [r["invoice"] for r in journal] == [f"INV-00{i}" for i in range(1, 6)]


def test_kit_setup_refuses_a_directory_that_is_not_a_kit_working_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me", encoding="utf-8")
    p = run(["bash", str(KIT / "1-setup.sh")], KIT_WORK=str(tmp_path))
    assert p.returncode == 1
    assert "not a kit working directory" in p.stderr
    assert (tmp_path / "precious.txt").read_text(encoding="utf-8") == "keep me"


def test_kit_scorer_fails_cleanly_before_any_run(tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert run(["bash", str(KIT / "1-setup.sh")], KIT_WORK=str(work)).returncode == 0
    p = run(["bash", str(KIT / "3-verify.sh")], KIT_WORK=str(work))
    assert p.returncode == 1
    assert p.stdout.strip().splitlines()[-1] == "0/7"
