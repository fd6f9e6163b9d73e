"""The README's first Python example is self-contained and runs as shown (SPEC 11)."""

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


def test_first_python_example_runs_as_shown(tmp_path: Path) -> None:
    code = python_blocks()[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "10000 documents done; chain verified" in out.stdout
    assert (tmp_path / "agent.db").exists()
