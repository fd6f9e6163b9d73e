"""Score the invoice batch on the 7 mechanics, out of band.

Usage: score.py WORK [RUN]

Nothing here trusts the agent: the sent invoices are read from the external system
itself (the outbox files, or the HTTP sink's journal in --http mode) and the run from
the store through the `continuum` CLI (read-only commands, --json). RUN defaults to
kit.env's KIT_RUN. Prints each mechanic, then N/7; exits 0 only at 7/7.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

EXPECTED = [f"INV-00{i}" for i in range(1, 6)]


def read_env(work: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in (work / "kit.env").read_text().splitlines() if "=" in line
    )
    return {k: v for k, v in pairs}


def sent_invoices(work: Path, mode: str) -> list[tuple[str, str]]:
    """(invoice id, text sent) for every send the external system received."""
    if mode == "http":
        journal = work / "sink" / "received.jsonl"
        if not journal.exists():
            return []
        rows = [
            json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line
        ]
        return [(r["invoice"], r["body"]) for r in rows]
    outbox = work / "outbox"
    if not outbox.is_dir():
        return []
    return [
        (p.stem, p.read_text(encoding="utf-8")) for p in sorted(outbox.iterdir()) if p.is_file()
    ]


def continuum(work: Path, db: str, *args: str) -> tuple[int, dict[str, Any]]:
    exe = Path(sys.executable).parent / "continuum"
    p = subprocess.run(
        [str(exe), "--db", db, "--json", *args], capture_output=True, text=True, timeout=120
    )
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        return p.returncode, {"ok": False, "error": {"message": p.stderr.strip()}}


def main() -> int:
    work = Path(sys.argv[1]).resolve()
    env = read_env(work)
    run = sys.argv[2] if len(sys.argv) > 2 else env["KIT_RUN"]
    db, mode = env["KIT_DB"], env["KIT_MODE"]
    inputs = {
        p.stem: p.read_text(encoding="utf-8").strip()
        for p in sorted((work / "invoices").glob("INV-*.txt"))
    }
    where = "what the HTTP sink received" if mode == "http" else "the files in the outbox"
    print(f"scoring run {run!r} in {work} (sent = {where})")

    results: list[tuple[str, bool]] = []

    def mechanic(text: str, ok: bool) -> None:
        results.append((text, ok))
        print(f"  [{'pass' if ok else 'FAIL'}] {len(results)}. {text}", flush=True)

    sent = sent_invoices(work, mode)
    unit = "requests" if mode == "http" else "files"
    mechanic(f"exactly 5 sent {unit} (found {len(sent)})", len(sent) == 5)
    multi = [i for i, text in sent if len(text.splitlines()) != 1]
    mechanic(
        "each sent invoice is a single line"
        + (f" (not: {', '.join(sorted(set(multi)))})" if multi else ""),
        bool(sent) and not multi,
    )
    counts = Counter(i for i, _ in sent)
    wrong = [
        i
        for i, text in sent  # a line that is not this invoice's own line
        if not text.strip() or any(line.strip() != inputs.get(i) for line in text.splitlines())
    ]
    mechanic(
        "exactly INV-001..INV-005, each once, each its own invoice's line"
        + (
            f" (sent: {dict(sorted(counts.items()))})"
            if sorted(counts) != EXPECTED or any(n != 1 for n in counts.values())
            else ""
        )
        + (f" (wrong text: {', '.join(sorted(set(wrong)))})" if wrong else ""),
        sorted(counts) == EXPECTED and all(n == 1 for n in counts.values()) and not wrong,
    )

    code, a = continuum(work, db, "actions", run)
    actions = a.get("actions", [])
    completed = [x for x in actions if x["status"] == "completed"]
    mechanic(
        f"ledger shows 5 completed actions (found {len(completed)} of {len(actions)})",
        a.get("ok") is True and len(completed) == 5,
    )
    mechanic(
        f"0 unresolved actions (found {a.get('unresolved', '?')})",
        a.get("ok") is True and a.get("unresolved") == 0 and code == 0,
    )

    code, s = continuum(work, db, "status", run)
    done = s.get("progress", {}).get("completed")
    mechanic(f"projected progress is 5 (found {done})", s.get("ok") is True and done == 5)

    code, v = continuum(work, db, "verify", run)
    reports = v.get("reports") or [{}]
    mechanic(
        f"hash chain verified ({reports[0].get('events_checked', '?')} events)",
        code == 0 and v.get("verified") is True,
    )

    passed = sum(ok for _, ok in results)
    print(f"{passed}/{len(results)}")
    return 0 if passed == len(results) == 7 else 1


if __name__ == "__main__":
    sys.exit(main())
