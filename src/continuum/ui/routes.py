"""The operator page's routes (Starlette), mounted under ``UI_PREFIX``.

GET pages read; every change is a POST that carries the session's CSRF token and comes
from this page's own origin (``Origin``, else ``Referer``, must match ``Host``), by a
session whose role may act, and carries the person's confirm token, typed into the form
each time (``ConfirmGate``; contract §5: a bearer token alone never records origin human;
with no confirm token configured the page is read-only). That token is compared only
through the store's counter of wrong ones, the one ``continuum_confirm`` uses over MCP
(``store/confirm_attempts.py``): a wrong one is counted for the store, a backoff or the
lock refuses without comparing. Confirm, reconcile and decide call the facade exactly as
``continuum confirm|reconcile|decide`` do, with origin human: confirm covers the sequence
and event hash that were shown (and refuses if the run moved on since), decide is bound
to the call that was shown (``expect_binding``). Anything refused records nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from continuum.errors import ContinuumError, UsageError
from continuum.eventlog.payloads import via_of
from continuum.log import get_logger
from continuum.runtime.facade import Continuum
from continuum.store.base import MAX_PAGE
from continuum.store.confirm_attempts import LOCK_AFTER, ConfirmAttempt
from continuum.types import ActionStatus, Origin
from continuum.ui import page
from continuum.ui.sessions import (
    COOKIE_NAME,
    MAX_AGE_SECONDS,
    Authenticator,
    ConfirmGate,
    Session,
    Sessions,
)
from continuum.untrusted import as_typed, unsafe_characters

__all__ = ["UI_PREFIX", "operator_routes", "ui_paths"]

UI_PREFIX = "/ui"
MAX_FORM_BYTES = 64 * 1024
MAX_RUNS_LISTED = 200
MAX_CONFIRM_FAILURES = 5  # wrong confirm tokens before the session is logged out
CONFIRM_FIELD = "confirm_token"
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
_PAGES = ("/", "/login", "/logout", "/run", "/confirm", "/reconcile", "/decide", "/style.css")

_log = get_logger("continuum.ui")


def ui_paths(prefix: str = UI_PREFIX) -> list[str]:
    """The exact paths the page serves (they check their own credentials)."""
    return [prefix + p for p in _PAGES] + [prefix]


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _same_origin(request: Request) -> bool:
    """The POST came from a page of this server: its Origin (or, without one, Referer)
    names the host the request was sent to. Neither header: refused (fail closed)."""
    host = request.headers.get("host")
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or not source or source == "null":
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc == host


def operator_routes(
    store_url: str,
    authenticate: Authenticator,
    *,
    confirm: ConfirmGate,
    secure: bool,
    prefix: str = UI_PREFIX,
) -> list[BaseRoute]:
    """The page's routes over the store at ``store_url``; ``confirm``: the person's confirm
    token every change needs (none configured: read-only); ``secure``: served over TLS
    (the session cookie is then ``Secure``)."""
    sessions = Sessions()
    read_only = (
        None
        if confirm.enabled
        else f"this page is read-only: no confirm token is configured ({confirm.setting})"
    )

    def runtime(origin: Origin = Origin.DETERMINISTIC) -> Continuum:
        return Continuum.open(store_url, create=False, origin=origin)

    def session_of(request: Request) -> tuple[str | None, Session | None]:
        sid = request.cookies.get(COOKIE_NAME)
        return sid, sessions.get(sid)

    def back_to_login() -> Response:
        return RedirectResponse(f"{prefix}/", status_code=303, headers=SECURITY_HEADERS)

    async def form_of(request: Request) -> dict[str, str]:
        length = request.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > MAX_FORM_BYTES:
            raise _Refused(413, "ui.form_too_large", "the form is missing a length or is too large")
        if (
            request.headers.get("content-type", "").split(";")[0].strip()
            != "application/x-www-form-urlencoded"
        ):
            raise _Refused(415, "ui.bad_form", "a form must be sent url-encoded")
        form = await request.form()
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def refused(
        e: _Refused | ContinuumError, session: Session | None, back: str | None
    ) -> Response:
        status = (
            e.status
            if isinstance(e, _Refused)
            else (
                404
                if e.code.startswith("not_found")
                else 400
                if e.code.startswith("usage.")
                else 409
            )
        )
        principal = session.principal if session is not None else None
        csrf = session.csrf if session is not None else None
        return _html(
            page.error_page(prefix, e.message, e.code, e.hint, principal, csrf, back), status
        )

    async def home(request: Request) -> Response:
        _, session = session_of(request)
        if session is None:
            return _html(page.login_page(prefix))

        def rows() -> tuple[list[page.RunRow], int, int]:
            """Runs waiting for a person (pending approvals, unresolved actions) first, then
            the rest, newest first, at most ``MAX_RUNS_LISTED``: a flood of new runs cannot
            push one that waits off the page. Also: how many are not shown, and how many
            of those wait for a person."""
            with runtime() as rt:
                every = list(reversed(rt.runs()))
                waiting: dict[str, int] = {}
                for a in rt.approvals(limit=MAX_PAGE):
                    waiting[a.run_id] = waiting.get(a.run_id, 0) + 1
                unresolved: dict[str, int] = {}
                for r in every:
                    # Open actions come first in a page: one page holds them.
                    opened = rt.actions_page(r.run_id, limit=MAX_PAGE).actions
                    count = sum(1 for a in opened if a.needs_human)
                    if count:
                        unresolved[r.run_id] = count
                first = [r for r in every if r.run_id in waiting or r.run_id in unresolved]
                rest = [r for r in every if r.run_id not in waiting and r.run_id not in unresolved]
                runs = (first + rest)[:MAX_RUNS_LISTED]
                out = []
                for r in runs:
                    try:
                        verdict = str(rt.resume(r.run_id).mode)
                    except ContinuumError as e:
                        verdict = f"error: {e.code}"
                    out.append(
                        page.RunRow(
                            r.run_id,
                            r.goal,
                            str(r.status),
                            r.head_sequence,
                            r.created_at,
                            verdict,
                            waiting.get(r.run_id, 0),
                            unresolved.get(r.run_id, 0),
                        )
                    )
                return out, len(every) - len(runs), max(0, len(first) - len(runs))

        try:
            found, more, more_waiting = await run_in_threadpool(rows)
        except ContinuumError as e:
            return refused(e, session, None)
        return _html(
            page.runs_page(
                prefix,
                session.principal,
                session.csrf,
                found,
                session.take_messages(),
                more=more,
                more_waiting=more_waiting,
                read_only=read_only,
            )
        )

    async def login(request: Request) -> Response:
        if request.method != "POST":
            return back_to_login()
        if not _same_origin(request):
            return _html(
                page.login_page(
                    prefix, "refused: the form was not sent from this page (Origin/Referer)"
                ),
                403,
            )
        try:
            form = await form_of(request)
        except _Refused as e:
            return refused(e, None, f"{prefix}/")
        principal = authenticate(form.get("token", "").strip())
        if principal is None:
            with suppress(Exception):
                _log.warning(
                    "ui.login_refused", peer=request.client.host if request.client else None
                )
            return _html(page.login_page(prefix, "that token is not valid for this server"), 401)
        sid, _ = sessions.open(principal)
        with suppress(Exception):
            _log.info("ui.login", role=principal.role, token=principal.label)
        response = RedirectResponse(f"{prefix}/", status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE_NAME,
            sid,
            max_age=MAX_AGE_SECONDS,
            path=prefix or "/",
            secure=secure,
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(request: Request) -> Response:
        sid, session = session_of(request)
        if request.method == "POST" and session is not None and _same_origin(request):
            with suppress(_Refused):
                if session.csrf_ok((await form_of(request)).get("csrf")):
                    sessions.close(sid)
        response = back_to_login()
        response.delete_cookie(
            COOKIE_NAME, path=prefix or "/", secure=secure, httponly=True, samesite="strict"
        )
        return response

    def view(run_id: str) -> page.RunView:
        with runtime() as rt:
            run = rt.store.get_run(run_id)
            evaluation = rt.evaluate(run_id)
            report = rt.verify(run_id)
            return page.RunView(
                run_id=run_id,
                status=str(run.status),
                state=evaluation.state,
                verdict=str(evaluation.decision.mode),
                rationale=evaluation.decision.reason,
                next_allowed_action=evaluation.decision.next_allowed_action,
                chain_ok=report.ok,
                trusted_through=report.trusted_through,
                head_sequence=run.head_sequence,
                violations=len(report.violations),
                actions=rt.actions(run_id),
                interrupted=frozenset(rt.interrupted(run_id)),
                approvals=rt.approvals(run_id),
            )

    async def run_page(request: Request) -> Response:
        _, session = session_of(request)
        if session is None:
            return back_to_login()
        run_id = request.query_params.get("id", "")
        try:
            shown = await run_in_threadpool(view, run_id)
        except ContinuumError as e:
            return refused(e, session, f"{prefix}/")
        return _html(
            page.run_page(
                prefix,
                session.principal,
                session.csrf,
                shown,
                session.take_messages(),
                read_only=read_only,
            )
        )

    def counted(run_id: str, presented: str, session: Session) -> ConfirmAttempt:
        """The store's counter decides whether ``presented`` is compared at all, and
        counts a wrong one (blocking store I/O: called on a worker thread)."""
        with runtime() as rt:
            return rt.store.confirm_attempt(
                run_id,
                lambda: confirm.accepts(presented),
                channel="page",
                caller=session.principal.label,
                now=time.time(),
            )

    async def check_confirm_token(form: dict[str, str], sid: str | None, session: Session) -> None:
        """The person's confirm token, typed into this form (never kept, logged or shown
        again): compared in constant time, through the store's counter; none configured,
        none given, a wrong one, a backoff or the lock is a refusal. Repeated wrong ones
        also log the session out."""
        presented = form.pop(CONFIRM_FIELD, "")
        if not confirm.enabled:
            raise _Refused(
                403,
                "ui.read_only",
                "this page is read-only: no confirm token is configured",
                f"set {confirm.setting} for the server (a secret of its own, not a token of "
                "the token file), or use the continuum CLI on the store's machine",
            )
        if not presented:
            raise _Refused(
                403,
                "ui.confirm_token_missing",
                "the form carries no confirm token",
                "type the person's confirm token into the form's confirm token field",
            )
        attempt = await run_in_threadpool(counted, form.get("run_id", ""), presented, session)
        unlock = (
            "a person must run `continuum confirm-token unlock` at a terminal on the "
            "store's machine (`continuum confirm-token status` says who tried)"
        )
        if attempt.verdict == "no_run":
            raise _Refused(
                404, "ui.run_not_found", "that run is not in this store", "reload the page"
            )
        if attempt.verdict == "locked":
            raise _Refused(
                403,
                "ui.confirm_locked",
                f"confirming with the confirm token is locked for this store after "
                f"{LOCK_AFTER} wrong tokens in a row; the token was not checked",
                unlock,
            )
        if attempt.verdict == "waiting":
            raise _Refused(
                429,
                "ui.confirm_backoff",
                f"{attempt.failures} wrong confirm tokens in a row for this store: no token "
                f"is checked for another {attempt.wait_seconds} s",
                f"wait, then type the confirm token configured in {confirm.setting}",
            )
        if not attempt.accepted:
            session.confirm_failures += 1
            if session.confirm_failures >= MAX_CONFIRM_FAILURES:
                sessions.close(sid)
            raise _Refused(
                403,
                "ui.confirm_token_mismatch",
                f"the confirm token is not valid ({attempt.failures} wrong in a row for "
                "this store)",
                f"type the confirm token configured in {confirm.setting}; after "
                f"{MAX_CONFIRM_FAILURES} wrong ones in a row the session is logged out, "
                f"after {LOCK_AFTER} confirming here and over MCP is locked until {unlock}",
            )
        session.confirm_failures = 0

    def acting(
        work: Callable[[dict[str, str], Session], str],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST that changes something: session, role, origin, CSRF token and the
        person's confirm token checked (in that order) before the form is used; then
        ``work`` (in a thread) says what was recorded, shown once on the run's page."""

        async def endpoint(request: Request) -> Response:
            sid, session = session_of(request)
            if request.method != "POST":
                return back_to_login()
            if session is None:
                return refused(
                    _Refused(
                        401, "ui.not_logged_in", "log in first", "your session may have expired"
                    ),
                    None,
                    f"{prefix}/",
                )
            back = f"{prefix}/"
            try:
                if not session.principal.may_act:
                    raise _Refused(
                        403,
                        "ui.role_denied",
                        f"role {session.principal.role!r} may read only",
                        "confirm, reconcile and decide need a token with role approve or admin",
                    )
                if not _same_origin(request):
                    raise _Refused(
                        403,
                        "ui.cross_origin",
                        "the form was not sent from this page (Origin/Referer do not match)",
                        "use the page itself",
                    )
                form = await form_of(request)
                if not session.csrf_ok(form.get("csrf")):
                    raise _Refused(
                        403,
                        "ui.csrf",
                        "the form's CSRF token is missing or wrong",
                        "reload the page and submit again",
                    )
                back = page.run_url(prefix, form.get("run_id", ""))
                await check_confirm_token(form, sid, session)
                done = await run_in_threadpool(work, form, session)
            except (_Refused, ContinuumError) as e:
                with suppress(Exception):
                    _log.warning(
                        "ui.refused",
                        path=request.url.path,
                        code=e.code,
                        role=session.principal.role,
                        token=session.principal.label,
                    )
                return refused(e, session, back)
            session.flash("ok", done)
            with suppress(Exception):
                _log.info(
                    "ui.recorded",
                    path=request.url.path,
                    role=session.principal.role,
                    token=session.principal.label,
                )
            return RedirectResponse(back, status_code=303, headers=SECURITY_HEADERS)

        return endpoint

    def confirm_run(form: dict[str, str], session: Session) -> str:
        run_id, scope = form.get("run_id", ""), form.get("scope", "default")
        seq_text, shown_hash = form.get("through_sequence", ""), form.get("head_hash") or None
        if not seq_text.isdigit() or int(seq_text) < 1:
            raise UsageError(
                "the form does not say which sequence was reviewed",
                code="usage.bad_sequence",
                hint="reload the run's page",
            )
        seq = int(seq_text)
        with runtime(Origin.HUMAN) as rt:
            head = rt.store.get_run(run_id).head_sequence
            if head != seq:
                raise UsageError(
                    f"the run moved on to sequence {head} since the page showed sequence {seq}",
                    code="ui.run_moved",
                    hint="review the run again and confirm what is shown now",
                )
            cut = page.confirm_cut(rt.state(run_id))
            if cut:
                # What a person confirms must all have been on the page (contract §5).
                raise UsageError(
                    f"the page cannot show all of what this confirms ({', '.join(cut)} too "
                    "long), so it does not confirm it",
                    code="ui.too_long_to_show",
                    hint=f"review and confirm it with `continuum confirm {as_typed(run_id)}` "
                    "(the CLI)",
                )
            result = rt.confirm(
                run_id,
                scope=scope,
                through_sequence=seq,
                expect_hash=shown_hash,
                via=_via(session),
            )
        return (
            f"confirmed {', '.join(result.scope)} through sequence {result.through_sequence} "
            f"(event hash {(result.through_hash or '-')[:12]}) as human"
        )

    def reconcile(form: dict[str, str], session: Session) -> str:
        occurred = {"yes": True, "no": False}.get(form.get("occurred", ""))
        if occurred is None:
            raise UsageError(
                "say whether it happened",
                code="usage.missing_option",
                hint="choose 'it DID happen' or 'it did NOT happen'",
            )
        run_id, action_id = form.get("run_id", ""), form.get("action_id", "")
        external_id, note = form.get("external_id") or None, form.get("note") or None
        for what, value in (("the note", note), ("the external id", external_id)):
            bad = unsafe_characters(value or "")
            if bad:
                raise UsageError(
                    f"{what} holds control, bidi or invisible characters ({', '.join(bad)})",
                    code="usage.bad_note",
                    hint="write it as one line of plain text",
                )
        attempt = form.get("attempt", "")
        if not attempt.isdigit():
            raise UsageError(
                "the form does not say which attempt was shown",
                code="usage.bad_attempt",
                hint="reload the run's page",
            )
        with runtime(Origin.HUMAN) as rt:
            current = next((a for a in rt.actions(run_id) if a.action_id == action_id), None)
            if current is not None:
                if current.attempt != int(attempt):
                    raise UsageError(
                        f"action {action_id} is at attempt {current.attempt} now; the page "
                        f"showed attempt {attempt}",
                        code="ui.action_changed",
                        hint="reload the run's page and check the action again",
                    )
                if current.status == ActionStatus.STARTED and action_id not in rt.interrupted(
                    run_id
                ):
                    raise UsageError(
                        f"action {action_id} is in progress: a live process or session owns it",
                        code="ui.action_in_progress",
                        hint="wait until it is settled or its owner is gone",
                    )
            rec = rt.reconcile(
                run_id,
                action_id,
                occurred=occurred,
                external_id=external_id,
                note=note,
                via=_via(session),
            )
        return f"action {rec.action_id} is now {rec.status} (recorded as human)"

    def decide(form: dict[str, str], session: Session) -> str:
        allow = {"allow": True, "deny": False}.get(form.get("decision", ""))
        if allow is None:
            raise UsageError(
                "say what you decide: allow or deny",
                code="usage.missing_option",
                hint="press Allow or Deny",
            )
        reason = form.get("reason", "").strip()
        if not reason:
            raise UsageError(
                "a decision needs a reason",
                code="usage.bad_reason",
                hint="say why; it is recorded with the decision",
            )
        with runtime(Origin.HUMAN) as rt:
            shown = rt.approval(form.get("approval_id", ""), run_id=form.get("run_id") or None)
            if allow and page.arguments_cut(shown.arguments):
                # Allow covers every argument: the page allows only what it showed in full.
                raise UsageError(
                    "the arguments are too long for the page to show in full, so it does not "
                    "allow them",
                    code="ui.too_long_to_show",
                    hint=f"read them and decide with `continuum decide {shown.id} --allow` (the "
                    "CLI), or deny here",
                )
            decided = rt.decide(
                shown.id,
                allow=allow,
                reason=reason,
                scope=form.get("scope", "call"),
                run_id=shown.run_id,
                expect_binding=form.get("binding") or None,
                via=_via(session),
            )
        return (
            f"approval {decided.id} is now {decided.status}"
            + (f" ({decided.scope})" if decided.scope else "")
            + " (recorded as human)"
        )

    async def style(_request: Request) -> Response:
        return Response(page.STYLE, media_type="text/css", headers=SECURITY_HEADERS)

    async def bare(_request: Request) -> Response:
        return RedirectResponse(f"{prefix}/", status_code=308, headers=SECURITY_HEADERS)

    both: Sequence[str] = ("GET", "POST")
    routes: list[BaseRoute] = [
        Route(f"{prefix}/", home, methods=["GET"]),
        Route(f"{prefix}/login", login, methods=both),
        Route(f"{prefix}/logout", logout, methods=both),
        Route(f"{prefix}/run", run_page, methods=["GET"]),
        Route(f"{prefix}/confirm", acting(confirm_run), methods=both),
        Route(f"{prefix}/reconcile", acting(reconcile), methods=both),
        Route(f"{prefix}/decide", acting(decide), methods=both),
        Route(f"{prefix}/style.css", style, methods=["GET"]),
    ]
    if prefix:
        routes.append(Route(prefix, bare, methods=["GET"]))
    return routes


def _via(session: Session) -> dict[str, str]:
    """How a decision given on this page is recorded: the page and the signed-in token's role."""
    return via_of("page", role=session.principal.role)
