"""Run a document's ```console block as a person would type it, and compare what it printed
with what the document shows (hashes, ids of temporary directories and bash's own words
for a killed job normalized)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def console_steps(doc: Path, index: int = 0) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of the document's ``index``-th console block."""
    blocks = re.findall(r"```console\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) > index, f"{doc.name} has no ```console block number {index + 1}"
    steps: list[tuple[str, list[str]]] = []
    lines = blocks[index].splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), f"{doc.name} line {i + 1} is not a command: {lines[i]!r}"
        command = [lines[i][2:]]
        i += 1
        if "<<'EOF'" in command[0]:  # a here-document belongs to its command
            while lines[i] != "EOF":
                command.append(lines[i])
                i += 1
            command.append(lines[i])
            i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        steps.append(("\n".join(command), output))
    return steps


def normalized(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if "Killed" in line:  # bash reports a SIGKILLed job in its own words
            line = "Killed"
        line = re.sub(r"\(event hash [0-9a-f]{12}\)", "(event hash <hash>)", line)
        line = re.sub(r"/tmp/[^/\s]+/", "/tmp/<dir>/", line)  # mktemp -d
        line = re.sub(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b", "<time>", line)
        out.append(re.sub(r"\b[0-9a-f]{16}\.\.\.", "<hash>...", line.rstrip()))
    while out and not out[-1]:
        out.pop()
    return out


def run_console(steps: list[tuple[str, list[str]]], cwd: Path) -> list[str]:
    """Each step's output (stdout and stderr as a terminal shows them), in one bash."""
    script = ["set +e"]
    for n, (command, _) in enumerate(steps):
        script += [f"echo '@@step {n}'", "{", command, "} 2>&1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")}
    env.update(PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1")
    p = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
    )
    actual = re.split(r"^@@step \d+\n", p.stdout, flags=re.M)[1:]
    assert len(actual) == len(steps), p.stdout
    return actual


def assert_console_block_true(doc: Path, cwd: Path, index: int = 0) -> None:
    steps = console_steps(doc, index)
    for (command, expected), got in zip(steps, run_console(steps, cwd), strict=True):
        assert normalized(got.splitlines()) == normalized(expected), f"{doc.name}: $ {command}"
