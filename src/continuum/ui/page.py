"""The operator page's HTML (pure: values in, a string out).

Two ways a value reaches the page, and nothing else:

- ``agent(value)``: text an agent supplied (goals, keys, notes, arguments, run ids,
  evidence): shown as ``continuum.untrusted.quoted`` shows it on a terminal (in double
  quotes, quotes and backslashes escaped, control and bidi characters as visible escapes
  such as ``\\x1b`` and ``\\u202e``), then HTML-escaped, in a span marked as an agent's.
- ``text(value)``: anything else shown (our own words, numbers, hashes, statuses):
  visible escapes as well, then HTML-escaped.

Attribute values (hidden form fields, links) are HTML-escaped with quotes. The page has
no script at all; its style sheet is served from the same origin.

What a button covers is shown in full: an approval's arguments (pretty-printed JSON) for
Allow, and everything a confirmation covers (goal, plan, model, evidence, findings,
decisions) for Confirm, each up to ``SHOW_CHARS`` characters; past that the value is
shown cut, saying so, and the button is not offered (the CLI shows and records it).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote as url_quote

from continuum.hooks.hosts import subagent_of
from continuum.ledger.approvals import ApprovalInfo
from continuum.ledger.budget import charged, dollars
from continuum.state.records import ActionRecord, Item, Provenance, State
from continuum.types import ActionStatus
from continuum.ui.sessions import Principal
from continuum.untrusted import as_typed, json_safe, origin_words, quoted, terminal_safe

SHOW_CHARS = 16_000
"""Longest value shown in full (as ``continuum decide`` shows arguments); a longer one is
cut, said to be cut, and no button that would cover it is offered."""

CONFIRM_TOKEN_LABEL = (
    '<label>confirm token <input type="password" name="confirm_token" '
    'autocomplete="off" required></label> '
)
"""The person's own confirm token, typed for each change (never kept by the page)."""

AGENT_NOTICE = (
    "Text in double quotes was written by an agent unless labelled otherwise, "
    "not by continuum; control characters in it are shown escaped (e.g. \\x1b)."
)

STYLE = """\
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2327;background:#f6f7f7}
header{background:#1d2327;color:#fff;padding:.6em 1.2em;display:flex;gap:1em;align-items:center}
header a{color:#fff}header form{margin-left:auto}main{padding:1em 1.4em;max-width:72em}
h1{font-size:1.25em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #dcdcde;padding:.35em .5em;text-align:left;vertical-align:top}
.agent{font-family:ui-monospace,monospace;background:#fcf9e8;white-space:pre-wrap;
word-break:break-all}.label{color:#646970;font-size:.9em}
.verdict{font-weight:bold}.ok{color:#00702a}.bad{color:#b32d2e}.warn{color:#996800}
.msg{padding:.5em .8em;margin:.5em 0;border-left:4px solid #2271b1;background:#fff}
.msg.error{border-color:#b32d2e}.card{background:#fff;border:1px solid #dcdcde;padding:.8em;
margin:.6em 0}form.inline{display:inline}fieldset{border:1px solid #dcdcde;margin:.4em 0}
button{padding:.3em .9em;margin:.2em .2em .2em 0}input[type=text],input[type=password]{width:22em}
.notice{color:#646970;font-size:.9em}pre.agent{margin:.3em 0;padding:.4em;max-height:40em;
overflow:auto}
"""


def text(value: Any) -> str:
    """Our own text or a stored non-agent value, inert and visible."""
    return html.escape(terminal_safe("-" if value is None else str(value)), quote=True)


def agent(value: Any, *, limit: int | None = None) -> str:
    """An agent-supplied value, quoted and escaped as the CLI shows it, marked as such."""
    shown = quoted(None if value is None else str(value), limit=limit)
    return (
        f'<span class="agent" title="written by an agent">{html.escape(shown, quote=True)}</span>'
    )


