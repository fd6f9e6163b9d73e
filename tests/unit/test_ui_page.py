"""The operator page's HTML escaping and sessions, without a browser (fast controls for
tests/e2e/test_operator_page.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from continuum.eventlog.events import EventType
from continuum.runtime.facade import Continuum
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


# --- what a button covers is shown; live actions; read-only; the confirm gate -------------


def _view(rt: Continuum, run_id: str, interrupted: frozenset[str] = frozenset()) -> page.RunView:
    state = rt.state(run_id)
    return page.RunView(
        run_id=run_id,
        status="active",
        state=state,
        verdict="request_human",
        rationale="r",
        next_allowed_action=None,
        chain_ok=True,
        trusted_through=state.sequence,
        head_sequence=state.sequence,
        violations=0,
        actions=rt.actions(run_id),
        interrupted=interrupted,
        approvals=rt.approvals(run_id),
    )


def _card(html: str, ident: str) -> str:
    return html.split(f'id="{ident}"')[1].split('class="card')[0]


def test_allow_covers_only_arguments_shown_in_full(tmp_path: Path) -> None:
    from continuum.ledger.approvals import ApprovalRules, parse_rules

    rules = ApprovalRules(rules=parse_rules('[[approval]]\naction_type = "pay"\n', "a.toml"))
    with Continuum.open(
        str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT, approvals=rules
    ) as rt:
        rt.start_run(RUN, "g")
        # The payee sits past the old 400-character cut (the reviewer's r2).
        pushed = {"memo": "routine " + "." * 380, "to": "ATTACKER-IBAN-666" + HOSTILE}
        shown = rt.intercept(RUN, "pay", pushed, key="a").approval_id or ""
        huge = {"memo": "." * page.SHOW_CHARS, "to": "HIDDEN-PAYEE"}
        cut = rt.intercept(RUN, "pay", huge, key="b").approval_id or ""
        html = page.run_page("/ui", ACTOR, "csrf-token", _view(rt, RUN))
    assert raw_markup(html) == []
    first = _card(html, f"approval-{shown}")
    assert "ATTACKER-IBAN-666" in first and 'value="allow"' in first
    assert "&lt;script&gt;" in first and "\\u202e" in first  # escaped in the JSON block
    second = _card(html, f"approval-{cut}")
    assert "ARGUMENTS CUT" in second and "HIDDEN-PAYEE" not in second
    assert 'value="allow"' not in second and 'value="deny"' in second
    assert page.arguments_cut(huge) and not page.arguments_cut(pushed)


def test_confirm_is_offered_only_when_all_it_covers_is_shown(tmp_path: Path) -> None:
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run(RUN, "g")
        long_text = "x" * 700 + " TAIL-OF-EVIDENCE"  # past the old 600-character cut
        rt.append(RUN, EventType.EVIDENCE_ADDED, {"evidence_id": "e1", "text": long_text})
        html = page.run_page("/ui", ACTOR, "csrf-token", _view(rt, RUN))
        assert "TAIL-OF-EVIDENCE" in html and 'id="confirm-form"' in html
        assert page.confirm_cut(rt.state(RUN)) == []
        too_long = "y" * page.SHOW_CHARS + " BURIED"
        rt.append(RUN, EventType.FINDING_ADDED, {"finding_id": "f1", "text": too_long})
        html = page.run_page("/ui", ACTOR, "csrf-token", _view(rt, RUN))
        assert page.confirm_cut(rt.state(RUN)) == ["findings"]
    assert "BURIED" not in html and 'id="confirm-form"' not in html and 'id="no-confirm"' in html


def test_only_unknown_interrupted_or_agent_failed_actions_get_a_reconcile_form(
    tmp_path: Path,
) -> None:
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run(RUN, "g")
        live = rt.intercept(RUN, "send", {"n": 1}, key="live").action_id or ""
        dead = rt.intercept(RUN, "send", {"n": 2}, key="dead").action_id or ""
        unknown = rt.intercept(RUN, "send", {"n": 3}, key="unknown").action_id or ""
        rt.fail(RUN, unknown, error="timeout")
        html = page.run_page("/ui", ACTOR, "csrf-token", _view(rt, RUN, frozenset({dead})))
    assert "in progress (owned by a live process/session)" in _card(html, f"action-{live}")
    assert f'id="reconcile-{live}"' not in html  # a live owner's action: no form
    for settle in (dead, unknown):
        assert f'id="reconcile-{settle}"' in html
    assert 'name="attempt" value="1"' in html


def test_read_only_page_offers_no_form_and_says_why(tmp_path: Path) -> None:
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run(RUN, "g")
        started = rt.intercept(RUN, "send", {"n": 1}, key="k").action_id or ""
        rt.fail(RUN, started, error="timeout")
        view = _view(rt, RUN)
    why = "read-only: no confirm token is configured (X_CONFIRM)"
    html = page.run_page("/ui", ACTOR, "csrf-token", view, read_only=why)
    assert html.count("<form") == 1 and 'id="read-only"' in html and "X_CONFIRM" in html
    # Control: the same page, writable, has the confirm and reconcile forms.
    assert page.run_page("/ui", ACTOR, "csrf-token", view).count("<form") == 3


def test_the_runs_page_says_how_many_more_runs_are_not_shown() -> None:
    rows = [page.RunRow("r", "g", "active", 1, "t", "resume", 1, 2)]
    html = page.runs_page("/ui", ACTOR, "c", rows, more=7, more_waiting=3)
    assert "7 more not shown (3 of them waiting for a person)" in html
    assert 'id="more"' not in page.runs_page("/ui", ACTOR, "c", rows)


def test_the_confirm_gate_fails_closed() -> None:
    from continuum.ui.sessions import ConfirmGate

    gate = ConfirmGate(lambda presented: presented == "right", "X")
    assert gate.accepts("right")
    assert not gate.accepts("wrong") and not gate.accepts("") and not gate.accepts(None)
    off = ConfirmGate(None, "X")
    assert not off.enabled and not off.accepts("right")


def test_an_action_a_hosts_subagent_ran_names_the_subagent_escaped(tmp_path: Path) -> None:
    """The hooks record a subagent's id and type on its action (issue 29, item 13)."""
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("r", "g")
        agent = {"id": "a1<script>", "type": "general-purpose"}
        rt.intercept("r", "send", {"tool": "Bash", "agent": agent}, key="k1")
        rt.intercept("r", "send", {"tool": "Bash"}, key="k2")
        state = rt.state("r")
        view = page.RunView(
            run_id="r",
            status="active",
            state=state,
            verdict="request_human",
            rationale="x",
            next_allowed_action=None,
            chain_ok=True,
            trusted_through=state.sequence,
            head_sequence=state.sequence,
            violations=0,
            actions=rt.actions("r"),
            interrupted=frozenset(),
            approvals=[],
        )
    html = page.run_page("/ui", ACTOR, "csrf-token", view)
    assert raw_markup(html) == []
    assert html.count('<span class="label">subagent</span>') == 1  # k2 ran in the main loop
    assert "general-purpose" in html and "a1&lt;script&gt;" in html


