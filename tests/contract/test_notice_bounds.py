"""What a notice carries is bounded whatever an agent writes (issue 30, item 11), on every
backend: the store writes each notice in the transaction of its event, already bounded.

The worst an agent can do: every identifier at its limit and made of 4-byte characters
(each sent as a 12-byte ``\\u`` pair in ASCII JSON), arguments just under the size a notice
keeps, an error of 1 MB. Every body, in both formats, stays under ``BODY_LIMIT`` (the
figure references/operators.md gives), and every text of it that was cut is named with
its full length. The control: without the bound, the same error's body is over a megabyte; a notice stored
unbounded (before the bound existed) is sent bounded, byte for byte as a new one.
"""

from __future__ import annotations

import json

from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.notices import MAX_ARGUMENTS_CHARS, MAX_TEXT_CHARS, bounded
from continuum.ledger.approvals import ApprovalRules, parse_rules
from continuum.ledger.outbox import FORMATS, request_body
from continuum.runtime.facade import Continuum
from continuum.types import Origin
from tests.contract.conftest import StoreFactory

BODY_LIMIT = 128 * 1024
WIDE = "\U0001f600"  # 4 bytes of UTF-8; 12 bytes as \ud83d\ude00 in ASCII JSON
RULES = ApprovalRules(
    rules=parse_rules(
        f'[[approval]]\naction_type = "{":" * 200}"\ndescription = "{"d" * 5000}"\n',
        "approvals.toml",
    )
)


def test_every_notice_stays_under_the_documented_size_in_both_formats(
    store_factory: StoreFactory,
) -> None:
    cx = Continuum(store_factory.open(), origin=Origin.EXTERNAL_AGENT, approvals=RULES)
    run, action_type, key = WIDE * 200, ":" * 200, WIDE * 1000
    cx.start_run(run, "the worst an agent can write")
    to = WIDE * (MAX_ARGUMENTS_CHARS - len(canonical_json({"to": ""})))
    assert len(canonical_json({"to": to})) == MAX_ARGUMENTS_CHARS  # kept whole, the largest
    asked = cx.intercept(run, action_type, {"to": to}, key=key)
    assert asked.status == "awaiting_approval"
    started = cx.intercept(run, "send", {"n": 1}, key=key)
    error = WIDE * 250_000  # 1 MB of UTF-8
    cx.fail(run, started.action_key, error=error)
    rows = cx.outbox()
    assert sorted(r.kind for r in rows) == ["action_unknown", "approval_requested"]
    for row in rows:
        assert bounded(row.body) == row.body  # stored bounded: sent as stored
        for body_format in FORMATS:
            body = request_body(row, body_format)
            assert len(body) <= BODY_LIMIT, (row.kind, body_format, len(body))
        details = row.body["details"]
        assert all(len(v) <= MAX_TEXT_CHARS for v in details.values() if isinstance(v, str))
        assert details["cut"]  # something was cut, and it says what and how long it was
        assert details["read_in_full"].startswith("continuum events ")
    unknown = next(r for r in rows if r.kind == "action_unknown")
    assert unknown.body["details"]["cut"]["reason"] == len(error)
    # the control: the same notice unbounded is what a receiver used to be sent
    whole = {**unknown.body, "details": {**unknown.body["details"], "reason": error}}
    assert len(json.dumps(whole, ensure_ascii=True)) > 1_000_000
    # and a notice stored before the bound existed is cut as it is sent
    stored_before = unknown.model_copy(update={"body": whole})
    assert request_body(stored_before) == request_body(unknown)