def agent_json(value: Any, *, limit: int = 400) -> str:
    return agent(json_safe(json.dumps(value, ensure_ascii=False, sort_keys=True)), limit=limit)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON with every unsafe character escaped (the JSON is the same
    value; strings cannot hold a raw line break, so each line is the JSON's own)."""
    return json_safe(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2))


def arguments_cut(value: Any) -> bool:
    """True when the page cannot show these arguments in full."""
    return len(pretty_json(value)) > SHOW_CHARS


def agent_block(value: Any, what: str) -> str:
    """Arguments written by an agent: in full as indented JSON in a block marked as the
    agent's, or past ``SHOW_CHARS`` the first part and a line saying it was cut."""
    full = pretty_json(value)
    shown = full[:SHOW_CHARS]
    cut = (
        f'<br><strong class="bad">{text(what.upper())} CUT</strong>: '
        f"{text(f'the first {len(shown)} of {len(full)} characters are shown.')}"
        if len(full) > len(shown)
        else ""
    )
    lines = "\n".join(terminal_safe(line) for line in shown.split("\n"))
    return (
        f'<pre class="agent" title="written by an agent">{html.escape(lines, quote=True)}</pre>'
        + cut
    )


def confirm_cut(state: State) -> list[str]:
    """What a confirmation of ``state`` covers that the page cannot show in full."""
    values: list[tuple[str, Any]] = [
        ("goal", state.goal.value if state.goal else None),
        ("model", state.model),
        *(("plan", step) for step in state.plan),
    ]
    for what, items in (
        ("evidence", state.evidence.values()),
        ("findings", state.findings.values()),
        ("decisions", state.decisions.values()),
    ):
        for i in items:
            values += [(what, i.id), (what, i.text), (what, i.path)]
    return sorted({what for what, v in values if v is not None and len(str(v)) > SHOW_CHARS})


def attr(value: str) -> str:
    return html.escape(value, quote=True)


def origin_label(origin: str | None, sequence: int | None = None) -> str:
    """Who recorded a value, as the CLI labels it."""
    words = origin_words(origin, sequence)
    return "" if words is None else f' <span class="label">[{text(words)}]</span>'


def provenance(prov: Provenance | None) -> str:
    return origin_label(str(prov.origin), prov.sequence) if prov is not None else ""


def run_url(prefix: str, run_id: str) -> str:
    return f"{prefix}/run?id={url_quote(run_id, safe='')}"


def run_link(prefix: str, run_id: str) -> str:
    return attr(run_url(prefix, run_id))


def _run_anchor(prefix: str, run_id: str) -> str:
    return f'<a href="{run_link(prefix, run_id)}">{agent(run_id, limit=80)}</a>'


def _hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{attr(name)}" value="{attr(value)}">'


def _verdict(mode: str) -> str:
    cls = "ok" if mode == "resume" else "warn" if mode in ("wait", "request_human") else "bad"
    return f'<span class="verdict {cls}">{text(mode)}</span>'


def document(
    title: str,
    body: str,
    *,
    prefix: str,
    principal: Principal | None = None,
    csrf: str | None = None,
    messages: Sequence[tuple[str, str]] = (),
) -> str:
    who = ""
    if principal is not None and csrf is not None:
        who = (
            f"<span>signed in: role {text(principal.role)} ({text(principal.label)})"
            f"{'' if principal.may_act else ', read only'}</span>"
            f'<form method="post" action="{attr(prefix)}/logout">{_hidden("csrf", csrf)}'
            '<button type="submit">Log out</button></form>'
        )
    flashes = "".join(
        f'<div class="msg {attr(kind)}" role="status">{text(words)}</div>'
        for kind, words in messages
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{text(title)}</title>"
        f'<link rel="stylesheet" href="{attr(prefix)}/style.css"></head><body>'
        f'<header><h1><a href="{attr(prefix)}/">continuum</a> operator page</h1>{who}</header>'
        f"<main>{flashes}{body}</main></body></html>\n"
    )