def test_an_actions_recorded_versions_are_shown_escaped(tmp_path: Path) -> None:
    """Version pinning (issue 24): what the agent said it ran under is its word, escaped."""
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("r", "g")
        rt.intercept("r", "send", {"n": 1}, key="k1", versions={"model": HOSTILE[:150]})
        rt.intercept("r", "send", {"n": 2}, key="k2")
        view = _view(rt, "r")
    html = page.run_page("/ui", ACTOR, "csrf-token", view)
    assert raw_markup(html) == []
    assert html.count("recorded under") == 1 and "&lt;script&gt;alert(1)" in html


def test_observations_and_waiting_branches_are_shown_escaped(tmp_path: Path) -> None:
    """Observations and plan branches (issue 24): every reading with its origin, a waiting
    branch first with the command that resolves it, agent values escaped."""
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("r", "g")
        rt.observe("r", "pay button", HOSTILE, signal="dom", source=HOSTILE)
        rt.observe("r", "banner", {"text": HOSTILE}, signal="dom")
        rt.resolve_branch("r", "look", choice="read", observations=["banner"], reason=HOSTILE)
        rt.resolve_branch("r", "pay", choice="pay", observations=["pay button"], risk="high")
        view = _view(rt, "r")
    html = page.run_page("/ui", ACTOR, "csrf-token", view)
    assert raw_markup(html) == []
    assert "Plan branches (1 waiting for a person)" in html and "Observations (2)" in html
    assert html.index('id="branch-pay"') < html.index('id="branch-look"')  # waiting first
    assert "continuum resolve-branch r pay --choice ..." in html
    assert "&lt;script&gt;alert(1)" in html and "[agent-supplied: external_agent" in html
    # control: a run without any shows neither section
    with Continuum.open(str(tmp_path / "t.db")) as rt:
        rt.start_run("q", "g")
        plain = page.run_page("/ui", ACTOR, "csrf-token", _view(rt, "q"))
    assert "Plan branches" not in plain and "Observations (" not in plain


def test_the_family_handoff_and_budget_are_shown_escaped(tmp_path: Path) -> None:
    """Run structure (issue 25): parent and children linked, the handoff note as the
    agent's word, the budget's spent and reserved figures."""
    with Continuum.open(str(tmp_path / "s.db"), origin=Origin.EXTERNAL_AGENT) as rt:
        rt.start_run("root", "g")
        rt.start_run("kid", "g", parent="root")
        rt.handoff("root", HOSTILE)
        rt.set_budget("root", usd="1.00")
        done = rt.intercept("root", "llm", {"q": 1}, key="q1", cost={"usd": 0.4})
        rt.complete("root", done.action_key, cost={"usd": 0.1})
        rt.intercept("root", "llm", {"q": 2}, key="q2", cost={"usd": 0.3})  # in flight
        root, kid = _view(rt, "root"), _view(rt, "kid")
    html = page.run_page("/ui", ACTOR, "csrf-token", root)
    assert raw_markup(html) == []
    family = html.split('id="family"')[1].split("</table>")[0]
    assert 'href="/ui/run?id=kid"' in family and "&lt;script&gt;alert(1)" in family
    assert "spent 0.10 USD and 0 tokens; reserved (in flight or unknown) 0.30 USD" in family
    assert "limits: 1.00 USD, no token limit" in family
    child = page.run_page("/ui", ACTOR, "csrf-token", kid)
    assert 'href="/ui/run?id=root"' in child.split('id="family"')[1]
    # control: a run with none of it shows no such table
    with Continuum.open(str(tmp_path / "t.db")) as rt:
        rt.start_run("q", "g")
        assert 'id="family"' not in page.run_page("/ui", ACTOR, "csrf-token", _view(rt, "q"))
