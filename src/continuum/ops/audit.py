"""Audit export: one JSON line per human decision, checkable offline against a signed anchor.

A human decision is an event recorded with origin ``human`` (``continuum confirm``,
``reconcile``, ``decide``, ``resolve-branch``, ``budget``, ``hooks accept``, the operator
page, ``continuum_confirm`` with the confirm token). The file (``continuum audit``)::

    {"kind":"header","format":"continuum-audit","version":1,"since":...,"runs":[...]}
    {"kind":"decision","run_id":...,"sequence":N,...,"event":{...}}   per run, in order,
    {"kind":"link","run_id":...,"sequence":N,"event":{...}}           every event from the
                                                                      first one a decision
                                                                      refers to up to the head
    {"kind":"store_decision",...}    store-wide, not in any chain (confirm-token unlock,
                                     each `gateway accept` in the gateway's pins file)
    {"kind":"trailer","runs":{RUN:{head...,"signed_anchor"?}},"digest":D,"signature"?:S}

Each chained line carries the event exactly as sealed, so an auditor recomputes its hash
(SHA-256 of the canonical JSON of every field but ``hash``) and follows ``prev_hash``
from the decision to the head the trailer names; ``--sign KEY`` signs that head as a
``continuum anchor`` does (``signing.sign_anchor``, so ``continuum verify RUN
--expect-head TOKEN --public-key PUB`` checks it against the live store too) and signs
the digest of every line before the trailer (``AUDIT_PREFIX``), so a line dropped before
the first decision is caught as well. The ``decision``/``who``/``how``/``shown`` fields
are derived from the chained events alone (``Derivation``): ``verify_audit`` derives them
again and requires the same, so an edited field fails like an edited event.

Lines are JSON with every control, bidi and invisible character, and ``<``, ``>`` and
``&``, as ``\\uXXXX`` escapes (the same value): agent text cannot start a line, repaint a
terminal or close a script tag.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from continuum.errors import UsageError
from continuum.eventlog.canonical import digest
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.store import Storage, redact_url
from continuum.store.base import format_timestamp
from continuum.types import Origin
from continuum.untrusted import json_safe

FORMAT = "continuum-audit"
FORMAT_VERSION = 1
AUDIT_PREFIX, AUDIT_DOMAIN = "continuum-audit-1", b"continuum signed audit 1\n"

# Where each decision can come from (from the code that writes it). The event records
# origin human; the CLI, the operator page and continuum_confirm also record how, under
# payload["via"] (eventlog.payloads.via_of); a program using the library may not.
CHANNELS: dict[str, list[str]] = {
    EventType.REVIEW_CONFIRMED: [
        "terminal prompt (continuum confirm)",
        "person's script (continuum confirm --yes)",
        "operator page (continuum ui)",
        "MCP continuum_confirm with the confirm token",
    ],
    EventType.APPROVAL_GRANTED: [
        "terminal prompt (continuum decide)",
        "person's script (continuum decide --yes)",
        "operator page (continuum ui)",
    ],
    EventType.ACTION_RECONCILED: [
        "terminal prompt (continuum reconcile)",
        "person's script (continuum reconcile --yes)",
        "operator page (continuum ui)",
    ],
    EventType.BRANCH_RESOLVED: [
        "terminal prompt (continuum resolve-branch)",
        "person's script (continuum resolve-branch --yes)",
    ],
    EventType.BUDGET_SET: [
        "terminal prompt (continuum budget)",
        "person's script (continuum budget --yes)",
    ],
    EventType.REGISTRY_ACCEPTED: [
        "terminal prompt (continuum hooks accept)",
        "person's script (continuum hooks accept --yes)",
    ],
}
CHANNELS[EventType.APPROVAL_DENIED] = CHANNELS[EventType.APPROVAL_GRANTED]
LIBRARY = "a program using the library with Continuum(origin=Origin.HUMAN)"


def audit_line(record: dict[str, Any]) -> str:
    """One record as one line: compact JSON, sorted keys, every unsafe character escaped."""
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    safe = json_safe(text)  # C0 are escaped by json.dumps; this does DEL, C1, bidi, ...
    # Outside strings JSON text has none of these, so replacing them everywhere is exact.
    return safe.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n"


def parse_since(text: str | None) -> datetime | None:
    """``--since``: an ISO date or date-time (UTC unless it says otherwise)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise UsageError(
            f"--since {text[:60]!r} is not an ISO date or date-time",
            code="usage.bad_since",
            hint="e.g. --since 2026-03-01 or --since 2026-03-01T09:00:00Z",
        ) from e
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _at(timestamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def event_json(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json")


# -- deriving a decision from the chain ------------------------------------------------------


@dataclass
class _Seen:
    sequence: int
    hash: str
    payload: dict[str, Any]


@dataclass
class Derivation:
    """Folds a run's events in order and says, for each human event, what was decided, by
    whom, how, and what was shown, citing only events it was given (so the exporter and
    the verifier, given the same chain, derive the same)."""

    hashes: bool = True  # keep each event's hash (a confirmation cites one); off in the scan
    events: dict[int, str] = field(default_factory=dict)  # sequence -> hash
    requests: dict[str, _Seen] = field(default_factory=dict)  # approval id -> requested
    intercepts: dict[str, _Seen] = field(default_factory=dict)  # action id -> intercepted
    last_action: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (seq, type)
    budget: _Seen | None = None
    observed: dict[str, _Seen] = field(default_factory=dict)  # observation id -> latest

    def context(self, e: Event) -> list[int]:
        """The earlier events this decision's record cites (their sequences)."""
        p, out = e.payload, []
        if e.type == EventType.REVIEW_CONFIRMED and isinstance(p.get("through_sequence"), int):
            out.append(p["through_sequence"])
        elif e.type in _APPROVAL_DECISIONS and (r := self.requests.get(_s(p.get("approval_id")))):
            out.append(r.sequence)
        elif e.type == EventType.ACTION_RECONCILED:
            if i := self.intercepts.get(_s(p.get("action_id"))):
                out.append(i.sequence)
        elif e.type == EventType.BUDGET_SET and self.budget is not None:
            out.append(self.budget.sequence)
        elif e.type == EventType.BRANCH_RESOLVED:
            for o in p.get("observations") or []:
                if isinstance(o, str) and (seen := self.observed.get(o)):
                    out.append(seen.sequence)
        return [s for s in out if 0 < s <= e.sequence]

    def derive(self, e: Event) -> dict[str, Any]:
        """``decision``, ``who``, ``how`` and ``shown`` of a human event (before ``observe``)."""
        p = e.payload
        raw_via = p.get("via")
        via: dict[str, Any] = raw_via if isinstance(raw_via, dict) else {}
        who = {
            "origin": str(e.source),
            "role": via.get("role"),
            "client": via.get("client"),
            "token": via.get("token"),
        }
        how = {
            "channel": via.get("channel"),
            "recorded": bool(via.get("channel")),
            "possible": [*CHANNELS.get(str(e.type), []), LIBRARY],
        }
        decision, shown = self._what(e)
        return {"decision": decision, "who": who, "how": how, "shown": shown}

    def _what(self, e: Event) -> tuple[dict[str, Any], dict[str, Any]]:
        p, t = e.payload, e.type
        if t == EventType.REVIEW_CONFIRMED:
            through = p.get("through_sequence")
            in_chain = self.events.get(through) if isinstance(through, int) else None
            return (
                {"confirmed": p.get("scope"), "through_sequence": through},
                {
                    "through_sequence": through,
                    "through_hash": p.get("through_hash"),
                    "through_hash_matches_chain": None
                    if in_chain is None
                    else in_chain == p.get("through_hash"),
                    "values": p.get("confirmed"),
                },
            )
        if t in _APPROVAL_DECISIONS:
            verb = {"approval_granted": "allow", "approval_denied": "deny"}.get(str(t), "revoke")
            decision = {
                "approval_id": p.get("approval_id"),
                "decided": verb,
                "scope": p.get("scope"),
                "reason": p.get("reason"),
            }
            r = self.requests.get(_s(p.get("approval_id")))
            if r is None:
                return decision, {"request": None}
            q = r.payload
            return decision, {
                "request": {"sequence": r.sequence, "event_hash": r.hash},
                "action_type": q.get("action_type"),
                "key": q.get("key"),
                "arguments": q.get("arguments"),
                "arguments_hash": q.get("arguments_hash"),
                "binding": q.get("binding"),
            }
        if t == EventType.ACTION_RECONCILED:
            aid = _s(p.get("action_id"))
            decision = {
                "action_id": aid,
                "occurred": p.get("occurred"),
                "external_id": p.get("external_id"),
                "note": p.get("note"),
            }
            i = self.intercepts.get(aid)
            if i is None:
                return decision, {"intercepted": None}
            last = self.last_action.get(aid)
            q = i.payload
            return decision, {
                "intercepted": {"sequence": i.sequence, "event_hash": i.hash},
                "action_key": q.get("action_key"),
                "action_type": q.get("action_type"),
                "arguments_digest": digest(q.get("arguments")),
                "state_before": None if last is None else {"sequence": last[0], "event": last[1]},
            }
        if t == EventType.BUDGET_SET:
            before = self.budget
            return (
                {k: p.get(k) for k in ("usd_micros", "tokens", "reason")},
                {
                    "limits_before": None
                    if before is None
                    else {
                        "sequence": before.sequence,
                        "usd_micros": before.payload.get("usd_micros"),
                        "tokens": before.payload.get("tokens"),
                    }
                },
            )
        if t == EventType.BRANCH_RESOLVED:
            readings = []
            for o in p.get("observations") or []:
                seen = self.observed.get(o) if isinstance(o, str) else None
                readings.append(
                    {"observation_id": o, "sequence": None}
                    if seen is None
                    else {
                        "observation_id": o,
                        "sequence": seen.sequence,
                        "event_hash": seen.hash,
                        "signal": seen.payload.get("signal"),
                        "value": seen.payload.get("value"),
                        "status": seen.payload.get("status"),
                    }
                )
            return (
                {k: p.get(k) for k in ("branch_id", "choice", "reason", "risk", "verdict")},
                {"observations": readings},
            )
        if t == EventType.REGISTRY_ACCEPTED:
            return {"accepted": "hooks effect registry"}, {
                k: p.get(k) for k in ("path", "registry_sha256", "rules")
            }
        return dict(p), {}

    def observe(self, e: Event) -> None:
        p, seen = e.payload, _Seen(e.sequence, e.hash, e.payload)
        if self.hashes:
            self.events[e.sequence] = e.hash
        if e.type == EventType.APPROVAL_REQUESTED and isinstance(p.get("approval_id"), str):
            self.requests[p["approval_id"]] = seen
        elif e.type == EventType.BUDGET_SET:
            self.budget = seen
        elif e.type == EventType.PERCEPTION_OBSERVED and isinstance(p.get("observation_id"), str):
            self.observed[p["observation_id"]] = seen
        if str(e.type).startswith("action_") and isinstance(p.get("action_id"), str):
            if e.type == EventType.ACTION_INTERCEPTED:
                self.intercepts[p["action_id"]] = seen
            self.last_action[p["action_id"]] = (e.sequence, str(e.type))


_APPROVAL_DECISIONS = (
    EventType.APPROVAL_GRANTED,
    EventType.APPROVAL_DENIED,
    EventType.APPROVAL_REVOKED,
)


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def is_decision(e: Event, since: datetime | None) -> bool:
    if e.source != Origin.HUMAN:
        return False
    if since is None:
        return True
    at = _at(e.timestamp)
    return at is not None and at >= since


def decision_record(e: Event, derived: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "decision",
        "run_id": e.run_id,
        "sequence": e.sequence,
        "event_id": e.event_id,
        "event_hash": e.hash,
        "prev_hash": e.prev_hash,
        "timestamp": e.timestamp,
        "event_type": str(e.type),
        **derived,
        "event": event_json(e),
    }


# -- export ----------------------------------------------------------------------------------


@dataclass
class AuditSummary:
    runs: dict[str, dict[str, Any]]
    decisions: int
    links: int
    store_decisions: int
    signed_by: str | None


def _chain_start(store: Storage, run_id: str, head: int, since: datetime | None) -> int | None:
    """The first sequence the export's chain for ``run_id`` needs (None: no decision)."""
    d, start = Derivation(hashes=False), None
    for e in _upto(store.iter_events(run_id, after=_live_from(store, run_id)), head):
        if is_decision(e, since):
            first = min([e.sequence, *d.context(e)])
            start = first if start is None else min(start, first)
        d.observe(e)
    return start


def _live_from(store: Storage, run_id: str) -> int:
    """The last archived sequence (0: none): archived decisions are in the archive files,
    not in the store, so the export starts after them and says so (``archived_through``)."""
    base = store.archive_base(run_id)
    return 0 if base is None else base.through


def _upto(events: Iterable[Event], head: int) -> Iterator[Event]:
    for e in events:
        if e.sequence > head:
            return
        yield e


def export_audit(
    store: Storage,
    out: TextIO,
    run_ids: list[str] | None,
    *,
    since: datetime | None = None,
    sign: Path | None = None,
    gateway: GatewayHistory | None = None,
) -> AuditSummary:
    """Write the audit file of ``run_ids`` (None: every run, and the store-wide records,
    with ``gateway``'s acceptances) to ``out``. Events are read through the store's
    verifying reader: damage raises."""
    from continuum.ops.signing import claimed_signer, load_private_key, sign_anchor, sign_claims

    if sign is not None:
        load_private_key(sign)  # a bad key is refused before anything is written
    runs = [store.get_run(r) for r in run_ids] if run_ids is not None else store.list_runs()
    runs = list({r.run_id: r for r in runs}.values())
    lines = hashlib.sha256()

    def put(record: dict[str, Any]) -> None:
        text = audit_line(record)
        out.write(text)
        lines.update(text.encode("utf-8"))

    put(
        {
            "kind": "header",
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "generated_at": format_timestamp(datetime.now(UTC)),
            "source": redact_url(store.url),
            "runs": [r.run_id for r in runs],
            "since": None if since is None else since.isoformat(),
            "store_records": run_ids is None,
            "verify": "continuum verify-audit FILE --public-key PUBFILE",
        }
    )
    trailer_runs: dict[str, dict[str, Any]] = {}
    decisions = links = 0
    for run in runs:
        head, head_hash = run.head_sequence, run.head_hash
        start = _chain_start(store, run.run_id, head, since) if head else None
        count, first = 0, None
        if start is not None:
            d = Derivation()
            after = max(start - 1, _live_from(store, run.run_id))
            for e in _upto(store.iter_events(run.run_id, after=after), head):
                first = e.sequence if first is None else first
                if is_decision(e, since):
                    put(decision_record(e, d.derive(e)))
                    count += 1
                else:
                    put(_link(e))
                    links += 1
                d.observe(e)
        decisions += count
        entry: dict[str, Any] = {
            "head_sequence": head,
            "head_hash": head_hash,
            "chain_from": first,
            "decisions": count,
            "archived_through": _live_from(store, run.run_id),
            "anchor": f"{head}:{head_hash}" if head else None,
        }
        if sign is not None and head and head_hash is not None:
            entry["signed_anchor"] = sign_anchor(run.run_id, head, head_hash, sign)["signed_anchor"]
        trailer_runs[run.run_id] = entry
    store_count = 0
    if run_ids is None:
        for record in store_records(store, since) + gateway_records(gateway, since):
            put(record)
            store_count += 1
    trailer: dict[str, Any] = {
        "kind": "trailer",
        "format": FORMAT,
        "runs": trailer_runs,
        "decisions": decisions,
        "links": links,
        "store_decisions": store_count,
        "digest": lines.hexdigest(),
    }
    signed_by = None
    if sign is not None:
        trailer["signature"] = sign_claims(
            AUDIT_PREFIX, AUDIT_DOMAIN, _signed_claims(trailer), sign
        )
        signed_by = claimed_signer(trailer["signature"], AUDIT_PREFIX)
    out.write(audit_line(trailer))
    return AuditSummary(trailer_runs, decisions, links, store_count, signed_by)


def _link(e: Event) -> dict[str, Any]:
    return {"kind": "link", "run_id": e.run_id, "sequence": e.sequence, "event": event_json(e)}


def _signed_claims(trailer: dict[str, Any]) -> dict[str, Any]:
    raw = trailer.get("runs")
    runs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "digest": trailer.get("digest"),
        "heads": {
            r: f"{v.get('head_sequence')}:{v.get('head_hash')}"
            for r, v in sorted(runs.items())
            if isinstance(v, dict)
        },
        "counts": [trailer.get("decisions"), trailer.get("links"), trailer.get("store_decisions")],
    }


def store_records(store: Storage, since: datetime | None) -> list[dict[str, Any]]:
    """Store-wide decisions that no run's chain holds: the last confirm-token unlock (the
    counter keeps only the last one)."""
    state = store.confirm_attempts()
    at = state.unlocked_at
    if at is None or (since is not None and ((when := _at(at)) is None or when < since)):
        return []
    return [
        {
            "kind": "store_decision",
            "event_type": "confirm_token_unlocked",
            "timestamp": at,
            "decision": {"unlocked": True, "wrong_tokens_ever": state.total},
            "who": {"origin": str(Origin.HUMAN), "role": None, "client": None, "token": None},
            "how": {
                "channel": None,
                "recorded": False,
                "possible": [
                    "terminal prompt (continuum confirm-token unlock)",
                    "person's script (continuum confirm-token unlock --yes)",
                ],
            },
            "shown": {
                "last_wrong_token_at": state.last_failure_at,
                "last_channel": state.last_channel,
                "last_caller": state.last_caller,
                "last_run_id": state.last_run_id,
            },
            "chained": False,
        }
    ]


@dataclass(frozen=True)
class GatewayHistory:
    """A gateway pins file's acceptance history (``gateway.pins.Pins.history``): the
    audit names the file, and each entry becomes a store-wide record."""

    path: str
    entries: Sequence[Mapping[str, Any]]


GATEWAY_ACCEPTED = "gateway_tool_accepted"


def gateway_record(entry: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The record of one ``continuum gateway accept`` of one tool, derived from its entry
    in the pins file's history alone (``verify_audit`` derives it again)."""
    raw_via = entry.get("via")
    via: Mapping[str, Any] = raw_via if isinstance(raw_via, dict) else {}
    return {
        "kind": "store_decision",
        "event_type": GATEWAY_ACCEPTED,
        "timestamp": entry.get("accepted_at"),
        "decision": {
            "accepted": "changed tool definition",
            "server": entry.get("server"),
            "tool": entry.get("tool"),
            "sha256": entry.get("new_sha256"),
        },
        "who": {"origin": entry.get("by"), "role": None, "client": None, "token": None},
        "how": {
            "channel": via.get("channel"),
            "recorded": bool(via.get("channel")),
            "possible": [
                "terminal prompt (continuum gateway accept)",
                "person's script (continuum gateway accept --yes)",
            ],
        },
        "shown": {"old_sha256": entry.get("old_sha256"), "new_sha256": entry.get("new_sha256")},
        "pins_file": path,
        "entry": dict(entry),
        "chained": False,
    }


def gateway_records(history: GatewayHistory | None, since: datetime | None) -> list[dict[str, Any]]:
    """The gateway's acceptances, oldest first (at or after ``since``)."""
    if history is None:
        return []
    out = []
    for entry in history.entries:
        at = entry.get("accepted_at")
        when = _at(at) if isinstance(at, str) else None
        if since is not None and (when is None or when < since):
            continue
        out.append(gateway_record(entry, history.path))
    return out
