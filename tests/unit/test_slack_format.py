"""The Slack body of a notice: agent text escaped by Slack's own rules (issue 30, item 11).

Slack reads ``&``, ``<`` and ``>`` as control characters in message text and asks for
exactly those three as ``&amp;``, ``&lt;``, ``&gt;``, nothing else entity-encoded
(api.slack.com/reference/surfaces/formatting#escaping): ``'`` stays ``'``.
"""

from __future__ import annotations

import pytest

from continuum.eventlog.notices import MAX_TEXT_CHARS, slack_escape, slack_message


@pytest.mark.parametrize(
    "text,escaped",
    [
        ("<!channel>", "&lt;!channel&gt;"),
        ("<https://evil|Click>", "&lt;https://evil|Click&gt;"),
        ("a & b", "a &amp; b"),
        ("&lt;", "&amp;lt;"),  # an entity the agent wrote shows as it wrote it
        ('it\'s "fine" *bold* _i_', 'it\'s "fine" *bold* _i_'),
        ("", ""),
    ],
)
def test_slack_escaping_encodes_exactly_its_three_control_characters(
    text: str, escaped: str
) -> None:
    assert slack_escape(text) == escaped


def notice(**details: object) -> dict[str, object]:
    return {
        "delivery_id": "ntf_1",
        "kind": "action_unknown",
        "run_id": "r1",
        "sequence": 7,
        "event_id": "ev_1",
        "summary": 'run "r1": action "send:<!here>" was interrupted',
        "command": "continuum reconcile r1 'send:<!here>' --occurred|--not-occurred",
        "details": details,
    }


def test_a_slack_message_has_no_live_markup_and_says_what_was_cut() -> None:
    reason = "<!channel> \u202e" + "x" * 5000
    message = slack_message(notice(reason=reason))
    text = message["text"]
    assert "<" not in text and ">" not in text
    assert "\u202e" not in text and "\\u202e" in text  # bidi shown as an escape
    assert f"Cut to {MAX_TEXT_CHARS} characters: reason ({len(reason)} characters)" in text
    assert "`continuum events r1 --after 6 --limit 1 --json`" in text
    assert (message["link_names"], message["unfurl_links"], message["unfurl_media"]) == (
        False,
        False,
        False,
    )


def test_a_command_holding_a_backtick_is_not_put_in_a_code_span() -> None:
    n = notice(reason="r")
    n["command"] = "continuum reconcile r1 'a`b' --occurred|--not-occurred"
    text = slack_message(n)["text"]
    assert "To act, run: continuum reconcile r1 'a`b'" in text


HOSTILE = "<!channel> <https://evil|approve> `rm -rf` \u202e\u2066 & </script>"


def test_the_new_notices_keep_agent_text_inert_in_both_formats() -> None:
    """Issue 26: the verdict and limit notices quote agent text (a key, an action type, a
    run id) like the others: in JSON no raw control or bidi character, in Slack no live
    markup."""
    import json

    from continuum.eventlog.notices import limit_notice, verdict_notice

    made = [
        verdict_notice(
            run_id="r<1>",
            sequence=3,
            recorded_at="2026-12-04T00:00:00Z",
            reason=f'action "{HOSTILE}" may have happened',
            required_actions=[f"reconcile_action:{HOSTILE}"],
        ),
        *(
            limit_notice(
                kind,
                run_id="r<1>",
                sequence=3,
                recorded_at="2026-12-04T00:00:00Z",
                fingerprint="f",
                reason=" over",
                action_key=HOSTILE,
                action_type=HOSTILE,
            )
            for kind in ("budget_exceeded", "retry_cap_reached")
        ),
    ]
    for n in made:
        body = json.dumps(n, ensure_ascii=True)
        assert "\u202e" not in body and "\u2066" not in body
        assert "\u202e" not in n["summary"] and "\\u202e" in n["summary"]
        text = slack_message(n)["text"]
        assert "<" not in text and ">" not in text and "\u202e" not in text, text
        assert "a person" in text or "reached" in text
    assert len({n["delivery_id"] for n in made}) == 3
