"""`make test` ends on one line that says what passed, what failed and how long it took
(scripts/test_summary.py over pytest's JUnit reports)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test_summary.py"


def report(path: Path, passed: int, failed: tuple[str, ...] = (), skipped: int = 0) -> Path:
    cases = [f'<testcase classname="tests.unit.test_a" name="ok_{i}"/>' for i in range(passed)]
    cases += [
        f'<testcase classname="tests.unit.test_b" name="{name}"><failure message="x"/></testcase>'
        for name in failed
    ]
    cases += [
        f'<testcase classname="tests.unit.test_c" name="skip_{i}"><skipped/></testcase>'
        for i in range(skipped)
    ]
    total = passed + len(failed) + skipped
    path.write_text(
        f'<testsuites><testsuite name="pytest" tests="{total}" failures="{len(failed)}" '
        f'errors="0" skipped="{skipped}">{"".join(cases)}</testsuite></testsuites>'
    )
    return path


def summary(*parts: str, started: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--started",
            str(started if started is not None else time.time() - 125),
            "--coverage",
            "87",
            *parts,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_all_passed_is_one_line_with_counts_time_and_coverage(tmp_path: Path) -> None:
    a = report(tmp_path / "a.xml", 3)
    b = report(tmp_path / "b.xml", 2, skipped=1)
    p = summary(f"in-process={a}", f"subprocess={b}")
    assert p.returncode == 0, p.stderr
    [line] = p.stdout.splitlines()
    assert re.fullmatch(
        r"make test: passed: 6 tests \(in-process 3, subprocess 3\), 1 skipped, "
        r"2 min [5-9] s; coverage 87%",
        line,
    ), line


def test_a_failure_fails_and_names_it(tmp_path: Path) -> None:
    a = report(tmp_path / "a.xml", 3, failed=("test_broken",))
    p = summary(f"in-process={a}")
    assert p.returncode == 1
    assert p.stdout.startswith("make test: FAILED: 1 failed of 4 tests (in-process 4)")
    assert "tests.unit.test_b::test_broken" in p.stdout


def test_a_part_cut_off_without_a_report_fails(tmp_path: Path) -> None:
    a = report(tmp_path / "a.xml", 3)
    p = summary(f"in-process={a}", f"subprocess={tmp_path / 'missing.xml'}")
    assert p.returncode == 1
    assert "no report from subprocess" in p.stdout


def test_make_test_ends_on_the_summary_line() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\ntest: $(STAMP)") :].split("\n\n", 1)[0]
    assert recipe.rstrip().endswith("exit $$rc")
    assert "scripts/test_summary.py" in recipe and "--junitxml" in recipe
    assert "coverage report --sort" not in recipe  # no table of 0 % rows at the end
