"""Delivering the notification outbox to webhooks, at least once.

The outbox is filled by the store, in the same transaction as the event that calls for
a person (``notices.py``). This module sends it: ``deliver_due`` claims the notifications
that are due, POSTs each to every configured webhook that does not have it yet, and
records the outcome; a failure (an HTTP status other than 2xx, a timeout, a refused
connection) is retried with exponential backoff until ``max_attempts``, then the
notification is ``failed`` until ``continuum outbox retry``. State lives in the store, so
delivery survives restarts and several deliverers may run at once (each claims rows for
a few seconds; a claim that lapses, because its deliverer died, is taken over).

At least once, never exactly once: a receiver may see a notification twice (a deliverer
killed after the POST and before recording it, a lost reply). Every request carries the
notification's stable id twice, as the ``X-Continuum-Delivery`` header (also
``Idempotency-Key``) and as ``delivery_id`` in the JSON body, so a receiver deduplicates
on it. With ``secret_env``, ``X-Continuum-Signature: sha256=<hex>`` is the HMAC-SHA256
of the body under that secret.

Two body formats: ``json`` (the notification itself, ``notices.bounded``) and ``slack``
(a Slack incoming webhook's message, ``notices.slack_message``: agent text escaped by
Slack's rules, no mentions, no unfurling).

Webhooks are configured in ``.continuum/notify.toml`` (in the working directory, and
beside a SQLite store; the webhooks of both apply, a name in both is refused)::

    [[webhook]]
    url = "https://hooks.example.com/continuum"   # http or https only
    name = "ops"                                  # optional (default: scheme://host/path)
    kinds = ["approval_requested"]                # optional: only these kinds
    secret_env = "CONTINUUM_WEBHOOK_SECRET"       # optional: sign the body
    format = "json"                               # optional: "json" (default) or "slack"

    [delivery]                                    # optional, at most one file sets it
    timeout_seconds = 10
    max_attempts = 20
    backoff_seconds = 2
    max_backoff_seconds = 600
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import re
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import SplitResult, urlsplit

from continuum.errors import ContinuumError, UsageError
from continuum.eventlog.notices import KINDS, bounded, slack_message
from continuum.ledger.approval_rules import store_dir
from continuum.log import get_logger
from continuum.store import Storage
from continuum.store.base import format_timestamp
from continuum.store.models import OutboxRow
from continuum.untrusted import check_identifier
from continuum.version import __version__

NOTIFY_FILE = os.path.join(".continuum", "notify.toml")
DELIVERY_HEADER = "X-Continuum-Delivery"
SIGNATURE_HEADER = "X-Continuum-Signature"
MAX_ERROR_CHARS = 300
_WEBHOOK_FIELDS = {"url", "name", "kinds", "secret_env", "format"}
FORMATS = ("json", "slack")  # the notification as JSON; a Slack incoming webhook's message
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_DELIVERY_FIELDS = {"timeout_seconds", "max_attempts", "backoff_seconds", "max_backoff_seconds"}

_log = get_logger("continuum.outbox")


@dataclass(frozen=True)
class Webhook:
    """One receiver. ``url`` is kept out of ``repr`` (and of every name, log and error):
    its path or query may be the receiver's own secret (a chat webhook's token). A
    signing secret is never in the settings: ``secret_env`` names the variable."""

    name: str
    url: str = field(repr=False)
    kinds: tuple[str, ...] = ()  # empty: every kind
    secret_env: str | None = None
    format: str = "json"  # FORMATS: what the body is

    def wants(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds


@dataclass(frozen=True)
class DeliveryPolicy:
    timeout_seconds: float = 10.0
    max_attempts: int = 20
    backoff_seconds: float = 2.0
    max_backoff_seconds: float = 600.0

    def backoff(self, attempts: int) -> float:
        """Seconds before the next try after ``attempts`` failed ones: doubling, capped."""
        return float(
            min(self.backoff_seconds * 2 ** max(attempts - 1, 0), self.max_backoff_seconds)
        )


@dataclass(frozen=True)
class NotifyConfig:
    webhooks: tuple[Webhook, ...] = ()
    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    sources: tuple[str, ...] = ()


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(
        f"notification settings {path}: {where}: {problem}",
        code="outbox.bad_config",
        hint=f"fix {path}; until then nothing is delivered (notifications wait in the outbox)",
        path=path,
    )


def _number(path: str, name: str, value: Any, *, whole: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value <= 0
        or (whole and not isinstance(value, int))
    ):
        kind = "a whole number" if whole else "a number"
        raise _bad(path, "[delivery]", f"{name} must be {kind} above 0")
    return float(value)


def _webhook(path: str, index: int, table: Any) -> Webhook:
    where = f"webhook #{index}"
    if not isinstance(table, dict):
        raise _bad(path, where, "must be a table")
    unknown = sorted(set(table) - _WEBHOOK_FIELDS)
    if unknown:
        raise _bad(
            path,
            where,
            f"unknown field(s) {', '.join(map(repr, unknown))}; a webhook has "
            f"{', '.join(sorted(_WEBHOOK_FIELDS))}",
        )
    url = table.get("url")
    if not isinstance(url, str) or not url:
        raise _bad(path, where, "url is required (an http:// or https:// URL)")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise _bad(path, where, "url holds whitespace or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(path, where, "url must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise _bad(
            path,
            where,
            "url must not hold a user name or password (the settings "
            "file is not a place for secrets); sign requests with "
            'secret_env = "VARIABLE" instead',
        )
    port = _port(path, where, parts)
    # The default name (shown in the outbox, logs and errors) is scheme, host and port and
    # a digest of the whole URL: never its path or query, which may be a secret token.
    tag = hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]
    name = table.get(
        "name", f"{parts.scheme}://{parts.hostname}{':' + str(port) if port else ''}/#{tag}"
    )
    try:
        name = check_identifier(name, what="name", code="outbox.bad_config", hint="")
    except UsageError as e:
        raise _bad(path, where, e.message) from None
    kinds = table.get("kinds", [])
    if not isinstance(kinds, list) or any(k not in KINDS for k in kinds):
        raise _bad(path, where, f"kinds must be a list of {', '.join(KINDS)}")
    secret_env = table.get("secret_env")
    if secret_env is not None and (
        not isinstance(secret_env, str) or not _ENV_NAME.fullmatch(secret_env)
    ):
        # Not echoed: a secret pasted here by mistake must not reach a log or a screen.
        raise _bad(
            path,
            where,
            "secret_env must be the NAME of an environment variable "
            "(letters, digits and _), not the secret itself; put the "
            "secret in that variable",
        )
    body_format = table.get("format", "json")
    if body_format not in FORMATS:
        raise _bad(
            path,
            where,
            f"format must be one of {', '.join(FORMATS)} (json: the notification as JSON; "
            "slack: a Slack incoming webhook's message)",
        )
    return Webhook(
        name=name, url=url, kinds=tuple(kinds), secret_env=secret_env, format=body_format
    )


def _port(path: str, where: str, parts: SplitResult) -> int | None:
    try:
        port = parts.port  # ValueError for a port that is not a number in 0..65535
    except ValueError:
        port = 0
    if port == 0:
        raise _bad(path, where, "url has a port that is not a number from 1 to 65535")
    return port


def parse_notify(text: str, path: str) -> tuple[tuple[Webhook, ...], DeliveryPolicy | None]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, "not valid TOML", str(e)) from e
    unknown = sorted(set(data) - {"webhook", "delivery"})
    if unknown:
        raise _bad(
            path,
            "top level",
            f"unknown key(s) {', '.join(map(repr, unknown))}; write "
            "[[webhook]] tables and an optional [delivery] table",
        )
    tables = data.get("webhook", [])
    if not isinstance(tables, list):
        raise _bad(path, "top level", "webhook must be an array of tables: [[webhook]]")
    webhooks = tuple(_webhook(path, i, t) for i, t in enumerate(tables, 1))
    policy = None
    if "delivery" in data:
        d = data["delivery"]
        if not isinstance(d, dict) or set(d) - _DELIVERY_FIELDS:
            raise _bad(path, "[delivery]", f"holds only {', '.join(sorted(_DELIVERY_FIELDS))}")
        defaults = DeliveryPolicy()
        policy = DeliveryPolicy(
            timeout_seconds=_number(
                path, "timeout_seconds", d.get("timeout_seconds", defaults.timeout_seconds)
            ),
            max_attempts=int(
                _number(
                    path, "max_attempts", d.get("max_attempts", defaults.max_attempts), whole=True
                )
            ),
            backoff_seconds=_number(
                path, "backoff_seconds", d.get("backoff_seconds", defaults.backoff_seconds)
            ),
            max_backoff_seconds=_number(
                path,
                "max_backoff_seconds",
                d.get("max_backoff_seconds", defaults.max_backoff_seconds),
            ),
        )
    return webhooks, policy


def notify_paths(directory: str, store_url: str | None = None) -> list[str]:
    dirs = [os.path.abspath(directory)]
    beside = store_dir(store_url) if store_url else None
    if beside is not None and os.path.abspath(beside) not in dirs:
        dirs.append(os.path.abspath(beside))
    return [os.path.join(d, NOTIFY_FILE) for d in dirs]


def load_notify(paths: Sequence[str]) -> NotifyConfig:
    """The webhooks of every file that exists among ``paths``."""
    webhooks: list[Webhook] = []
    policy: DeliveryPolicy | None = None
    sources: list[str] = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad(path, "not UTF-8", f"byte {e.start}") from e
        found, own = parse_notify(text, path)
        for w in found:
            if any(w.name == other.name for other in webhooks):
                raise _bad(
                    path,
                    f"webhook {w.name!r}",
                    "is configured twice (names identify webhooks: give each its own name)",
                )
        webhooks += found
        if own is not None:
            if policy is not None:
                raise _bad(
                    path, "[delivery]", f"is also set in {sources[-1]}; set it in one file only"
                )
            policy = own
        sources.append(path)
    return NotifyConfig(
        webhooks=tuple(webhooks), policy=policy or DeliveryPolicy(), sources=tuple(sources)
    )


# -- sending --------------------------------------------------------------------------------


def request_body(row: OutboxRow, body_format: str = "json") -> bytes:
    """The POST body as ASCII JSON (agent text arrives ``\\u``-escaped): the notification,
    bounded (``notices.bounded``: a notice stored before the bound existed is cut as it
    is sent), or for ``slack`` its Slack message (``notices.slack_message``). The same
    row gives the same bytes on every try."""
    notice = bounded(row.body)
    message = slack_message(notice) if body_format == "slack" else notice
    return json.dumps(message, ensure_ascii=True, sort_keys=True, separators=(",", ":")).encode(
        "ascii"
    )


def post(
    webhook: Webhook,
    row: OutboxRow,
    *,
    timeout: float,
    attempt: int,
    environ: Mapping[str, str] = os.environ,
) -> str | None:
    """POST ``row`` to ``webhook``: None when it answered 2xx, else what went wrong."""
    body = request_body(row, webhook.format)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"continuum/{__version__}",
        DELIVERY_HEADER: row.delivery_id,
        "Idempotency-Key": row.delivery_id,
        "X-Continuum-Kind": row.kind,
        "X-Continuum-Attempt": str(attempt),
    }
    if webhook.secret_env is not None:
        secret = environ.get(webhook.secret_env)
        if not secret:
            return f"${webhook.secret_env} is not set: not sent unsigned"
        mac = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
        headers[SIGNATURE_HEADER] = f"sha256={mac}"
    parts = urlsplit(webhook.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:  # checked when the settings are read; a Webhook made in code is checked here
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or parts.scheme not in ("http", "https") or not parts.hostname:
        return "outbox.bad_config: the url's scheme, host or port is not valid (fix notify.toml)"
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
    try:
        conn.request("POST", target, body=body, headers=headers)
        response = conn.getresponse()
        response.read(65536)
        if 200 <= response.status < 300:
            return None
        return f"HTTP {response.status} {response.reason}"[:MAX_ERROR_CHARS]
    except (OSError, http.client.HTTPException, ValueError) as e:  # refused, reset, timed
        # out, a bad reply (or a bad address): recorded, never raised; the URL is left out
        return _redacted(f"{type(e).__name__}: {e}", webhook.url)[:MAX_ERROR_CHARS]
    finally:
        conn.close()


def _redacted(text: str, url: str) -> str:
    """``text`` without the webhook's path and query (they may hold its token)."""
    parts = urlsplit(url)
    for secret in (
        parts.path + (f"?{parts.query}" if parts.query else ""),
        parts.path,
        parts.query,
    ):
        if len(secret) > 1:
            text = text.replace(secret, "/***")
    return text


