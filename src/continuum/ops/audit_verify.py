"""Verifying an audit file offline (``continuum verify-audit``): every event's hash and
link, every derived field derived again, the trailer's digest and counts, and with a
public key the signatures; with a store, that the heads and decisions are in it. The
format is ``ops/audit.py``'s."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import event_hash
from continuum.ops.audit import (
    AUDIT_DOMAIN,
    AUDIT_PREFIX,
    FORMAT,
    FORMAT_VERSION,
    GATEWAY_ACCEPTED,
    Derivation,
    GatewayHistory,
    _link,
    _signed_claims,
    decision_record,
    gateway_record,
    is_decision,
    parse_since,
)
from continuum.ops.bounded import Unbounded, parse_json_bounded
from continuum.store import Storage

# -- verification ----------------------------------------------------------------------------


@dataclass
class AuditCheck:
    """What ``verify_audit`` established."""

    runs: dict[str, dict[str, Any]]
    decisions: int
    links: int
    store_decisions: int
    signed_by: str | None = None
    anchors_checked: bool = False
    store_checked: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "decisions": self.decisions,
            "links": self.links,
            "store_decisions": self.store_decisions,
            "signed_by": self.signed_by,
            "anchors_checked": self.anchors_checked,
            "store_checked": self.store_checked,
        }


def _damaged(why: str, **fields: Any) -> IntegrityError:
    return IntegrityError(
        f"the audit file does not verify: {why}",
        code="integrity.audit_mismatch",
        hint="get the file again from whoever exported it; do not rely on this one",
        **fields,
    )


def _parse(raw: bytes, number: int) -> dict[str, Any]:
    try:
        value = parse_json_bounded(raw.decode("utf-8"), line=number)
    except (ValueError, UnicodeDecodeError, Unbounded) as e:
        raise _damaged(f"line {number} is not JSON", line=number) from e
    if not isinstance(value, dict):
        raise _damaged(f"line {number} is not a JSON object", line=number)
    return value


def _event(value: Any, number: int) -> Event:
    try:
        return Event.model_validate(value)
    except ValueError as e:
        raise _damaged(f"line {number} holds no well-formed event", line=number) from e


def verify_audit(
    lines: Iterable[bytes],
    *,
    public_key: Path | None = None,
    store: Storage | None = None,
    gateway: GatewayHistory | None = None,
) -> AuditCheck:
    """Check an audit file: every event's hash, every link, each run's chain up to the
    head the trailer names, every derived field (a gateway acceptance's too, from its
    pins-file entry), the lines' digest; with ``public_key`` the signature over the
    digest and heads and each run's signed anchor; with ``store`` that each run's head
    (and every decision) is in that store's chain; with ``gateway`` that each gateway
    acceptance is in that pins file's history. Anything else is ``IntegrityError``
    ``integrity.audit_mismatch`` (or the signature's own code)."""
    from continuum.ops.signing import check_signed_anchor, open_signed

    rows = [line for line in lines]
    if not rows or not rows[-1].endswith(b"\n"):
        raise _damaged("it does not end with a complete trailer line")
    header = _parse(rows[0], 1)
    if header.get("kind") != "header" or header.get("format") != FORMAT:
        raise UsageError(
            "the file is not an audit export (no continuum-audit header)",
            code="usage.bad_audit",
            hint="pass a file written by `continuum audit`",
        )
    if header.get("version") != FORMAT_VERSION:
        raise UsageError(
            f"audit format version {header.get('version')!r} is not known here",
            code="usage.bad_audit",
            hint="verify it with the continuum version that wrote it",
        )
    trailer = _parse(rows[-1], len(rows))
    if trailer.get("kind") != "trailer" or len(rows) < 2:
        raise _damaged("its last line is not the trailer (cut short?)")
    body = hashlib.sha256()
    for raw in rows[:-1]:
        body.update(raw)
    if body.hexdigest() != trailer.get("digest"):
        raise _damaged("its lines are not the ones the trailer's digest covers")
    since = parse_since(header["since"]) if isinstance(header.get("since"), str) else None
    named = trailer.get("runs")
    if not isinstance(named, dict) or sorted(named) != sorted(header.get("runs") or []):
        raise _damaged("the trailer and the header name other runs")
    chains: dict[str, list[tuple[int, dict[str, Any], Event]]] = {r: [] for r in named}
    store_count = 0
    for number, raw in enumerate(rows[1:-1], start=2):
        record = _parse(raw, number)
        kind = record.get("kind")
        if kind == "store_decision":
            store_count += 1
            if record.get("event_type") == GATEWAY_ACCEPTED:
                _check_gateway(record, number, gateway)
            continue
        if kind not in ("decision", "link"):
            raise _damaged(f"line {number} is of an unknown kind", line=number)
        e = _event(record.get("event"), number)
        if e.run_id not in chains or record.get("run_id") != e.run_id:
            raise _damaged(f"line {number} is of a run the trailer does not name", line=number)
        chains[e.run_id].append((number, record, e))
    decisions = links = 0
    for run_id, chain in chains.items():
        entry = named[run_id]
        if not isinstance(entry, dict):
            raise _damaged(f"the trailer's entry for run {run_id!r} is malformed")
        d, prev = Derivation(), None
        for number, record, e in chain:
            if event_hash(e) != e.hash:
                raise _damaged(
                    f"line {number}: event {e.sequence} of run {run_id!r} does not hash to "
                    "its recorded hash (edited)",
                    line=number,
                    run_id=run_id,
                    sequence=e.sequence,
                )
            if prev is not None and (e.sequence != prev.sequence + 1 or e.prev_hash != prev.hash):
                raise _damaged(
                    f"line {number}: event {e.sequence} of run {run_id!r} does not follow "
                    f"event {prev.sequence} (a line was removed, added or moved)",
                    line=number,
                    run_id=run_id,
                    sequence=e.sequence,
                )
            wanted = is_decision(e, since)
            if wanted:
                expected = decision_record(e, d.derive(e))
                decisions += 1
            else:
                expected = _link(e)
                links += 1
            if record != expected:
                raise _damaged(
                    f"line {number}: the record of event {e.sequence} of run {run_id!r} is not "
                    "what its event says"
                    + (
                        " (a decision shown as a link)"
                        if wanted != (record["kind"] == "decision")
                        else ""
                    ),
                    line=number,
                    run_id=run_id,
                    sequence=e.sequence,
                )
            d.observe(e)
            prev = e
        first = chain[0][2].sequence if chain else None
        if entry.get("decisions") != sum(1 for _, r, _ in chain if r.get("kind") == "decision"):
            raise _damaged(f"the trailer's count of run {run_id!r}'s decisions is not the file's")
        head_seq, head_hash = entry.get("head_sequence"), entry.get("head_hash")
        if first != entry.get("chain_from") or (
            prev is not None and (prev.sequence, prev.hash) != (head_seq, head_hash)
        ):
            raise _damaged(
                f"run {run_id!r}'s chain does not run from sequence {entry.get('chain_from')} "
                f"to the head the trailer names ({head_seq})",
                run_id=run_id,
            )
        if entry.get("anchor") != (f"{head_seq}:{head_hash}" if head_seq else None):
            raise _damaged(f"run {run_id!r}'s anchor is not its head", run_id=run_id)
        if public_key is not None and head_seq:
            seq, hash_ = check_signed_anchor(str(entry.get("signed_anchor")), public_key, run_id)
            if (seq, hash_) != (head_seq, head_hash):
                raise _damaged(f"run {run_id!r}'s signed anchor names another head", run_id=run_id)
        if store is not None:
            _against_store(store, run_id, head_seq, head_hash, chain)
    counts = [trailer.get("decisions"), trailer.get("links"), trailer.get("store_decisions")]
    if counts != [decisions, links, store_count]:
        raise _damaged("the trailer's counts are not the file's")
    signed_by = None
    if public_key is not None:
        claims = open_signed(
            trailer.get("signature"),
            AUDIT_PREFIX,
            AUDIT_DOMAIN,
            public_key,
            what="the audit file",
            code="integrity.audit_signature",
            hint="get the file signed by the holder of that key (`continuum audit ... --sign "
            "KEY`), or check that you passed their public key",
        )
        mine = _signed_claims(trailer)
        if {k: claims.get(k) for k in mine} != mine:
            raise IntegrityError(
                "the audit file's signature is for other content, runs or heads than this file's",
                code="integrity.audit_signature",
                hint="get the file again from whoever signed it",
            )
        signed_by = str(claims.get("key_id"))
    return AuditCheck(
        runs={r: {k: v for k, v in e.items() if k != "signed_anchor"} for r, e in named.items()},
        decisions=decisions,
        links=links,
        store_decisions=store_count,
        signed_by=signed_by,
        anchors_checked=public_key is not None,
        store_checked=store is not None,
    )


def _check_gateway(record: dict[str, Any], number: int, gateway: GatewayHistory | None) -> None:
    entry, path = record.get("entry"), record.get("pins_file")
    if not isinstance(entry, dict) or record != gateway_record(entry, str(path)):
        raise _damaged(
            f"line {number}: the gateway acceptance is not what its pins-file entry says",
            line=number,
        )
    if gateway is not None and entry not in [dict(e) for e in gateway.entries]:
        raise _damaged(
            f"line {number}: the gateway acceptance is not in the pins file's history",
            line=number,
        )


def _against_store(
    store: Storage,
    run_id: str,
    head_seq: Any,
    head_hash: Any,
    chain: list[tuple[int, dict[str, Any], Event]],
) -> None:
    if (
        isinstance(head_seq, int)
        and head_seq
        and store.event_hash_at(run_id, head_seq) != head_hash
    ):
        raise _damaged(
            f"run {run_id!r}'s head {head_seq} is not in this store's chain", run_id=run_id
        )
    for number, record, e in chain:
        if record.get("kind") == "decision" and store.event_hash_at(run_id, e.sequence) != e.hash:
            raise _damaged(
                f"line {number}: decision {e.sequence} of run {run_id!r} is not this store's",
                line=number,
                run_id=run_id,
            )
