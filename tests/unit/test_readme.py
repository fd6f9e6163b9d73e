"""The README leads with the commands that work from a clone and one way to write an agent
(``Continuum`` and ``@cx.effect``, in the tour); the log-alone example, now in api.md, is
self-contained and runs as shown (contract §11)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
API = README.parent / "references" / "api.md"


def python_blocks(doc: Path = API) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)


def test_readme_shows_make_demo_and_make_test_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.findall(r"```\w*\n(.*?)```", text, flags=re.S)[0]
    assert first_block.lstrip().startswith("make demo")
    assert "make test" in first_block


def test_the_readme_writes_its_one_agent_with_the_facade_and_effects() -> None:
    text = README.read_text(encoding="utf-8")
    tour = re.findall(r"```console\n(.*?)```", text, flags=re.S)[0]
    assert "@cx.effect(" in tour and "Continuum.open(" in tour
    assert "SQLiteStorage" not in text and "append_event" not in text  # one API, not two
    assert (
        text.index("## Install")
        < text.index("## A 60-second tour")
        < text.index("## Words used here")
        < text.index("## Writing an agent")
        < text.index("## Coding agents")
    )


def test_the_readme_installs_from_a_clone_and_calls_the_package_unpublished() -> None:
    text = README.read_text(encoding="utf-8")
    install = text[text.index("## Install") : text.index("## A 60-second tour")]
    first = re.findall(r"```\w*\n(.*?)```", install, flags=re.S)[0]
    assert first.lstrip().startswith("pip install .")
    assert "not on the package index" in install
    assert "pip install continuum-recovery" not in text


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
