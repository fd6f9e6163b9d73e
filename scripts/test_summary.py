"""The one line `make test` ends on: what ran, what failed, how long it took.

    python scripts/test_summary.py --started EPOCH_SECONDS [--coverage PERCENT] \
        NAME=JUNIT.xml [NAME=JUNIT.xml ...]

Reads the JUnit XML report pytest wrote for each part of the suite (``--junitxml``) and
prints, on stdout::

    make test: passed: 3512 tests (in-process 1915, subprocess 1597), 4 skipped, 14 min 2 s; coverage 86%

or ``make test: FAILED: 2 failed, 1 error of 3512 tests (...)`` naming the first failures.
A part whose report is missing (its run was cut off) counts as a failure. Exit status 0
when everything passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SHOWN_FAILURES = 5


@dataclass
class Part:
    name: str
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    missing: bool = False
    failed: list[str] = field(default_factory=list)


def read_part(name: str, path: Path) -> Part:
    part = Part(name)
    if not path.is_file():
        part.missing = True
        return part
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        part.missing = True
        return part
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for suite in suites:
        part.tests += int(suite.get("tests", 0))
        part.failures += int(suite.get("failures", 0))
        part.errors += int(suite.get("errors", 0))
        part.skipped += int(suite.get("skipped", 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                part.failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return part


def duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def summary(parts: list[Part], seconds: float, coverage: str | None) -> tuple[bool, str]:
    tests = sum(p.tests for p in parts)
    failures = sum(p.failures for p in parts)
    errors = sum(p.errors for p in parts)
    skipped = sum(p.skipped for p in parts)
    missing = [p.name for p in parts if p.missing]
    split = ", ".join(f"{p.name} {'no report' if p.missing else p.tests}" for p in parts)
    tail = f"{duration(seconds)}" + (f"; coverage {coverage}%" if coverage else "")
    ok = not (failures or errors or missing) and tests > 0
    if ok:
        skips = f", {skipped} skipped" if skipped else ""
        return True, f"make test: passed: {tests} tests ({split}){skips}, {tail}"
    problems = []
    if failures:
        problems.append(f"{failures} failed")
    if errors:
        problems.append(f"{errors} errors")
    if missing:
        problems.append(f"no report from {', '.join(missing)} (cut off?)")
    if not tests and not missing:
        problems.append("no tests ran")
    names = [name for p in parts for name in p.failed][:SHOWN_FAILURES]
    first = f"; first: {', '.join(names)}" if names else ""
    return (
        False,
        f"make test: FAILED: {', '.join(problems)} of {tests} tests ({split}), {tail}{first}",
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--started", type=float, required=True, help="start time, epoch seconds")
    ap.add_argument("--coverage", default=None, help="total coverage percent, if measured")
    ap.add_argument("reports", nargs="+", metavar="NAME=JUNIT.xml")
    args = ap.parse_args(argv)
    parts = []
    for item in args.reports:
        name, sep, path = item.partition("=")
        if not sep:
            ap.error(f"{item!r} is not NAME=JUNIT.xml")
        parts.append(read_part(name, Path(path)))
    ok, line = summary(parts, time.time() - args.started, args.coverage or None)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
