"""Signed anchors (issue 17): an auditor with the public key alone catches a rewound log, a
forked log, and an anchor re-signed with another key, each by its kind. Both backends.

The rewound and forked logs are made the way they happen: the store is put back to an
earlier state (its later events and head gone, as a restore of an older copy leaves it),
and for the fork new events are then appended over the old sequence numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.chain import DamageKind
from continuum.eventlog.events import EventType
from continuum.ops.signing import generate_keypair
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from tests.contract.conftest import StoreFactory

RUN = "run_audited"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    generate_keypair(tmp_path / "auditor.key", tmp_path / "auditor.key.pub")
    generate_keypair(tmp_path / "attacker.key", tmp_path / "attacker.key.pub")
    return {
        "key": tmp_path / "auditor.key",
        "pub": tmp_path / "auditor.key.pub",
        "other": tmp_path / "attacker.key",
        "other_pub": tmp_path / "attacker.key.pub",
    }


@pytest.fixture
def rt(store: Storage) -> Continuum:
    rt = Continuum(store)
    rt.start_run(RUN, "audited work")
    for i in range(8):
        rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": f"w{i}"})
    return rt


def rewind(factory: StoreFactory, to: int) -> None:
    """Put the run back to sequence ``to`` (its later events gone, its head moved back)."""
    factory.corrupt("DELETE FROM events WHERE run_id = ? AND sequence > ?", (RUN, to))
    store = factory.open()
    hash_ = store.event_hash_at(RUN, to)
    factory.corrupt(
        "UPDATE runs SET head_sequence = ?, head_hash = ? WHERE run_id = ?", (to, hash_, RUN)
    )


def test_keygen_makes_a_private_key_only_its_owner_reads(keys: dict[str, Path]) -> None:
    assert keys["key"].stat().st_mode & 0o777 == 0o600
    assert keys["pub"].stat().st_mode & 0o777 == 0o644
    assert b"PRIVATE KEY" in keys["key"].read_bytes()
    with pytest.raises(UsageError) as e:
        generate_keypair(keys["key"], keys["key"].with_name("new.pub"))
    assert e.value.code == "usage.file_exists"


def test_a_signed_anchor_verifies_on_the_unchanged_log_and_as_it_grows(
    rt: Continuum, keys: dict[str, Path]
) -> None:
    signed = rt.anchor(RUN, sign=keys["key"])
    assert signed["sequence"] == 9 and signed["signed_anchor"].startswith("continuum-anchor-1.")

    assert rt.verify(RUN, expect_head=signed["signed_anchor"], public_key=keys["pub"]).ok
    rt.append(RUN, EventType.WORK_COMPLETED, {"item_id": "later"})
    assert rt.verify(RUN, expect_head=signed["signed_anchor"], public_key=keys["pub"]).ok


def test_a_rewound_log_is_refused_as_truncated(
    store_factory: StoreFactory, rt: Continuum, keys: dict[str, Path]
) -> None:
    token = rt.anchor(RUN, sign=keys["key"])["signed_anchor"]

    rewind(store_factory, 6)

    auditor = Continuum(store_factory.open())
    assert auditor.verify(RUN).ok  # on its own the rewound log looks fine
    report = auditor.verify(RUN, expect_head=token, public_key=keys["pub"])
    assert [v.kind for v in report.violations] == [DamageKind.TRUNCATED]


def test_a_forked_log_is_refused_as_an_anchor_mismatch(
    store_factory: StoreFactory, rt: Continuum, keys: dict[str, Path]
) -> None:
    token = rt.anchor(RUN, sign=keys["key"])["signed_anchor"]

    rewind(store_factory, 6)
    forked = Continuum(store_factory.open())
    for i in range(5):  # another history over the same sequence numbers
        forked.append(RUN, EventType.WORK_FAILED, {"item_id": f"other{i}"})

    assert forked.verify(RUN).ok
    report = forked.verify(RUN, expect_head=token, public_key=keys["pub"])
    assert [v.kind for v in report.violations] == [DamageKind.ANCHOR_MISMATCH]


def test_an_anchor_re_signed_with_another_key_is_refused(
    store_factory: StoreFactory, rt: Continuum, keys: dict[str, Path]
) -> None:
    rewind(store_factory, 6)
    forked = Continuum(store_factory.open())
    forked.append(RUN, EventType.WORK_FAILED, {"item_id": "rewritten"})
    # whoever rewrote the log issues a fresh anchor of it, signed with their own key
    forged = forked.anchor(RUN, sign=keys["other"])["signed_anchor"]
    assert forked.verify(RUN, expect_head=forged, public_key=keys["other_pub"]).ok

    with pytest.raises(IntegrityError) as e:
        forked.verify(RUN, expect_head=forged, public_key=keys["pub"])
    assert e.value.code == "integrity.anchor_signature"
    assert e.value.exit_code == 3


def test_an_edited_signed_anchor_is_refused(rt: Continuum, keys: dict[str, Path]) -> None:
    import base64
    import json

    token = rt.anchor(RUN, sign=keys["key"])["signed_anchor"]
    prefix, claims, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    body["sequence"] = 3  # point it at an earlier, still matching event
    body["hash"] = rt.store.event_hash_at(RUN, 3)
    edited = base64.urlsafe_b64encode(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).rstrip(b"=")
    with pytest.raises(IntegrityError) as e:
        rt.verify(
            RUN, expect_head=f"{prefix}.{edited.decode()}.{signature}", public_key=keys["pub"]
        )
    assert e.value.code == "integrity.anchor_signature"


def test_signed_anchor_usage_errors(rt: Continuum, keys: dict[str, Path]) -> None:
    token = rt.anchor(RUN, sign=keys["key"])["signed_anchor"]
    plain = rt.anchor(RUN)["anchor"]
    rt.start_run("other_run", "x")
    rt.append("other_run", EventType.WORK_COMPLETED, {})
    cases = [
        (dict(expect_head=token), "usage.public_key_needed"),
        (dict(expect_head=plain, public_key=keys["pub"]), "usage.invalid"),
        (dict(public_key=keys["pub"]), "usage.invalid"),
        (dict(expect_head="continuum-anchor-1.abc", public_key=keys["pub"]), "usage.bad_anchor"),
        (dict(expect_head=token, public_key=keys["key"]), "usage.bad_key"),
    ]
    for kwargs, code in cases:
        with pytest.raises(UsageError) as e:
            rt.verify(RUN, **kwargs)
        assert e.value.code == code, kwargs
    with pytest.raises(UsageError) as e:
        rt.verify("other_run", expect_head=token, public_key=keys["pub"])
    assert e.value.code == "usage.anchor_other_run"
    os.chmod(keys["key"], 0o644)
    with pytest.raises(UsageError) as e:
        rt.anchor(RUN, sign=keys["key"])
    assert e.value.code == "usage.key_too_open"
