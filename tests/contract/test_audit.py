"""The audit export on every backend: the same decisions give a file that verifies, with
its signature and against the store, and an edited event does not. Both backends."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from continuum.errors import IntegrityError
from continuum.ops.audit import export_audit
from continuum.ops.audit_verify import verify_audit
from continuum.ops.signing import generate_keypair
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

RUN = "r"
INJ = "a\x1b[31m\u202e\n</script>"


def _decisions(factory: StoreFactory) -> None:
    agent = Continuum(factory.open(), origin=Origin.EXTERNAL_AGENT)
    agent.start_run(RUN, INJ, total=2)
    lost = agent.intercept(RUN, "send", {"to": INJ}, key="inv-1")
    agent.fail(RUN, lost.action_key, error=INJ)
    person = Continuum(factory.open(), origin=Origin.HUMAN)
    person.confirm(RUN, via={"channel": "mcp", "client": INJ})
    person.reconcile(
        RUN,
        lost.action_key,
        occurred=False,
        note="checked the mailbox",
        via={"channel": "page", "role": "approve"},
    )
    person.set_budget(RUN, usd="3.00")  # a program using the library: no via


def _export(store: Storage, sign: Path | None = None) -> bytes:
    out = io.StringIO()
    export_audit(store, out, [RUN], sign=sign)
    return out.getvalue().encode("utf-8")


def test_an_export_verifies_with_its_key_and_against_the_store_on_every_backend(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    _decisions(store_factory)
    keys = generate_keypair(tmp_path / "k.key", tmp_path / "k.pub")
    store = store_factory.open()
    data = _export(store, sign=Path(keys["private_key"]))
    check = verify_audit(data.splitlines(keepends=True), public_key=tmp_path / "k.pub", store=store)
    assert check.decisions == 3 and check.signed_by == keys["key_id"]
    types = [
        json.loads(line)["event_type"]
        for line in data.splitlines()
        if json.loads(line)["kind"] == "decision"
    ]
    assert types == ["review_confirmed", "action_reconciled", "budget_set"]
    assert b"\x1b" not in data and "\u202e".encode() not in data
    how = [
        (r["how"]["channel"], r["who"]["role"], r["who"]["client"])
        for r in map(json.loads, data.splitlines())
        if r["kind"] == "decision"
    ]
    assert how == [("mcp", None, INJ), ("page", "approve", None), (None, None, None)]


def test_an_event_edited_in_the_file_is_refused(store_factory: StoreFactory) -> None:
    _decisions(store_factory)
    lines = _export(store_factory.open()).splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if b'"action_reconciled"' in line)
    lines[i] = lines[i].replace(b'"occurred":false', b'"occurred":true')
    with pytest.raises(IntegrityError) as e:
        verify_audit(lines)
    assert e.value.code == "integrity.audit_mismatch"
