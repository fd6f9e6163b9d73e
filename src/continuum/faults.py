"""Named fault points for crash tests: inert unless a test enables them.

A test sets ``CONTINUUM_FAULTS=name[,name...]`` (optionally ``name@N`` to fire on the
N-th hit) in a subprocess's environment; when execution reaches that point the process
dies at once with ``os._exit`` (no ``finally``, no flush), exactly like a kill.
"""

from __future__ import annotations

import os

FAULT_EXIT_CODE = 86
_armed: dict[str, int] = {}
_hits: dict[str, int] = {}


def _load(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in spec.replace(" ", ",").split(","):
        if not part:
            continue
        name, _, nth = part.partition("@")
        out[name] = int(nth) if nth.isdigit() else 1
    return out


_armed = _load(os.environ.get("CONTINUUM_FAULTS", ""))


def arm(spec: str) -> None:
    """Arm the points ``spec`` names, afresh: a process that takes on another's environment
    (the resident gate's worker, ``hooks/resident.py``) fires what that one would have."""
    global _armed
    _armed = _load(spec)
    _hits.clear()


def fault_point(name: str) -> None:
    """Die here if the test armed ``name`` (cheap no-op otherwise)."""
    if not _armed or name not in _armed:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= _armed[name]:
        os._exit(FAULT_EXIT_CODE)