def login_page(prefix: str, error: str | None = None) -> str:
    problem = f'<div class="msg error" role="alert">{text(error)}</div>' if error else ""
    body = (
        f"{problem}<h2>Log in</h2>"
        "<p>Paste a token from the server's token file. It is sent once, in this form, "
        "never in a URL; the browser keeps only a session cookie.</p>"
        f'<form method="post" action="{attr(prefix)}/login" autocomplete="off">'
        '<label>Token <input type="password" name="token" id="token" required></label> '
        '<button type="submit" id="login">Log in</button></form>'
    )
    return document("continuum: log in", body, prefix=prefix)


@dataclass(frozen=True)
class RunRow:
    run_id: str
    goal: str | None
    status: str
    head_sequence: int
    created_at: str
    verdict: str
    pending_approvals: int
    unresolved_actions: int = 0


def _read_only_notice(read_only: str | None) -> str:
    return (
        f'<p class="msg error" id="read-only" role="status">{text(read_only)}: nothing can be '
        "confirmed, reconciled or decided here.</p>"
        if read_only
        else ""
    )


def runs_page(
    prefix: str,
    principal: Principal,
    csrf: str,
    rows: Sequence[RunRow],
    messages: Sequence[tuple[str, str]] = (),
    *,
    more: int = 0,
    more_waiting: int = 0,
    read_only: str | None = None,
) -> str:
    """The runs: those waiting for a person first (the caller orders them), then the
    rest; ``more`` runs not listed, ``more_waiting`` of them waiting for a person."""
    lines = "".join(
        f'<tr class="run"><td><a href="{run_link(prefix, r.run_id)}">{agent(r.run_id, limit=80)}</a>'
        f"</td><td>{agent(r.goal, limit=160)}</td><td>{text(r.status)}</td>"
        f"<td>{_verdict(r.verdict)}</td><td>{text(r.head_sequence)}</td>"
        f"<td>{text(r.pending_approvals)}</td><td>{text(r.unresolved_actions)}</td>"
        f"<td>{text(r.created_at)}</td></tr>"
        for r in rows
    )
    hidden = (
        f'<p id="more">{text(more)} more not shown'
        + (f" ({text(more_waiting)} of them waiting for a person)" if more_waiting else "")
        + ": runs waiting for a person are listed first; open any run by its id below, or "
        "list them all with continuum runs.</p>"
        if more
        else ""
    )
    lookup = (
        f'<form method="get" action="{attr(prefix)}/run" id="open-run">'
        '<label>open run <input type="text" name="id" required></label> '
        '<button type="submit">Open</button></form>'
    )
    body = (
        _read_only_notice(read_only)
        + f'<p class="notice">{text(AGENT_NOTICE)}</p><h2>Runs</h2>'
        + (
            f'<table id="runs"><tr><th>run</th><th>goal</th><th>status</th><th>verdict</th>'
            f"<th>events</th><th>approvals waiting</th><th>unresolved actions</th>"
            f"<th>created</th></tr>{lines}</table>"
            if rows
            else "<p>No runs in this store.</p>"
        )
        + hidden
        + lookup
    )
    return document(
        "continuum: runs", body, prefix=prefix, principal=principal, csrf=csrf, messages=messages
    )


@dataclass(frozen=True)
class RunView:
    """Everything the run page shows, read once per request."""

    run_id: str
    status: str
    state: State
    verdict: str
    rationale: str
    next_allowed_action: str | None
    chain_ok: bool
    trusted_through: int
    head_sequence: int
    violations: int
    actions: Sequence[ActionRecord]
    interrupted: frozenset[str]
    approvals: Sequence[ApprovalInfo]


def _items(title: str, items: Iterable[Item]) -> str:
    # In full (up to SHOW_CHARS): "Confirm everything shown" covers them.
    rows = "".join(
        f"<tr><td>{agent(i.id, limit=SHOW_CHARS)}</td><td>{agent(i.text, limit=SHOW_CHARS)}"
        + (
            f'<br><span class="label">file</span> {agent(i.path, limit=SHOW_CHARS)}'
            if i.path
            else ""
        )
        + f"</td><td>{text(i.status)}{provenance(i.provenance)}</td></tr>"
        for i in items
    )
    return f"<h3>{text(title)}</h3><table>{rows}</table>" if rows else ""


