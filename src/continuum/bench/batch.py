"""The batch every worker strategy sends: its work, its side effect, its stop points."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from continuum.eventlog.canonical import canonical_json

RUN = "invoice-batch"
STRATEGIES = ("continuum", "full_replay", "naive_checkpoint")
PHASES = ("before_effect", "after_effect", "between")
FAIL_EVERY = 5  # in partial_completion, items i % 5 == 2 are rejected on their first delivery


class Rejected(Exception):
    """The receiver refused the delivery: certainly not done (e.g. a bad address)."""


class Batch:
    """The work, the side effect and the stop points, shared by every strategy."""

    def __init__(
        self, root: Path, total: int, stop: tuple[str, int] | None, reject_first: bool
    ) -> None:
        self.root, self.total, self.stop, self.reject_first = root, total, stop, reject_first
        self.outbox = root / "outbox"
        self.dataset = root / "dataset.txt"

    def compute(self, i: int) -> str:
        """The work for item ``i``: read its amount from the dataset (logged to count repeats)."""
        with open(self.root / "work.log", "a", encoding="utf-8") as f:
            f.write(f"{i}\n")
        lines = self.dataset.read_text(encoding="utf-8").splitlines()
        return lines[i].strip()

    def deliver(self, i: int, amount: str) -> None:
        """The side effect: the receiver appends one line per delivery it accepts."""
        marker = self.outbox / f".rejected-{i}"
        if self.reject_first and i % FAIL_EVERY == 2 and not marker.exists():
            marker.write_text("rejected once\n", encoding="utf-8")
            raise Rejected(f"invoice {i} rejected by the receiver")
        with open(self.outbox / f"invoice-{i}.txt", "a", encoding="utf-8") as f:
            f.write(f"invoice {i} amount {amount}\n")

    def delivered(self, i: int) -> bool:
        """What a careful agent checks in the external system before reconciling."""
        return (self.outbox / f"invoice-{i}.txt").exists()

    def transcript(self, **entry: Any) -> None:
        with open(self.root / "transcript.jsonl", "a", encoding="utf-8") as f:
            f.write(canonical_json(entry) + "\n")

    def at(self, phase: str, i: int) -> None:
        if self.stop == (phase, i):
            sys.stdout.write(f"STOP {phase} {i}\n")
            sys.stdout.flush()
            sys.stdin.readline()  # the benchmark SIGKILLs this process while it waits here
            os._exit(3)  # never reached when killed; an early stdin close is not a clean finish