@dataclass
class DeliveryReport:
    """What one pass of ``deliver_due`` did."""

    claimed: int = 0
    delivered: int = 0  # notifications every webhook now has
    retrying: int = 0  # still pending after this attempt
    failed: int = 0  # gave up (max_attempts)
    sent: int = 0  # successful POSTs
    lost: int = 0  # claims that lapsed and were taken over before the result was recorded
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "failed": self.failed,
            "sent": self.sent,
            "lost": self.lost,
            "errors": list(self.errors),
        }


def _now_text(now: float) -> str:
    return format_timestamp(datetime.fromtimestamp(now, UTC))


def deliver_due(
    store: Storage,
    config: NotifyConfig,
    *,
    limit: int = 50,
    clock: Callable[[], float] = time.time,
    sender: Callable[..., str | None] = post,
) -> DeliveryReport:
    """One pass: up to ``limit`` due notifications, each claimed, sent and recorded in turn.

    One at a time, so a claim lasts only as long as one notification's requests: a
    deliverer killed mid-pass holds back one notification, for about
    ``2 * timeout * webhooks + 1`` seconds, until another takes it over.
    """
    report = DeliveryReport()
    if not config.webhooks:
        return report
    policy = config.policy
    lease = 2 * policy.timeout_seconds * len(config.webhooks) + 1.0
    started = clock()  # a pass takes what was due when it began: a retry it scheduled
    for _ in range(limit):  # (after its backoff) is the next pass's, never this one's
        now = clock()
        claimed = store.claim_outbox(started, now + lease, 1)
        if not claimed:
            break
        row = claimed[0]
        report.claimed += 1
        attempt = row.attempts + 1
        delivered = set(row.delivered_to)
        errors: list[str] = []
        for webhook in config.webhooks:
            if webhook.name in delivered or not webhook.wants(row.kind):
                continue
            problem = sender(webhook, row, timeout=policy.timeout_seconds, attempt=attempt)
            if problem is None:
                delivered.add(webhook.name)
                report.sent += 1
            else:
                errors.append(f"{webhook.name}: {problem}")
        after = clock()
        if not errors:
            status, next_attempt = "delivered", after
        elif attempt >= policy.max_attempts:
            status, next_attempt = "failed", after
        else:
            status, next_attempt = "pending", after + policy.backoff(attempt)
        if errors:
            report.errors += [f"{row.delivery_id} {e}" for e in errors]
            _log.warning(
                "outbox.delivery_failed",
                delivery_id=row.delivery_id,
                attempt=attempt,
                status=status,
                errors=errors,
            )
        recorded = store.record_delivery(
            row.delivery_id,
            status=status,
            attempts=attempt,
            next_attempt=next_attempt,
            delivered_to=sorted(delivered),
            last_error="; ".join(errors)[:MAX_ERROR_CHARS] if errors else None,
            delivered_at=_now_text(after) if status == "delivered" else None,
            claim=row,
        )
        if not recorded:
            # Our claim lapsed and another deliverer took the notification over: what it
            # records stands (the receiver deduplicates a copy we may have sent).
            report.lost += 1
            report.errors.append(
                f"{row.delivery_id} claim lapsed before the result was "
                "recorded; another deliverer has it (nothing overwritten)"
            )
            _log.warning("outbox.claim_lost", delivery_id=row.delivery_id, attempt=attempt)
        elif status == "delivered":
            report.delivered += 1
        elif status == "failed":
            report.failed += 1
        else:
            report.retrying += 1
    return report