def _perception(state: State) -> str:
    """Plan branches (those waiting first) and the observations they rest on, each reading
    with its origin; agent values quoted and escaped. Read-only here: a person resolves a
    waiting branch with the CLI's ``continuum resolve-branch`` (it shows every reading)."""
    out: list[str] = []
    branches = sorted(
        state.branches.values(), key=lambda b: (not b.waiting, b.provenance.sequence, b.id)
    )
    waiting = sum(1 for b in branches if b.waiting)
    if branches:
        out.append(f'<h2 id="branches">Plan branches ({waiting} waiting for a person)</h2>')
    for b in branches:
        rests = ", ".join(
            agent(o, limit=120)
            + f" ({text(state.observations[o].status if o in state.observations else 'not recorded')})"
            for o in b.observations
        )
        out.append(
            f'<div class="card branch" id="branch-{attr(b.id)}">{agent(b.id, limit=120)}: '
            f"choice {agent(b.choice, limit=120)}, {text(b.risk)} risk, "
            + (
                f'<span class="bad">waits for a person</span>: {text(b.reason)}'
                f"<br>resolve: {text(f'continuum resolve-branch {as_typed(state.run_id)} ')}"
                f"{text(as_typed(b.id))} --choice ..."
                if b.waiting
                else '<span class="ok">resolved</span>'
                + origin_label(str(b.resolved_by) if b.resolved_by else None, b.provenance.sequence)
            )
            + f"<br>rests on: {rests}"
            + (f"<br>note: {agent(b.note, limit=SHOW_CHARS)}" if b.note else "")
            + "</div>"
        )
    observations = sorted(state.observations.values(), key=lambda o: o.provenance.sequence)
    if observations:
        out.append(f'<h2 id="observations">Observations ({len(observations)})</h2>')
        rows = "".join(
            f"<tr><td>{agent(o.id, limit=120)}<br>{agent(o.subject, limit=SHOW_CHARS)}</td>"
            f"<td>{text(o.status)} ({text(o.kind)})</td><td>"
            + "<br>".join(
                f"{agent(r.signal, limit=80)} saw "
                + (
                    agent(r.value, limit=SHOW_CHARS)
                    if isinstance(r.value, str)
                    else agent_json(r.value, limit=SHOW_CHARS)
                )
                + origin_label(str(r.origin), r.sequence)
                for r in sorted(o.readings.values(), key=lambda r: r.sequence)
            )
            + "</td></tr>"
            for o in observations
        )
        out.append(f"<table>{rows}</table>")
    return "".join(out)


def _family_and_budget(prefix: str, v: RunView) -> str:
    """The run's place in its family (parent, children, handoff note) and its budget:
    limits, what is spent and what is reserved (``ledger.budget``)."""
    s, rows = v.state, []
    if s.parent:
        rows.append(f"<tr><th>parent run</th><td>{_run_anchor(prefix, s.parent)}</td></tr>")
    if s.children:
        links = ", ".join(_run_anchor(prefix, c) for c in s.children)
        rows.append(f"<tr><th>child runs</th><td>{links}</td></tr>")
    if s.handoff is not None:
        rows.append(
            f"<tr><th>handoff note</th><td>{agent(s.handoff.value, limit=SHOW_CHARS)}"
            f"{provenance(s.handoff.provenance)}</td></tr>"
        )
    if s.budget is not None or any(a.usage for a in v.actions):
        spent = charged(
            {"usage": [u for u in (a.usage or ()) if u.get("actual") is not None]}
            for a in v.actions
        )
        total = charged({"usage": a.usage or []} for a in v.actions)
        limits = s.budget or {}
        usd_limit, token_limit = limits.get("usd_micros"), limits.get("tokens")
        rows.append(
            "<tr><th>budget</th><td>"
            + text(
                f"spent {dollars(spent[0])} USD and {spent[1]} tokens; reserved (in flight "
                f"or unknown) {dollars(total[0] - spent[0])} USD and {total[1] - spent[1]} "
                "tokens; limits: "
                + (f"{dollars(usd_limit)} USD" if usd_limit is not None else "no USD limit")
                + ", "
                + (f"{token_limit} tokens" if token_limit is not None else "no token limit")
            )
            + "</td></tr>"
        )
    return f'<table id="family">{"".join(rows)}</table>' if rows else ""


