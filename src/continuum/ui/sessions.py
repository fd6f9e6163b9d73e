"""Operator sessions: who is logged in (server-side), their CSRF token, their messages.

The browser holds only a random session id in a cookie (HttpOnly, SameSite=Strict,
Secure under TLS, scoped to the page's path): never the token, which is POSTed once in
the log-in form and then only its grant (role, token-file line) is kept.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE_NAME = "continuum_ui"
IDLE_SECONDS = 30 * 60
MAX_AGE_SECONDS = 12 * 60 * 60
MAX_SESSIONS = 1024
MAX_MESSAGES = 5


@dataclass(frozen=True)
class Principal:
    """Who a token belongs to: its role, whether that role may act (confirm, reconcile,
    decide), and a handle an operator recognises (never the token)."""

    role: str
    may_act: bool
    label: str


Authenticator = Callable[[str], Principal | None]
"""A presented token -> its ``Principal``, or None for a token that is not valid."""


@dataclass(frozen=True)
class ConfirmGate:
    """The person's own confirm token, which every confirm, reconcile and decide form must
    carry besides the session (contract §5: a bearer token alone never records origin
    ``human``). ``check`` compares a presented value in constant time (None: no confirm
    token is configured, and the page is read-only); ``setting`` names where it is
    configured, for messages (never the value)."""

    check: Callable[[str], bool] | None
    setting: str

    @property
    def enabled(self) -> bool:
        return self.check is not None

    def accepts(self, presented: str | None) -> bool:
        """Fail closed: no check configured, or nothing presented, is a refusal."""
        return self.check is not None and bool(presented) and self.check(presented or "")


@dataclass
class Session:
    principal: Principal
    csrf: str
    created: float
    seen: float
    messages: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)
    confirm_failures: int = 0  # wrong confirm tokens presented in this session

    def flash(self, kind: str, text: str) -> None:
        self.messages = [*self.messages, (kind, text)][-MAX_MESSAGES:]

    def take_messages(self) -> list[tuple[str, str]]:
        out, self.messages = self.messages, []
        return out

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            self.csrf.encode(), presented.encode("utf-8", "replace")
        )


class Sessions:
    """Logged-in sessions in memory (a restart logs everyone out), oldest dropped first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock

    def open(self, principal: Principal) -> tuple[str, Session]:
        now = self._clock()
        sid = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._by_id[sid] = session
            while len(self._by_id) > MAX_SESSIONS:
                self._by_id.popitem(last=False)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = self._clock()
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if now - session.seen > IDLE_SECONDS or now - session.created > MAX_AGE_SECONDS:
                del self._by_id[sid]
                return None
            session.seen = now
            return session

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._by_id.pop(sid, None)