def deliver_loop(
    store: Storage,
    load: Callable[[], NotifyConfig],
    *,
    stop: threading.Event,
    poll_seconds: float = 2.0,
    clock: Callable[[], float] = time.time,
    on_pass: Callable[[DeliveryReport], None] | None = None,
) -> None:
    """Deliver until ``stop`` is set: a pass, then wait ``poll_seconds`` (at once again
    when a pass was full). The settings are read again on each pass; a malformed file is
    logged and waited out, never a reason to drop a notification."""
    while not stop.is_set():
        try:
            report = deliver_due(store, load(), clock=clock)
        except ContinuumError as e:  # bad settings, a busy or unreachable store: try again
            _log.error("outbox.pass_failed", code=e.code, message=e.message)
            report = DeliveryReport()
        if on_pass is not None:
            on_pass(report)
        if report.claimed < 50:
            stop.wait(poll_seconds)


__all__ = [
    "DELIVERY_HEADER",
    "FORMATS",
    "NOTIFY_FILE",
    "SIGNATURE_HEADER",
    "DeliveryPolicy",
    "DeliveryReport",
    "NotifyConfig",
    "Webhook",
    "deliver_due",
    "deliver_loop",
    "load_notify",
    "notify_paths",
    "parse_notify",
    "post",
    "request_body",
]