def _progress(state: State) -> str:
    p = state.progress
    total = "?" if p.total is None else str(p.total)
    return text(
        f"{p.completed}/{total} completed, {p.failed} failed, {p.pending} pending"
    ) + provenance(p.provenance)


def _confirm_form(prefix: str, v: RunView, csrf: str) -> str:
    s = v.state
    options = "".join(
        f'<option value="{o}">{label}</option>'
        for o, label in (
            ("default", "goal and progress"),
            ("goal", "goal"),
            ("progress", "progress"),
            ("all", "everything shown"),
        )
    )
    return (
        f'<form method="post" action="{attr(prefix)}/confirm" id="confirm-form">'
        + _hidden("csrf", csrf)
        + _hidden("run_id", v.run_id)
        + _hidden("through_sequence", str(s.sequence))
        + _hidden("head_hash", s.head_hash or "")
        + f'<label>Confirm <select name="scope">{options}</select></label> '
        f"as true, through sequence {text(s.sequence)} (event hash "
        f"{text((s.head_hash or '-')[:12])}) "
        + CONFIRM_TOKEN_LABEL
        + '<button type="submit" id="confirm">Confirm as a person</button></form>'
    )


def _reconcile_form(prefix: str, run_id: str, a: ActionRecord, csrf: str) -> str:
    ident = attr(a.action_id)
    return (
        f'<form method="post" action="{attr(prefix)}/reconcile" class="reconcile" '
        f'id="reconcile-{ident}">'
        + _hidden("csrf", csrf)
        + _hidden("run_id", run_id)
        + _hidden("action_id", a.action_id)
        + _hidden("attempt", str(a.attempt))
        + "<fieldset><legend>Settle it, after checking the external system</legend>"
        '<label><input type="radio" name="occurred" value="yes" required> it DID happen</label> '
        '<label><input type="radio" name="occurred" value="no"> it did NOT happen</label><br>'
        '<label>external id <input type="text" name="external_id"></label><br>'
        '<label>how it was checked <input type="text" name="note"></label><br>'
        + CONFIRM_TOKEN_LABEL
        + '<button type="submit">Record as a person</button></fieldset></form>'
    )


def to_settle(v: RunView, a: ActionRecord) -> bool:
    """A person may settle it: unknown, interrupted (started, its owner gone), or failed
    on an agent's word. A ``started`` action whose owner is alive is in progress."""
    return a.status == ActionStatus.UNKNOWN or a.action_id in v.interrupted or a.failure_unconfirmed


def in_progress(v: RunView, a: ActionRecord) -> bool:
    return a.status == ActionStatus.STARTED and a.action_id not in v.interrupted


