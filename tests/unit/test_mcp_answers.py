"""The MCP gateway's own answers (``gateway/mcp_answers.py``): each refusal is an
``isError`` result that says why for a program (``_meta["continuum/ledger"]["refused"]``)
and what to do for the model; a kept result replays as the upstream gave it; what is too
large is kept as its digest."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import types

from continuum.errors import StoreBusyError
from continuum.gateway import mcp_answers as answers
from continuum.gateway.rules import parse_rules

RULES = parse_rules(
    '[[effect]]\ntool = "send_email"\naction_type = "email"\nkey = "{to}"\n', "rules.toml"
)
RULE = RULES.effects[0]


def _meta(result: types.CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    meta = result.meta[answers.LEDGER_META]
    assert isinstance(meta, dict)
    return meta


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


REFUSALS = [
    (
        answers.upstream_gone("mail", "gone", "send", reconnects=False, restarts=False),
        "upstream_gone",
    ),
    (answers.bad_answer("mail", "send", ValueError("junk")), "upstream_bad_answer"),
    (answers.tool_changed("mail", "send", "a" * 64, "b" * 64), "tool_changed"),
    (answers.unknown_tool("mail", "send"), "unknown_tool"),
    (
        answers.not_allowed(RULE, "send", "it is denied", "Ask a person", "auth.denied"),
        "auth.denied",
    ),
    (answers.unrecordable(RULE, "send", StoreBusyError("locked", hint="retry")), "store.busy"),
    (answers.ledger_refusal("mail", "r", "send", "email:a", "act_1", "unknown", "Ask."), "unknown"),
    (answers.replaced_before_sent("mail", "r", "send", "email:a"), "upstream_restarted"),
    (
        answers.session_refused("mail", "r", "send", "email:a", ValueError("404")),
        "upstream_restarted",
    ),
    (answers.unknown_outcome("mail", "r", "send", "email:a", TimeoutError("slow")), "unknown"),
]


@pytest.mark.parametrize(("result", "code"), REFUSALS)
def test_every_refusal_is_an_error_result_that_names_why(
    result: types.CallToolResult, code: str
) -> None:
    assert result.is_error is True
    assert _meta(result)["refused"] == code
    assert _meta(result)["tool"] == "send"
    assert "'send'" in _text(result)


def test_how_a_lost_upstream_comes_back_is_said_as_the_gateway_was_told() -> None:
    http = _text(answers.upstream_gone("m", "x", "t", reconnects=True, restarts=False))
    restart = _text(answers.upstream_gone("m", "x", "t", reconnects=False, restarts=True))
    neither = _text(answers.upstream_gone("m", "x", "t", reconnects=False, restarts=False))
    assert "tries to reach it again" in http
    assert "starts it again on the next call" in restart
    assert "--restart-upstream" in neither and "Restart the gateway" in neither


@pytest.mark.parametrize(
    ("status", "person"),
    [
        ("unknown", True),
        ("reconcile_required", True),
        ("needs_confirmation", True),
        ("version_drift", True),
        ("awaiting_approval", False),
        ("denied", False),
    ],
)
def test_a_ledger_refusal_tells_how_to_reconcile_only_what_a_person_settles(
    status: str, person: bool
) -> None:
    text = _text(answers.ledger_refusal("mail", "r1", "send", "email:a", "act_1", status, "G."))
    assert ("continuum reconcile r1 email:a --occurred" in text) is person
    assert f"the ledger says {status}: G." in text


def test_a_kept_result_replays_as_the_upstream_gave_it_with_the_ledger_s_note() -> None:
    given = types.CallToolResult(
        content=[types.TextContent(type="text", text="sent")],
        structured_content={"id": 7},
        _meta={"upstream": "own"},
    )
    kept = answers.kept_result(given)
    replayed = answers.from_ledger(kept, "send", "email:a", "act_1", no_result=False)
    assert replayed.content == given.content
    assert replayed.structured_content == {"id": 7}
    assert replayed.meta is not None and replayed.meta["upstream"] == "own"
    assert _meta(replayed) == {
        "answered": "from_ledger",
        "action_key": "email:a",
        "action_id": "act_1",
    }


def test_a_result_too_large_is_kept_as_its_digest_and_its_repeat_says_so() -> None:
    big = types.CallToolResult(content=[types.TextContent(type="text", text="x" * 70_000)])
    kept = answers.kept_result(big)
    assert set(kept) == {"sha256", "chars"} and kept["chars"] > answers.MAX_RESULT_CHARS
    for no_result in (True, False):
        replayed = answers.from_ledger(kept, "send", "email:a", "act_1", no_result=no_result)
        assert replayed.is_error is no_result  # a tool with an output schema: marked
        assert "only its digest is stored" in _text(replayed)
        assert _meta(replayed)["stored"] == kept


def test_arguments_too_large_are_kept_as_their_digest() -> None:
    small = answers.kept_arguments("mail", RULE, "send", {"to": "a"})
    assert small["arguments"] == {"to": "a"} and small["rule"]["action_type"] == "email"
    large = answers.kept_arguments("mail", RULE, "send", {"body": "y" * 70_000})
    assert set(large["arguments"]) == {"sha256", "chars"}


def test_an_is_error_result_is_recorded_by_its_text() -> None:
    failed = types.CallToolResult(
        content=[types.TextContent(type="text", text="quota")], is_error=True
    )
    assert answers.result_text(failed) == "quota"
    assert answers.result_text(types.CallToolResult(content=[], is_error=True)) == (
        "the upstream answered isError"
    )
