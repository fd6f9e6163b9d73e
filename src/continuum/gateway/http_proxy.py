"""The HTTP gateway: an ASGI app in base-URL mode. An agent calls
``http://GATEWAY/NAME/rest``; the gateway forwards to the ``[[upstream]]`` NAME's URL plus
``/rest``. A request an ``[[effect]]`` rule matches goes through the ledger:

1. ``Continuum.intercept`` with the rule's action type and key; only ``proceed`` forwards.
   A completed action is answered from the ledger (its stored status and body, header
   ``Continuum-Replayed: true``) and upstream is not called; an unknown one is refused
   (409) with the ``continuum reconcile`` command a person runs.
2. Settled from what came back: 2xx completes it (status, chosen headers and a body of up
   to ``STORED_BODY_BYTES``); 4xx fails it for certain (a retry may run); a request that
   never left (connection refused) too; 5xx, 3xx, a timeout, a lost connection or a reply
   that is not HTTP leave it ``unknown``.

Other requests to a declared upstream pass through untouched; an undeclared name is
refused (403). While the store is unusable, registered requests are refused (503, fail
closed) and the others still pass. Facade calls run in a worker thread, one at a time.

Imports the facade, the rest of the gateway's HTTP modules, serving.server (send_json)
and the leaves.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import anyio
import anyio.to_thread
import httpx2
from starlette.types import Receive, Scope, Send

from continuum.errors import ContinuumError, LedgerError, StoreError, UsageError
from continuum.faults import fault_point
from continuum.gateway.http_answers import (
    GatewayRefusal,
    StreamCut,
    forwarded,
    header,
    json_body,
    read_body,
    replay,
    returned,
    stored_response,
    upstream_error,
)
from continuum.gateway.http_rules import EffectRule, HttpRules, MissingKey, Upstream, effect_key
from continuum.ledger.gate import InterceptResult
from continuum.log import get_logger
from continuum.runtime.facade import Continuum
from continuum.serving.server import send_json
from continuum.serving.tokens import Grant, Role, TokenTable
from continuum.store import is_postgres_url, sqlite_path_from_url
from continuum.types import InterceptStatus

_log = get_logger("continuum.gateway.http")
T = TypeVar("T")

STORE_RETRY_SECONDS = 1.0  # an unusable store is opened again at most this often
BUFFERED_BYTES = 1024 * 1024  # a pass-through answer up to this size is read whole first
LEASE_RENEW_SECONDS = 10.0  # a third of the ledger's default lease (30 s)
# Refused: paths the upstream may read as another path than the rules did.
_AMBIGUOUS = ("%2f", "%5c", "%2e", "\\")


class HttpGateway:
    """The ASGI app of ``continuum gateway http``."""

    def __init__(
        self,
        rules: HttpRules,
        *,
        db_url: str,
        run_id: str,
        ready: Callable[[], None] | None = None,
        tokens: TokenTable | None = None,
    ) -> None:
        self.rules, self.db_url, self.run_id, self.ready = rules, db_url, run_id, ready
        # None: any client that reaches the listener may call (loopback); else every
        # request presents ``Proxy-Authorization: Bearer TOKEN`` (never forwarded), and an
        # effect needs a token of role submit or above.
        self.tokens = tokens
        self._cx: Continuum | None = None
        self._store_problem: Exception | None = None
        self._problem_code: str | None = None  # logged once per kind of problem
        self._next_open = 0.0
        self._limiter = anyio.CapacityLimiter(1)  # one facade call at a time
        self._client: httpx2.AsyncClient | None = None
        self.reconcile_db = (
            f"--db {shlex.quote(str(sqlite_path_from_url(db_url).resolve()))} "
            if not is_postgres_url(db_url)
            else ""
        )

    # -- the store ----------------------------------------------------------------------

    def open_store(self) -> Continuum | None:
        """The facade, opened (and the gateway's run started) on first use; None while the
        store cannot be opened (tried again at most every ``STORE_RETRY_SECONDS``)."""
        if self._cx is not None:
            return self._cx
        now = time.monotonic()
        if now < self._next_open:
            return None
        self._next_open = now + STORE_RETRY_SECONDS
        try:
            cx = Continuum.open(self.db_url)
            try:
                cx.start_run(self.run_id, goal="continuum gateway http")
            except UsageError as e:
                if e.code != "usage.run_exists":
                    cx.close()
                    raise
        except Exception as e:  # any reason the store cannot serve: fail closed, say why once
            code = str(getattr(e, "code", type(e).__name__))
            if self._problem_code != code:
                _log.error("gateway.store_unusable", code=code, error=str(e))
            self._store_problem, self._problem_code = e, code
            return None
        if self._problem_code is not None:
            _log.warning("gateway.store_usable_again")
        self._cx, self._store_problem, self._problem_code = cx, None, None
        return cx

    def close(self) -> None:
        if self._cx is not None:
            self._cx.close()
            self._cx = None

    async def _ledger(self, call: Callable[[Continuum], T]) -> T:
        """Run ``call`` on the facade in a worker thread; a store that cannot serve it is a
        503 refusal (fail closed)."""

        def work() -> T:
            cx = self.open_store()
            if cx is None:
                raise self._unusable(self._store_problem)
            try:
                return call(cx)
            except (StoreError, OSError) as e:
                # The connection may be broken for good: open a fresh one next time.
                self.close()
                raise self._unusable(e) from e
            except (UsageError, LedgerError) as e:
                raise GatewayRefusal(
                    400 if isinstance(e, UsageError) else 409, e.code, e.message, e.hint
                ) from e
            except Exception as e:  # integrity or anything unforeseen: fail closed
                _log.error("gateway.ledger_error", error=type(e).__name__, detail=str(e))
                raise self._unusable(e) from e

        return await anyio.to_thread.run_sync(work, limiter=self._limiter)

    def _unusable(self, e: BaseException | None) -> GatewayRefusal:
        code = getattr(e, "code", type(e).__name__) if e is not None else "store.unavailable"
        refusal = GatewayRefusal(
            503,
            "gateway.store_unusable",
            "the gateway's store cannot record this request now, so it is not forwarded "
            f"({code}); requests that are not effects still pass",
            "retry later; an operator should check the store the gateway was started with "
            "(continuum where / continuum verify)",
            store_error=code,
        )
        refusal.headers.append((b"retry-after", b"1"))
        return refusal

    # -- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            await self._handle(scope, receive, send)
        except GatewayRefusal as r:
            await send_json(send, r.status, r.body(), r.headers)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        renewer: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client = httpx2.AsyncClient(
                    follow_redirects=False,
                    trust_env=False,
                    limits=httpx2.Limits(max_connections=256, max_keepalive_connections=64),
                )
                self._client.headers.clear()  # forward the agent's headers, add none
                await anyio.to_thread.run_sync(self.open_store, limiter=self._limiter)
                renewer = asyncio.create_task(self._renew_leases())
                if self.ready is not None:
                    self.ready()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if renewer is not None:
                    renewer.cancel()
                if self._client is not None:
                    await self._client.aclose()
                await anyio.to_thread.run_sync(self.close, limiter=self._limiter)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _renew_leases(self) -> None:
        """Keep the lease of every effect in flight fresh: a gateway on another host sees
        only the lease, and must not judge a slow upstream call interrupted."""
        while True:
            await anyio.sleep(LEASE_RENEW_SECONDS)
            with suppress(GatewayRefusal):
                await self._ledger(lambda cx: cx.ledger.renew_held_leases())

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        raw_path = scope.get("raw_path") or path.encode()
        raw = raw_path.decode("latin-1")
        segments = path.split("/")
        if any(s in (".", "..") for s in segments) or any(a in raw.lower() for a in _AMBIGUOUS):
            raise GatewayRefusal(
                400,
                "gateway.ambiguous_path",
                "the path has '.' or '..' segments or an encoded '/', '\\' or '.', which an "
                "upstream may read as another path than the gateway's rules did",
                "send the path in its plain form",
            )
        grant = self._grant(scope)
        name = segments[1] if len(segments) > 1 else ""
        upstream = self.rules.upstreams.get(name)
        if upstream is None:
            raise GatewayRefusal(
                403,
                "gateway.unknown_upstream",
                f"no upstream is named {name!r}: the gateway forwards only to the "
                "upstreams its rules declare",
                "call http://GATEWAY/NAME/... with NAME one of: "
                + ", ".join(sorted(self.rules.upstreams))
                + " (or ask an operator to declare it with an [[upstream]] in the rules)",
                upstreams=sorted(self.rules.upstreams),
            )
        rest = raw[len(name) + 1 :]  # the raw path after /NAME, kept as sent
        rest_decoded = path[len(name) + 1 :] or "/"
        query = scope.get("query_string", b"").decode("latin-1")
        method: str = scope["method"]
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        body = await read_body(receive)
        found = self.rules.find(name, method, rest_decoded)
        url = upstream.target(rest, query)
        if found is None:
            await self._pass_through(upstream, method, url, headers, body, send)
            return
        rule, groups = found
        if grant is not None and grant.role is Role.READ:
            raise GatewayRefusal(
                403,
                "gateway.role",
                f"this request is an effect ({rule.where}) and the token presented "
                f"(line {grant.line} of the token file) has the read role",
                "use a token of role submit (or above) for effects",
            )
        await self._effect(
            upstream, rule, groups, method, url, rest_decoded, query, headers, body, send
        )

    def _grant(self, scope: Scope) -> Grant | None:
        """The request's grant when tokens are set (None when they are not); a missing or
        unknown token is refused (407) before anything else is looked at."""
        if self.tokens is None:
            return None
        presented = None
        for k, v in scope["headers"]:
            if k.lower() == b"proxy-authorization":
                scheme, _, value = v.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    presented = value.strip()
        grant = self.tokens.lookup(presented) if presented else None
        if grant is None:
            refusal = GatewayRefusal(
                407,
                "gateway.auth_required" if presented is None else "gateway.auth_bad_token",
                "this gateway needs a token: none was presented"
                if presented is None
                else "the token presented is not in the gateway's token file",
                "send Proxy-Authorization: Bearer TOKEN with a token from the file the "
                "gateway was started with (--token-file); it is not forwarded upstream",
            )
            refusal.headers.append((b"proxy-authenticate", b'Bearer realm="continuum gateway"'))
            raise refusal
        return grant

    # -- a request no rule names --------------------------------------------------------

    async def _pass_through(
        self,
        upstream: Upstream,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Send,
    ) -> None:
        assert self._client is not None
        request = self._client.build_request(
            method, url, headers=forwarded(headers), content=body, timeout=upstream.timeout
        )
        try:
            response = await self._client.send(request, stream=True)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) <= BUFFERED_BYTES:
                # A small answer whole: one write for its body, and a clean 502 if it breaks.
                try:
                    content = b"".join([chunk async for chunk in response.aiter_raw()])
                finally:
                    await response.aclose()
                start = {"status": response.status_code, "headers": returned(response)}
                await send({"type": "http.response.start", **start})
                await send({"type": "http.response.body", "body": content})
                return
        except httpx2.HTTPError as e:
            raise upstream_error(upstream, e, None) from e
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": returned(response),
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except httpx2.HTTPError as e:
            _log.warning("gateway.upstream_lost", upstream=upstream.name, error=type(e).__name__)
            raise StreamCut(upstream.name) from e
        finally:
            await response.aclose()

    # -- a registered request -----------------------------------------------------------

    async def _effect(
        self,
        upstream: Upstream,
        rule: EffectRule,
        groups: dict[str, str],
        method: str,
        url: str,
        rest: str,
        query: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Send,
    ) -> None:
        assert self._client is not None
        idem = header(headers, b"idempotency-key")
        try:
            key = effect_key(rule, groups, dict(parse_qsl(query)), json_body(body), idem)
        except MissingKey as e:
            raise GatewayRefusal(
                428,
                "gateway.key_required",
                f"{method} /{upstream.name}{rest} is an effect ({rule.where}, action type "
                f"{rule.action_type!r}) and the request has no {e.missing} for its key",
                "send an Idempotency-Key header with a value unique to this effect (the "
                "same value on a retry of the same effect)"
                if rule.key is None
                else f"send the fields of the key template {rule.key!r}",
                rule=rule.where,
                missing=e.missing,
            ) from None
        arguments = {
            "method": method,
            "upstream": upstream.name,
            "path": rest,
            # digests, not the text: a body or a query may carry secrets
            "query_sha256": hashlib.sha256(query.encode()).hexdigest() if query else None,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        result: InterceptResult = await self._ledger(
            lambda cx: cx.intercept(
                self.run_id, rule.action_type, arguments, key=key, replay=rule.replay
            )
        )
        marks = [(b"continuum-action", result.action_key.encode("utf-8", "replace"))]
        if not result.proceed:
            if result.status == InterceptStatus.COMPLETED:
                await replay(send, result, marks)
                return
            raise self._not_forwarded(result, marks)
        request = self._client.build_request(
            method, url, headers=forwarded(headers), content=body, timeout=upstream.timeout
        )
        try:
            response = await self._client.send(request, stream=True)
            try:
                content = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        except httpx2.HTTPError as e:
            await self._settle_error(result, upstream, e)
            raise upstream_error(upstream, e, result.action_key) from e
        fault_point("gateway_http_after_forward")  # crash tests: sent, not yet recorded
        status = response.status_code
        recorded = await self._settle(result, status, response, content)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *returned(response),
                    *marks,
                    (b"continuum-recorded", recorded.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})

    async def _settle(
        self, result: InterceptResult, status: int, response: httpx2.Response, content: bytes
    ) -> str:
        """Record what the upstream's answer says happened; returns the action's status (or
        ``not_recorded`` when the store refused: the action stays started, then unknown)."""
        key = result.action_key
        try:
            if 200 <= status < 300:
                stored = stored_response(status, response, content)
                await self._ledger(lambda cx: cx.complete(self.run_id, key, result=stored))
                return "completed"
            if 400 <= status < 500:
                error = f"upstream answered {status}"
                await self._ledger(lambda cx: cx.fail(self.run_id, key, error=error, certain=True))
                return "failed"
            error = f"upstream answered {status}: the effect may or may not have happened"
            await self._ledger(lambda cx: cx.fail(self.run_id, key, error=error))
            return "unknown"
        except (GatewayRefusal, ContinuumError) as e:
            _log.error("gateway.not_recorded", action=key, status=status, error=str(e))
            return "not_recorded"

    async def _settle_error(
        self, result: InterceptResult, upstream: Upstream, e: httpx2.HTTPError
    ) -> None:
        not_sent = isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.PoolTimeout)
        error = f"{type(e).__name__} from upstream {upstream.name}" + (
            " before the request was sent" if not_sent else ": the effect may have happened"
        )
        try:
            await self._ledger(
                lambda cx: cx.fail(self.run_id, result.action_key, error=error, certain=not_sent)
            )
        except (GatewayRefusal, ContinuumError) as err:
            _log.error("gateway.not_recorded", action=result.action_key, error=str(err))

    def _not_forwarded(
        self, result: InterceptResult, marks: list[tuple[bytes, bytes]]
    ) -> GatewayRefusal:
        status = result.status
        fields: dict[str, Any] = {"status": str(status), "action_key": result.action_key}
        hint = result.guidance
        code = 409
        if status in (
            InterceptStatus.UNKNOWN,
            InterceptStatus.RECONCILE_REQUIRED,
            InterceptStatus.NEEDS_CONFIRMATION,
            InterceptStatus.VERSION_DRIFT,
        ):
            command = (
                f"continuum {self.reconcile_db}reconcile {self.run_id} "
                f"{result.action_key} --occurred|--not-occurred"
            )
            fields["command"] = command
            hint = (
                "do not send it again: a person checks the upstream system for this effect, "
                f"then runs `{command}`; after --not-occurred the same request is forwarded"
            )
        elif status in (InterceptStatus.AWAITING_APPROVAL, InterceptStatus.DENIED):
            code = 403
            fields["approval_id"] = result.approval_id
        refusal = GatewayRefusal(
            code,
            f"gateway.{status}",
            f"not forwarded: the ledger answers {status} for {result.action_key}",
            hint,
            **fields,
        )
        refusal.headers += marks
        if status == InterceptStatus.IN_PROGRESS:
            refusal.headers.append((b"retry-after", b"1"))
        return refusal


def write_ready(line: str) -> Callable[[], None]:
    def ready() -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return ready