def _action_row(prefix: str, v: RunView, a: ActionRecord, csrf: str | None) -> str:
    status = (
        "unknown (interrupted)"
        if a.action_id in v.interrupted
        else "in progress (owned by a live process/session)"
        if in_progress(v, a)
        else "failed (on an agent's word: unconfirmed)"
        if a.failure_unconfirmed
        else str(a.status)
    )
    detail = f'<br><span class="label">arguments</span>{agent_block(a.arguments, "arguments")}'

    if (sub := subagent_of(a.arguments)) is not None:
        kind = f"{agent(sub[1], limit=60)} " if sub[1] else ""
        detail += f'<br><span class="label">subagent</span> {kind}{agent(sub[0], limit=80)}'
    if a.error:
        detail += f'<br><span class="label">error</span> {agent(a.error, limit=300)}'
    if a.note:
        detail += f'<br><span class="label">note</span> {agent(a.note, limit=300)}'
    if a.external_id:
        detail += f'<br><span class="label">external id</span> {agent(a.external_id, limit=120)}'
    if a.versions:  # what the agent said it ran under: its words, escaped
        pinned = ", ".join(f"{text(k)} {agent(v, limit=80)}" for k, v in sorted(a.versions.items()))
        detail += f'<br><span class="label">recorded under</span> {pinned}'
    form = (
        _reconcile_form(prefix, v.run_id, a, csrf) if csrf is not None and to_settle(v, a) else ""
    )
    return (
        f'<div class="card action" id="action-{attr(a.action_id)}">'
        f"{text(a.action_id)} {agent(a.action_key, limit=160)} of type "
        f"{agent(a.action_type, limit=120)}: <strong>{text(status)}</strong>, attempt {text(a.attempt)}"
        f"{origin_label(str(a.origin), a.intercepted_sequence)}{detail}{form}</div>"
    )


def _decide_form(prefix: str, a: ApprovalInfo, csrf: str) -> str:
    return (
        f'<form method="post" action="{attr(prefix)}/decide" class="decide" '
        f'id="decide-{attr(a.id)}">'
        + _hidden("csrf", csrf)
        + _hidden("run_id", a.run_id)
        + _hidden("approval_id", a.id)
        + _hidden("binding", a.binding or "")
        + '<label>reason <input type="text" name="reason" required></label> '
        '<label>scope <select name="scope"><option value="call">this call, once</option>'
        '<option value="run">this action type, rest of the run</option></select></label> '
        + CONFIRM_TOKEN_LABEL
        + (
            '<br><span class="bad">No Allow here: the arguments are too long to show in '
            f"full. Read them and allow with continuum decide {text(a.id)} --allow --reason ... (the CLI)."
            "</span><br>"
            if arguments_cut(a.arguments)
            else '<button type="submit" name="decision" value="allow">Allow</button>'
        )
        + '<button type="submit" name="decision" value="deny">Deny</button></form>'
    )


def _approval(prefix: str, a: ApprovalInfo, csrf: str | None) -> str:
    form = _decide_form(prefix, a, csrf) if csrf is not None and a.pending else ""
    return (
        f'<div class="card approval" id="approval-{attr(a.id)}">{text(a.id)}: '
        f"{agent(a.action_key or a.action_type, limit=160)} of type "
        f"{agent(a.action_type, limit=120)}, {text(a.status)}"
        f"{origin_label(str(a.provenance.origin), a.provenance.sequence)}"
        + (f"<br>key {agent(a.key, limit=200)}" if a.key else "")
        + '<br><span class="label">arguments, in full, as JSON written by the agent</span>'
        + agent_block(a.arguments, "arguments")
        + (
            f'<span class="label">arguments sha256</span> {text(a.arguments_hash)}'
            if a.arguments_hash
            else ""
        )
        + (f'<br><span class="label">asked by</span> {agent(a.rule, limit=300)}' if a.rule else "")
        + form
        + "</div>"
    )


