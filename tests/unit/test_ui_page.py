"""The operator page's HTML escaping and sessions, without a browser (fast controls for
tests/e2e/test_operator_page.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from continuum.events import EventType
from continuum.runtime import Continuum
from continuum.types import Origin
from continuum.ui import page
from continuum.ui.sessions import IDLE_SECONDS, Principal, Sessions

HOSTILE = (
    "<script>alert(1)</script> \x1b[2K \u202e <img src=x onerror=alert(2)> "
    '" onmouseover=alert(3) x="'
)
RUN = 'run-<b>"x</b>'
READER = Principal("read", False, "token-file line 1")
ACTOR = Principal("approve", True, "token-file line 2")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "img", "b", "iframe", "object", "style"):
            self.found.append(f"<{tag}>")
        self.found += [f"{tag} {name}=" for name, _ in attrs if name.startswith("on")]


def raw_markup(html: str) -> list[str]:
    """What an agent's text could have injected: tags and event attributes the page itself
    never uses (it has no script, image or <b>), and raw control or bidi characters."""
    parser = _Tags()
    parser.feed(html)
    controls = re.findall(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", html)
    return parser.found + controls


def test_the_markup_check_finds_unescaped_markup() -> None:
    # Negative control: rendering without escaping is caught by the same check.
    assert raw_markup(f"<td>{HOSTILE}</td>")
    assert raw_markup('<span title="x" onmouseover=alert(3)>')


def test_runs_page_escapes_a_hostile_goal_and_run_id() -> None:
    rows = [page.RunRow(RUN, HOSTILE, "active", 3, "2026-01-01T00:00:00Z", "resume", 0)]
    html = page.runs_page("/ui", ACTOR, "csrf-token", rows)
    assert raw_markup(html) == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\x1b[2K" in html and "\\u202e" in html
    assert 'href="/ui/run?id=run-%3Cb%3E%22x%3C%2Fb%3E"' in html


def test_run_page_escapes_every_agent_field_and_hides_buttons_from_readers(tmp_path: Path) -> None:
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run(RUN, HOSTILE)
        rt.append(RUN, EventType.EVIDENCE_ADDED, {"evidence_id": "e<script>", "text": HOSTILE})
        started = rt.intercept(RUN, "send<img src=x>", {"a": HOSTILE}, key="k<script>")
        rt.fail(RUN, started.action_id or "", error=HOSTILE)
        state = rt.state(RUN)
        view = page.RunView(
            run_id=RUN,
            status="active",
            state=state,
            verdict="request_human",
            rationale="because " + HOSTILE,
            next_allowed_action=None,
            chain_ok=True,
            trusted_through=state.sequence,
            head_sequence=state.sequence,
            violations=0,
            actions=rt.actions(RUN),
            interrupted=frozenset(),
            approvals=[],
        )
    for who, forms in ((ACTOR, 2), (READER, 0)):
        html = page.run_page("/ui", who, "csrf-token", view)
        assert raw_markup(html) == []
        assert html.count("<form") - 1 == forms  # the log-out form, then confirm and reconcile
        assert ('name="run_id" value="run-&lt;b&gt;&quot;x&lt;/b&gt;"' in html) == bool(forms)


def test_error_page_escapes_the_message() -> None:
    html = page.error_page("/ui", HOSTILE, "usage.x", HOSTILE)
    assert raw_markup(html) == [] and "Nothing was recorded." in html


def test_sessions_expire_when_idle_and_check_their_csrf_token() -> None:
    now = [1000.0]
    sessions = Sessions(clock=lambda: now[0])
    sid, session = sessions.open(ACTOR)
    assert sessions.get(sid) is session and sessions.get("other") is None
    assert session.csrf_ok(session.csrf) and not session.csrf_ok(None)
    assert not session.csrf_ok(session.csrf[:-1] + "x")
    now[0] += IDLE_SECONDS + 1
    assert sessions.get(sid) is None
