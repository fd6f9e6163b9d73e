"""The sealed recovery contract (pure).

``integrity_hash`` is SHA-256 of the canonical JSON of every field but the hash and the
creation time, so the same log and the same environment give a byte-identical
contract body, and any edit to a contract file is detected.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from continuum.canonical import canonical_json, digest

CONTRACT_VERSION = 1
_UNSEALED = ("integrity_hash", "created_at")


class InvalidatedComponent(BaseModel):
    model_config = ConfigDict(frozen=True)

    component: str
    status: str
    reason: str


class RecoveryContract(BaseModel):
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
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in _UNSEALED}

    def compute_hash(self) -> str:
        return digest(self.sealed_body())

    def is_intact(self) -> bool:
        return bool(self.integrity_hash) and self.integrity_hash == self.compute_hash()

    def to_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))


def seal_contract(contract: RecoveryContract, *, created_at: str | None = None) -> RecoveryContract:
    sealed = contract.model_copy(update={"created_at": created_at, "integrity_hash": ""})
    return sealed.model_copy(update={"integrity_hash": sealed.compute_hash()})
