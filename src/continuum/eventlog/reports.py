"""What a verification reports (pydantic models for the API edge): ``Violation`` and
``VerifyReport``. ``chain.py`` builds them only when it has something to report or is
asked for a report, so reading a log that verifies never loads pydantic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from continuum.types import DamageKind


class Violation(BaseModel):
    """One finding of a verification: the first ``sequence`` affected, the ``kind`` of
    damage (a ``DamageKind``) and a one-line ``detail``."""

    model_config = ConfigDict(frozen=True)

    sequence: int
    kind: DamageKind
    detail: str


class VerifyReport(BaseModel):
    """The result of verifying a run (``Continuum.verify``, ``Storage.verify_events``).

    ``ok`` is true only without violations; ``trusted_through`` is the last sequence
    whose event and every one before it verified; ``events_checked`` how many were read;
    ``head_sequence``/``head_hash`` the head as recorded; ``violations`` every finding,
    first damage first. Verification never repairs anything. ``archived_through``: the
    events up to it were moved to an archive file (``continuum archive``); the live log
    was verified from the hash its archive marker records, and the archived part only
    when the archive files were given (``continuum verify RUN --archive FILE``).
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    ok: bool
    events_checked: int
    trusted_through: int
    head_sequence: int
    head_hash: str | None
    violations: list[Violation]
    archived_through: int = 0

    @property
    def first_violation(self) -> Violation | None:
        """The earliest finding, or None when the run verified."""
        return self.violations[0] if self.violations else None
