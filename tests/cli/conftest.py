from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from continuum.cli.main import run


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(autouse=True)
def _reap_terminals() -> Iterator[None]:
    """A command a failed test left running on a pty is ended here (see Terminal)."""
    from tests.cli.pty_support import reap_terminals

    yield
    reap_terminals()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "store.db")


@pytest.fixture
def cli(db: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run the CLI in-process (fast) against the test's store."""

    def invoke(*args: str, with_db: bool = True) -> Result:
        argv = (["--db", db] if with_db else []) + list(args)
        code = run(argv)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def cli_proc(db: str, tmp_path: Path) -> Callable[..., Result]:
    """Run the CLI as a real subprocess (`python -m continuum`)."""

    def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
        full_env = {**os.environ, **(env or {})}
        full_env.pop("CONTINUUM_DB", None)
        if env and "CONTINUUM_DB" in env:
            full_env["CONTINUUM_DB"] = env["CONTINUUM_DB"]
        argv = [sys.executable, "-m", "continuum", *args]
        if not env or "CONTINUUM_DB" not in env:
            argv[3:3] = ["--db", db]
        p = subprocess.run(
            argv, capture_output=True, text=True, cwd=tmp_path, env=full_env, timeout=60
        )
        return Result(p.returncode, p.stdout, p.stderr)

    return invoke
