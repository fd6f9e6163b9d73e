"""The sealed recovery contract (pure).

``integrity_hash`` is SHA-256 of the canonical JSON of every field but the hash and the
creation time, so the same log and the same environment give a byte-identical
contract body, and any edit to a contract file is detected.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from continuum.eventlog.canonical import canonical_json, digest

CONTRACT_VERSION = 1
_UNSEALED = ("integrity_hash", "created_at")


class InvalidatedComponent(BaseModel):
    """A component of the state (goal, a finding, a decision, ...) the contract does not
    vouch for: its validation ``status`` and why."""

    model_config = ConfigDict(frozen=True)

    component: str
    status: str
    reason: str


class RecoveryContract(BaseModel):
    """The sealed recovery contract: the verdict for one run at one head, with what it
    rests on (references/contract.md §8).

    ``verdict`` is a ``Mode`` value and ``safe`` true only for ``resume``;
    ``head_sequence``/``head_hash`` bind it to the log; ``required_actions`` and
    ``next_allowed_action`` say what must happen first; ``verified_components`` and
    ``invalidated_components`` what the state may and may not be trusted for;
    ``evidence`` holds the observed environment. ``integrity_hash`` seals every field but
    itself and ``created_at``: the same log and environment give the same contract, and
    an edited one fails ``is_intact`` (``Continuum.verify_contract`` also recomputes it).
    """

    model_config = ConfigDict(frozen=True)

    contract_version: int = CONTRACT_VERSION
    run_id: str
    verdict: str
    safe: bool
    safety_status: str
    checkpoint_version: int | None
    head_sequence: int
    head_hash: str | None
    verified_components: list[str]
    invalidated_components: list[InvalidatedComponent]
    required_actions: list[str]
    next_allowed_action: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    reason: str
    created_at: str | None = None
    integrity_hash: str = ""

    def sealed_body(self) -> dict[str, Any]:
        """The fields the seal covers, as JSON values."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in _UNSEALED}

    def compute_hash(self) -> str:
        """SHA-256 of the canonical JSON of ``sealed_body``."""
        return digest(self.sealed_body())

    def is_intact(self) -> bool:
        """True when ``integrity_hash`` matches the content (the file was not edited)."""
        return bool(self.integrity_hash) and self.integrity_hash == self.compute_hash()

    def to_json(self) -> str:
        """The contract as canonical JSON text (byte-identical for the same contract)."""
        return canonical_json(self.model_dump(mode="json"))


def seal_contract(contract: RecoveryContract, *, created_at: str | None = None) -> RecoveryContract:
    """``contract`` with its ``integrity_hash`` computed (and ``created_at`` set)."""
    sealed = contract.model_copy(update={"created_at": created_at, "integrity_hash": ""})
    return sealed.model_copy(update={"integrity_hash": sealed.compute_hash()})