def run_page(
    prefix: str,
    principal: Principal,
    csrf: str,
    v: RunView,
    messages: Sequence[tuple[str, str]] = (),
    *,
    read_only: str | None = None,
) -> str:
    """``read_only``: why nobody may act on this page (no confirm token configured)."""
    s = v.state
    act = csrf if principal.may_act and read_only is None else None
    chain = (
        f'<span class="ok">verified through sequence {text(v.trusted_through)}</span> '
        f"of {text(v.head_sequence)}"
        if v.chain_ok
        else f'<span class="bad">damaged: trusted through sequence {text(v.trusted_through)} of '
        f"{text(v.head_sequence)} ({text(v.violations)} problem(s); run continuum verify)"
        "</span>"
    )
    unresolved = [a for a in v.actions if a.needs_human or a.action_id in v.interrupted]
    goal = agent(s.goal.value, limit=SHOW_CHARS) + provenance(s.goal.provenance) if s.goal else "-"
    plan = ", ".join(agent(step, limit=SHOW_CHARS) for step in s.plan) or "-"
    cut = confirm_cut(s)
    body = [
        _read_only_notice(read_only),
        f'<p class="notice">{text(AGENT_NOTICE)}</p>',
        f"<h2>Run {agent(v.run_id)}</h2>",
        '<table id="summary">',
        f"<tr><th>status</th><td>{text(v.status)}</td></tr>",
        f'<tr><th>verdict</th><td id="verdict">{_verdict(v.verdict)}: {text(v.rationale)}'
        + (
            f"<br>next allowed action: {text(v.next_allowed_action)}"
            if v.next_allowed_action
            else ""
        )
        + "</td></tr>",
        f'<tr><th>chain</th><td id="chain">{chain}</td></tr>',
        f"<tr><th>goal</th><td>{goal}</td></tr>",
        f'<tr><th>progress</th><td id="progress">{_progress(s)}</td></tr>',
        f"<tr><th>plan</th><td>{plan}{provenance(s.plan_provenance)}</td></tr>",
        f"<tr><th>model</th><td>{agent(s.model, limit=SHOW_CHARS) if s.model else '-'}"
        f"{provenance(s.model_provenance)}</td></tr></table>",
    ]
    if act is not None and s.sequence and cut:
        body.append(
            f'<p class="bad" id="no-confirm">No Confirm here: {text(", ".join(cut))} too long '
            f"to show in full. Review and confirm with continuum confirm "
            f"{text(as_typed(v.run_id))} (the CLI).</p>"
        )
    elif act is not None and s.sequence:
        body.append(_confirm_form(prefix, v, act))
    body.append(_family_and_budget(prefix, v))
    body.append("<h2>Evidence, findings, decisions</h2>")
    body.append(
        _items("evidence", s.evidence.values())
        + _items("findings", s.findings.values())
        + _items("decisions", s.decisions.values())
        or "<p>None recorded.</p>"
    )
    body.append(f'<h2 id="unresolved">Unresolved actions ({len(unresolved)})</h2>')
    body += [_action_row(prefix, v, a, act) for a in unresolved] or ["<p>None.</p>"]
    pending = [a for a in v.approvals if a.pending]
    body.append(f'<h2 id="approvals">Approvals waiting ({len(pending)})</h2>')
    body += [_approval(prefix, a, act) for a in pending] or ["<p>None.</p>"]
    body.append(_perception(s))
    settled = [a for a in v.actions if a not in unresolved]
    if settled:
        rows = "".join(
            f"<tr><td>{text(a.action_id)}</td><td>{agent(a.action_key, limit=120)}</td>"
            f"<td>{text(a.status)}{origin_label(str(a.origin), a.intercepted_sequence)}"
            "</td></tr>"
            for a in settled
        )
        body.append(f"<h2>Other actions</h2><table>{rows}</table>")
    if not principal.may_act and read_only is None:
        body.append(
            '<p class="notice">Your role may read only: confirming, reconciling and '
            "deciding need a token with role approve or admin.</p>"
        )
    return document(
        f"continuum: run {terminal_safe(v.run_id)}",
        "".join(body),
        prefix=prefix,
        principal=principal,
        csrf=csrf,
        messages=messages,
    )


def error_page(
    prefix: str,
    message: str,
    code: str,
    hint: str | None,
    principal: Principal | None = None,
    csrf: str | None = None,
    back: str | None = None,
) -> str:
    body = (
        f'<div class="msg error" role="alert"><strong>{text(code)}</strong>: {text(message)}'
        + (f"<br>{text(hint)}" if hint else "")
        + "</div><p>Nothing was recorded.</p>"
        + (f'<p><a href="{attr(back)}">Back</a></p>' if back else "")
    )
    return document("continuum: refused", body, prefix=prefix, principal=principal, csrf=csrf)
