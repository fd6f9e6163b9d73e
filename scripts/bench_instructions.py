"""The hot paths in instructions (callgrind): figures a busy or slower machine does not move.

Usage: scripts/bench_instructions.py [--ops N] [--base-src DIR] [--json] [--out FILE]

CPU and wall figures (scripts/bench.py) move with the machine: the same code measured
3x apart on two machines of one kind. ``valgrind --tool=callgrind`` counts the
instructions a process executes, the same for the same code and inputs whatever else
runs. Per operation, from two runs of one loop of different lengths (the difference
cancels start-up, imports and the store's creation):

- ``append``: ``store.append_event`` of a small event (a durable append);
- ``pair``: ``Continuum.intercept`` + ``complete`` of a new keyed action;
- ``hook_pre`` / ``hook_post`` / ``hook_no_match``: one whole ``continuum.hooks``
  process of a registered effect's pre-tool and post-tool hooks, and of a call matching
  no rule (a Claude Code payload; start-up included: that is what a host waits for), and
  ``bare``: ``python -c pass`` of the same interpreter.

``--base-src DIR``: the same figures for another commit's ``src`` (e.g. a ``git worktree``
or ``git archive`` of it), side by side, with the change in percent. Each process runs
with ``PYTHONPATH`` set to the ``src`` it measures and without ``PYTHONDONTWRITEBYTECODE``
(byte code is written once, by an uncounted first run). Instructions are not time: an
instruction of SQLite's page checksum and one of the interpreter's loop cost differently,
and a system call's work in the kernel is not counted. A few minutes (valgrind runs the
interpreter about 50x slower).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

# One loop per figure, run as ``python -c LOOP SRC N``: N operations after a warm-up.
LOOP = r"""
import os, sys, tempfile
sys.path.insert(0, sys.argv[1])  # the src measured, before an installed one
from continuum import Continuum
from continuum.eventlog.events import EventType
rt = Continuum.open(os.path.join(tempfile.mkdtemp(dir=sys.argv[4]), "s.db"))
rt.start_run("bench")
kind, n = sys.argv[2], int(sys.argv[3])

def append(count, tag):
    for i in range(count):
        rt.store.append_event("bench", EventType.WORK_COMPLETED, {"doc": i})

def pair(count, tag):
    for i in range(count):
        r = rt.intercept("bench", "send_invoice", {"invoice": f"{tag}-{i}"},
                         key=f"invoice:{tag}-{i}")
        rt.complete("bench", r.action_key, external_id=f"x-{tag}-{i}")

loop = append if kind == "append" else pair
loop(100, "warm")
loop(n, "run")
"""

REGISTRY = """
[[effect]]
tool = "Bash"
match = { command = '^\\./send ' }
action_type = "send_invoice"
key = "{command}"
"""


def instructions(argv: list[str], *, env: dict[str, str], stdin: bytes = b"") -> int:
    """The instructions ``argv`` executes (callgrind's total)."""
    with tempfile.NamedTemporaryFile(suffix=".out") as out:
        p = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}", *argv],
            input=stdin,
            capture_output=True,
            env=env,
            check=False,
        )
    found = re.search(rb"Collected : (\d+)", p.stderr) or re.search(
        rb"I\s+refs:\s+([\d,]+)", p.stderr
    )
    if p.returncode != 0 or found is None:
        raise RuntimeError(f"{argv[:3]} failed ({p.returncode}): {p.stderr.decode()[-600:]}")
    return int(found.group(1).replace(b",", b""))


