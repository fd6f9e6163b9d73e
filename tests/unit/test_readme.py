"""The README's first Python example is self-contained and runs as shown (contract §11)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_shows_make_demo_and_make_test_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.findall(r"```\w*\n(.*?)```", text, flags=re.S)[0]
    assert first_block.lstrip().startswith("make demo")
    assert "make test" in first_block


def test_first_python_example_runs_as_shown_and_again_in_the_same_directory(tmp_path: Path) -> None:
    """Run twice in a row in one directory (issue 12): the second run finds the run the
    first one left, appends nothing and still prints the same line."""
    code = python_blocks()[0]
    for attempt in ("first", "second"):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, f"{attempt} run: {out.stderr}"
        assert out.stdout == "10000 documents done; chain verified\n", attempt
    assert (tmp_path / "agent.db").exists()
    from continuum import SQLiteStorage

    with SQLiteStorage(tmp_path / "agent.db", create=False) as store:
        assert store.get_run("run_4821").head_sequence == 10_001  # nothing appended twice
