"""The sealed recovery contract (contract §8): integrity_hash over every field but the hash
and the creation time; the same inputs give the same bytes."""

from __future__ import annotations

from typing import Any

import pytest

from continuum.eventlog.canonical import digest, parse_json
from continuum.recovery.contract import (
    CONTRACT_VERSION,
    InvalidatedComponent,
    RecoveryContract,
    seal_contract,
)


def body(**overrides: Any) -> RecoveryContract:
    fields: dict[str, Any] = {
        "run_id": "run_1",
        "verdict": "repair_and_resume",
        "safe": False,
        "safety_status": "needs_repair",
        "checkpoint_version": 4,
        "head_sequence": 9,
        "head_hash": "ab" * 32,
        "verified_components": ["goal", "progress"],
        "invalidated_components": [
            InvalidatedComponent(component="dependency:ds", status="conflicted", reason="changed")
        ],
        "required_actions": ["refresh_dependency:ds", "recompute_evidence:e1"],
        "next_allowed_action": "refresh_dependency:ds",
        "evidence": {"chain_ok": True, "environment": {"ds": "2"}, "note": "Zoë"},
        "reason": "derived state is stale",
    }
    fields.update(overrides)
    return RecoveryContract(**fields)


def test_an_unsealed_contract_is_not_intact() -> None:
    contract = body()
    assert contract.integrity_hash == ""
    assert not contract.is_intact()


def test_a_sealed_contract_is_intact() -> None:
    sealed = seal_contract(body())
    assert sealed.is_intact()
    assert len(sealed.integrity_hash) == 64
    assert sealed.contract_version == CONTRACT_VERSION


def test_the_seal_is_the_digest_of_every_field_but_the_hash_and_creation_time() -> None:
    sealed = seal_contract(body(), created_at="2025-01-01T00:00:00.000000Z")
    dumped = sealed.model_dump(mode="json")
    del dumped["integrity_hash"], dumped["created_at"]
    assert sealed.integrity_hash == digest(dumped)
    assert set(sealed.sealed_body()) == set(RecoveryContract.model_fields) - {
        "integrity_hash",
        "created_at",
    }


def test_created_at_is_excluded_from_the_hash() -> None:
    early = seal_contract(body(), created_at="2025-01-01T00:00:00.000000Z")
    late = seal_contract(body(), created_at="2030-06-01T12:00:00.000000Z")
    unstamped = seal_contract(body())
    assert early.integrity_hash == late.integrity_hash == unstamped.integrity_hash
    assert late.model_copy(update={"created_at": "2099-01-01T00:00:00.000000Z"}).is_intact()


@pytest.mark.parametrize(
    "field,value",
    [
        ("run_id", "run_2"),
        ("verdict", "resume"),
        ("safe", True),
        ("safety_status", "safe"),
        ("checkpoint_version", None),
        ("head_sequence", 10),
        ("head_hash", "cd" * 32),
        ("verified_components", ["goal"]),
        ("invalidated_components", []),
        ("required_actions", ["continue"]),
        ("next_allowed_action", "continue"),
        ("evidence", {"chain_ok": False}),
        ("reason", "edited"),
        ("contract_version", 2),
    ],
)
def test_editing_any_sealed_field_breaks_the_seal(field: str, value: Any) -> None:
    sealed = seal_contract(body())
    assert not sealed.model_copy(update={field: value}).is_intact()


def test_a_forged_hash_is_not_intact() -> None:
    sealed = seal_contract(body())
    assert not sealed.model_copy(update={"integrity_hash": "0" * 64}).is_intact()


def test_resealing_gives_the_same_hash() -> None:
    sealed = seal_contract(body())
    assert seal_contract(sealed).integrity_hash == sealed.integrity_hash


def test_identical_inputs_give_byte_identical_json() -> None:
    first = seal_contract(body()).to_json()
    second = seal_contract(body()).to_json()
    assert first == second
    assert first.encode("utf-8") == second.encode("utf-8")


def test_the_json_is_canonical_and_includes_the_hash_and_creation_time() -> None:
    sealed = seal_contract(body(), created_at="2025-01-01T00:00:00.000000Z")
    text = sealed.to_json()
    assert '": ' not in text and ', "' not in text
    assert "Zoë" in text
    parsed = parse_json(text)
    assert list(parsed) == sorted(parsed)
    assert parsed["integrity_hash"] == sealed.integrity_hash
    assert parsed["created_at"] == "2025-01-01T00:00:00.000000Z"


def test_a_contract_read_back_from_its_json_is_still_intact() -> None:
    sealed = seal_contract(body(), created_at="2025-01-01T00:00:00.000000Z")
    back = RecoveryContract.model_validate_json(sealed.to_json())
    assert back == sealed
    assert back.is_intact()
    edited = RecoveryContract.model_validate_json(
        sealed.to_json().replace("refresh_dependency:ds", "continue")
    )
    assert not edited.is_intact()