def environment(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(src)
    return env


def per_op(src: Path, kind: str, ops: int, work: Path) -> float:
    env = environment(src)
    short = [sys.executable, "-c", LOOP, str(src), kind, "0", str(work)]
    subprocess.run(short, env=env, capture_output=True, check=True)  # byte code written
    base = instructions(short, env=env)
    long = instructions([*short[:-2], str(ops), str(work)], env=env)
    return (long - base) / ops


def hook_figures(src: Path, work: Path) -> dict[str, int]:
    env = environment(src)
    project = Path(tempfile.mkdtemp(prefix="project-", dir=work))
    (project / ".continuum").mkdir(parents=True)
    (project / ".continuum" / "effects.toml").write_text(REGISTRY, encoding="utf-8")
    db = project / "hooks.db"
    cli = [sys.executable, "-m", "continuum"]
    subprocess.run(
        [*cli, "hooks", "accept", "--dir", str(project), "--run", "bench", "--yes"]
        + ["--db", str(db)],
        env=env,
        capture_output=True,
        check=True,
    )
    hook = [sys.executable, "-m", "continuum.hooks"]
    args = ["--host", "claude-code", "--db", str(db), "--run", "bench", "--project", str(project)]

    def payload(i: int, **more: Any) -> bytes:
        call = {"tool_name": "Bash", "tool_input": {"command": f"./send INV-{i}"}}
        return json.dumps({"session_id": "b", "cwd": str(project), **call, **more}).encode()

    post = {"tool_response": {"stdout": "", "stderr": "", "interrupted": False}}
    no_match = json.dumps(
        {"session_id": "b", "cwd": str(project), "tool_name": "Bash"}
        | {"tool_input": {"command": "echo hello"}}
    ).encode()
    # One uncounted effect first: byte code written, the store and its run made.
    subprocess.run(
        [*hook, "pre-tool", *args],
        input=payload(0, tool_use_id="t0"),
        env=env,
        capture_output=True,
        check=True,
    )
    subprocess.run(
        [*hook, "post-tool", *args],
        input=payload(0, tool_use_id="t0", **post),
        env=env,
        capture_output=True,
        check=True,
    )
    return {
        "hook_pre": instructions(
            [*hook, "pre-tool", *args], env=env, stdin=payload(1, tool_use_id="t1")
        ),
        "hook_post": instructions(
            [*hook, "post-tool", *args], env=env, stdin=payload(1, tool_use_id="t1", **post)
        ),
        "hook_no_match": instructions([*hook, "pre-tool", *args], env=env, stdin=no_match),
        "bare": instructions([sys.executable, "-c", "pass"], env=env),
    }


def figures(src: Path, ops: int, work: Path) -> dict[str, float]:
    out: dict[str, float] = {
        "append": per_op(src, "append", ops, work),
        "pair": per_op(src, "pair", max(ops // 2, 1), work),
    }
    out.update(hook_figures(src, work))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=1000, help="operations per long loop (1000)")
    ap.add_argument("--base-src", type=Path, default=None, help="another commit's src dir")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print(
            "bench_instructions: valgrind is not installed (apt-get install valgrind)",
            file=sys.stderr,
        )
        return 2
    if args.ops < 10:
        print("bench_instructions: --ops must be at least 10", file=sys.stderr)
        return 2
    if args.base_src is not None and not (args.base_src / "continuum").is_dir():
        print(
            f"bench_instructions: {args.base_src} holds no continuum package "
            "(give the src directory of another checkout)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="continuum-instr-") as tmp:
        work = Path(tmp)
        print("bench_instructions: this checkout (a few minutes)", file=sys.stderr)
        now = figures(SRC, args.ops, work)
        base = None
        if args.base_src is not None:
            print(f"bench_instructions: {args.base_src}", file=sys.stderr)
            base = figures(args.base_src.resolve(), args.ops, work)
    doc: dict[str, Any] = {"ops": args.ops, "instructions": {k: round(v) for k, v in now.items()}}
    if base is not None:
        doc["base_src"] = str(args.base_src)
        doc["base_instructions"] = {k: round(v) for k, v in base.items()}
        doc["change_percent"] = {
            k: round((now[k] - base[k]) / base[k] * 100, 1) for k in now if base.get(k)
        }
    text = json.dumps(doc, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
        return 0
    for k, v in now.items():
        line = f"{k:14s} {v:>14,.0f}"
        if base is not None:
            line += f"   base {base[k]:>14,.0f}   {doc['change_percent'][k]:+.1f}%"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
