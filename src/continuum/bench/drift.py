"""Argument drift: the same invoice asked for twice, in different words.

A restarted agent rarely repeats a call byte for byte: it renames fields
(``invoice`` -> ``invoice_id``), writes a path relative instead of absolute, or
reformats a value. Each variant sends invoice INV-7 once, then again in drifted form
from a fresh store connection (as a restarted agent would), under four identities:

- ``stable_key``: continuum with a business key (``invoice:INV-7``);
- ``fallback``: continuum without a key (canonical arguments, then the drift-tolerant
  fallback key: leaf values with field names dropped, paths normalized);
- ``exact_arguments``: a dedup table keyed by the raw arguments' hash (no continuum);
- ``no_ledger``: nothing remembers anything.

A delivery appends a line to the outbox file; two lines are a duplicate side effect.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from continuum.bench.report import DriftResult
from continuum.errors import NotFoundError
from continuum.eventlog.canonical import digest
from continuum.runtime.facade import Continuum

RUN = "drift"
IDENTITIES = ("stable_key", "fallback", "exact_arguments", "no_ledger")


def variants(base: Path) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(name, what changes, first call, drifted call); relative paths are from ``base``."""
    absolute = str(base / "out" / "INV-7.pdf")
    first = {
        "invoice": "INV-7",
        "to": "billing@example.test",
        "amount": "120.00",
        "attachment": absolute,
    }
    return [
        (
            "renamed_fields",
            "invoice->invoice_id, to->recipient, attachment->file",
            first,
            {
                "invoice_id": "INV-7",
                "recipient": "billing@example.test",
                "amount": "120.00",
                "file": absolute,
            },
        ),
        (
            "path_form",
            "relative path vs absolute path with ./",
            {**first, "attachment": "out/INV-7.pdf"},
            {**first, "attachment": str(base / "out" / "." / "INV-7.pdf")},
        ),
        (
            "renamed_and_path",
            "both of the above",
            {**first, "attachment": "out/INV-7.pdf"},
            {
                "invoice_id": "INV-7",
                "recipient": "billing@example.test",
                "amount": "120.00",
                "file": str(base / "out" / "." / "INV-7.pdf"),
            },
        ),
        (
            "reformatted_value",
            "renamed fields and amount '120.00' -> 120 (a different value to any generic rule)",
            first,
            {
                "invoice_id": "INV-7",
                "recipient": "billing@example.test",
                "amount": 120,
                "file": absolute,
            },
        ),
    ]


def _continuum_attempt(
    root: Path, cwd: Path, args: dict[str, Any], key: str | None, deliver: Callable[[], None]
) -> str | None:
    """One agent process's attempt: intercept, deliver if allowed, complete."""
    rt = Continuum.open(str(root / "continuum.db"), cwd=str(cwd))
    try:
        try:
            rt.store.get_run(RUN)
        except NotFoundError:  # the first attempt: no run yet
            rt.start_run(RUN, "send INV-7 once")
        r = rt.intercept(RUN, "send_invoice", args, key=key)
        if r.proceed:
            deliver()
            rt.complete(RUN, r.action_key, external_id="outbox:INV-7")
        return r.matched_by
    finally:
        rt.close()


def run_drift(base: Path, progress: Callable[[str], None] | None = None) -> list[DriftResult]:
    out: list[DriftResult] = []
    for name, change, first, second in variants(base / "cwd"):
        for identity in IDENTITIES:
            root = base / name / identity
            (root / "outbox").mkdir(parents=True, exist_ok=True)
            outbox = root / "outbox" / "INV-7.txt"

            def deliver(outbox: Path = outbox) -> None:
                with open(outbox, "a", encoding="utf-8") as f:
                    f.write("INV-7 delivered\n")

            matched: str | None = None
            if identity in ("stable_key", "fallback"):
                key = "invoice:INV-7" if identity == "stable_key" else None
                _continuum_attempt(root, base / "cwd", first, key, deliver)
                matched = _continuum_attempt(root, base / "cwd", second, key, deliver)
            elif identity == "exact_arguments":
                seen: set[str] = set()
                for args in (first, second):
                    if digest(args) not in seen:
                        seen.add(digest(args))
                        deliver()
            else:
                deliver()
                deliver()
            sent = len(outbox.read_text(encoding="utf-8").splitlines())
            out.append(
                DriftResult(
                    variant=name,
                    change=change,
                    identity=identity,
                    deliveries=sent,
                    duplicate_side_effects=sent - 1,
                    matched_by=matched,
                )
            )
        if progress:
            progress(
                f"drift {name}: "
                + ", ".join(
                    f"{r.identity}={r.duplicate_side_effects}" for r in out if r.variant == name
                )
            )
    return out
