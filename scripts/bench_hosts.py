"""What continuum's hooks cost through the real coding hosts (`scripts/bench.py --hosts`).

    python scripts/bench_hosts.py [--host NAME]... [--rounds N] [--calls N] [--gate]
                                  [--json] [--out F]

For each host (default: all four pinned in tests/hosts/hosts.toml, installed by `make
hosts`), sessions of the real binary against the scripted model of tests/hosts/, each
making N tool calls (default 10) of one kind, with and without continuum's hooks
installed, alternated round by round (default 3 rounds):

- unregistered: `echo N` (no effect rule matches: the gate's fast path);
- registered: `./send INV-R-N` (an effect rule matches: intercept before, complete after).

The time of a session's calls is measured at the scripted model: from the request that
asks for the first call to the one that carries the last call's result, so the host's
start-up and shutdown (seconds, and noisy) are left out. Per call added = (with hooks -
without) / N; the ratio is with / without. Medians over the rounds; the minimum and
maximum are kept in the JSON. Targets (issue 27): an unregistered call adds at most
15 ms, a registered effect at most 100 ms. With ``--gate`` the hooks hand every call to a
resident gate (`continuum hooks serve`) started for the run. This prints figures; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hosts.harness import Host, Project  # noqa: E402
from tests.hosts.hosts_all import CLAUDE, CODEX, GEMINI, KILO  # noqa: E402
from tests.hosts.scenarios import register_send, setup_send  # noqa: E402

GATE_ENV: dict[str, str] = {}  # the hooks' environment with --gate

HOSTS: dict[str, Host] = {h.name: h for h in (CLAUDE, GEMINI, CODEX, KILO)}
TARGET_MS = {"unregistered": 15.0, "registered": 100.0}
SHELLS = "Bash|run_shell_command|bash|exec_command|shell"


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def project(host: Host, root: Path, hooks: bool) -> Project:
    p = Project(host, root)
    setup_send(p)
    register_send(p, SHELLS)
    if hooks:
        p.install_hooks()
        p.extra_env = dict(GATE_ENV)
    return p


def calls_seconds(p: Project, commands: list[str]) -> float:
    """The time of one session's calls, as the scripted model saw them."""
    s = p.session([[p.host.shell(c)] for c in commands])
    if s.code != 0 or s.model.problems:
        raise RuntimeError(f"{p.host.name} session failed: {s.describe()}")
    turns = sorted(s.model.main_turns(), key=lambda t: t.at)
    first = next(t for t in turns if t.position == 0)
    last = [t for t in turns if t.position == len(commands)]
    if not last:
        raise RuntimeError(f"{p.host.name}: the session ended before its last call")
    return last[-1].at - first.at


def measure(host: Host, work: Path, rounds: int, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("unregistered", "registered"):
        samples: dict[str, list[float]] = {"with": [], "without": []}
        for r in range(rounds):
            for hooks in (True, False) if r % 2 == 0 else (False, True):
                label = "with" if hooks else "without"
                root = work / f"{host.name}-{kind}-{label}-{r}"
                p = project(host, root, hooks)
                commands = (
                    [f"echo {i}" for i in range(n)]
                    if kind == "unregistered"
                    else [f"./send INV-{r}-{i}" for i in range(n)]
                )
                seconds = calls_seconds(p, commands)
                samples[label].append(seconds)
                progress(f"  {host.name} {kind} {label} hooks, round {r + 1}: {seconds:.2f} s")
                shutil.rmtree(root, ignore_errors=True)
        added = [
            (w - wo) / n * 1000 for w, wo in zip(samples["with"], samples["without"], strict=True)
        ]
        ratio = [w / wo for w, wo in zip(samples["with"], samples["without"], strict=True) if wo]
        median_added = statistics.median(added)
        out[kind] = {
            "calls": n,
            "rounds": rounds,
            "with_s": samples["with"],
            "without_s": samples["without"],
            "added_ms_per_call": round(median_added, 1),
            "added_ms_per_call_min": round(min(added), 1),
            "added_ms_per_call_max": round(max(added), 1),
            "ratio": round(statistics.median(ratio), 2) if ratio else None,
            "target_ms": TARGET_MS[kind],
            "pass": median_added <= TARGET_MS[kind],
        }
    return out


def render(doc: dict[str, Any]) -> list[str]:
    lines = [
        "host hooks through the real hosts (ms added per call, median of "
        f"{doc['rounds']} alternated rounds of {doc['calls']} calls; with/without ratio):"
    ]
    for name, figures in doc["hosts"].items():
        for kind in ("unregistered", "registered"):
            f = figures[kind]
            verdict = "met" if f["pass"] else "MISSED"
            lines.append(
                f"  {name:12} {kind:12} +{f['added_ms_per_call']:7.1f} ms/call "
                f"(min {f['added_ms_per_call_min']}, max {f['added_ms_per_call_max']}; "
                f"ratio {f['ratio']}) target <= {f['target_ms']:.0f} ms: {verdict}"
            )
    if doc.get("gate"):
        lines.append(f"through a resident gate, which served {doc.get('gate_served')} calls")
    lines.append(f"load average at the end {doc['loadavg_end']}; {doc['seconds']:.0f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", action="append", choices=sorted(HOSTS), default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument(
        "--gate", action="store_true", help="hooks hand their calls to `continuum hooks serve`"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls < 2:
        ap.error("--rounds must be at least 1 and --calls at least 2")
    names = args.host or list(HOSTS)
    # Bytecode as an installed package has it (under PYTHONDONTWRITEBYTECODE a module
    # edited since its .pyc was written is compiled again by every hook process).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            str(Path(__file__).resolve().parents[1] / "src"),
        ],
        capture_output=True,
        check=False,
    )
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="continuum-bench-hosts-"))
    doc: dict[str, Any] = {
        "version": 1,
        "rounds": args.rounds,
        "calls": args.calls,
        "gate": args.gate,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "hosts": {},
    }
    gate = None
    try:
        if args.gate:
            from tests.hooks.gates import start_gate, stop_gate

            socket_path, log = work / "g" / "gate.sock", work / "gate.log"
            gate = start_gate(socket_path, log, env={"CONTINUUM_GATE_SOCKET": "off"})
            GATE_ENV["CONTINUUM_GATE_SOCKET"] = str(socket_path)
        for name in names:
            progress(f"{name}:")
            doc["hosts"][name] = measure(HOSTS[name], work, args.rounds, args.calls)
        if gate is not None:
            doc["gate_served"] = stop_gate(gate, log)
            gate = None
    finally:
        if gate is not None:
            gate.kill()
        shutil.rmtree(work, ignore_errors=True)
    doc["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["seconds"] = round(time.perf_counter() - started, 1)
    doc["passed"] = all(f[k]["pass"] for f in doc["hosts"].values() for k in TARGET_MS)
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else "\n".join(render(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
