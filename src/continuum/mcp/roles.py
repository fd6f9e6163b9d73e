"""Who may call what over HTTP: token roles, the token file, the bearer-token check.

Over the streamable HTTP transport every request carries ``Authorization: Bearer TOKEN``
and the token's **role** decides which tools it may call. This replaces the stdio gate
(the allowlist of self-declared client names and the ``_meta.authToken`` secrets): a
name is whatever a client says it is, a bearer token is something an operator handed
out. ``continuum_confirm`` still needs the human's confirm token as well (see
``authorize_call``).

The roles (which tools each may call) and the token file an operator hands out are
``continuum.serving.tokens``, shared with ``continuum ui``; this module is the check of a
request against them.

- Bearer check (``authenticate``): pure over the request's headers and query string, so
  any HTTP surface (the MCP endpoint, a later operator page) can reuse it. Comparison
  is over SHA-256 digests with ``hmac.compare_digest`` against every entry, so neither
  a token's content nor its length shows in the timing. A token in the URL (path or
  query string) or in another header is refused, and the refusal says where it must go.

Imports nothing from the server stack at run time.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from continuum.log import get_logger
from continuum.serving.auth import Caller, Decision, Policy, logged_name
from continuum.serving.tokens import (
    GRANT_SCOPE_KEY,
    ROLE_TOOLS,
    Grant,
    TokenTable,
    allows,
    roles_for,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

__all__ = [
    "Refusal",
    "authenticate",
    "authorize_call",
    "grant_from_context",
]


# Where clients commonly put a token instead of Authorization; refused by name.
TOKEN_HEADER_NAMES = frozenset(
    {
        "x-api-key",
        "api-key",
        "apikey",
        "x-auth-token",
        "x-access-token",
        "access-token",
        "x-token",
        "token",
        "x-mcp-token",
        "authentication",
        "x-authorization",
        "x-auth",
    }
)
TOKEN_QUERY_NAMES = frozenset(
    {
        "access_token",
        "token",
        "auth",
        "authorization",
        "bearer",
        "api_key",
        "apikey",
        "key",
        "auth_token",
        "authtoken",
        "api-key",
        "access-token",
    }
)


# --- the token file ----------------------------------------------------------------


# --- the bearer check --------------------------------------------------------------


class Refusal(Exception):
    """An HTTP request refused before it reaches any tool: status, code, what to do."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_WHERE = "send it only as the header 'Authorization: Bearer <token>'"


def authenticate(
    headers: Iterable[tuple[str, str]], query_string: str, table: TokenTable, path: str = ""
) -> Grant:
    """The ``Grant`` of a request's bearer token; ``Refusal`` otherwise.

    ``headers`` are (name, value) pairs as received (any case). Refused: a configured
    token in the URL path (``/mcp/TOKEN``), a token-like parameter or any configured
    token in the query string (URLs end up in logs and histories), a token in another
    header, no ``Authorization`` header, a scheme other than ``Bearer``, two
    ``Authorization`` headers, an unknown token.
    """
    pairs = [(name.lower(), value) for name, value in headers]
    if path and table.found_in_path(path):
        raise Refusal(
            400,
            "token_in_url",
            "a token was sent in the URL's path; "
            f"{_WHERE} (URLs are logged and cached: replace a token sent this way)",
        )
    for key, value in parse_qsl(query_string, keep_blank_values=True):
        if key.lower() in TOKEN_QUERY_NAMES or table.found_in(key) or table.found_in(value):
            raise Refusal(
                400,
                "token_in_url",
                "a token was sent in the URL's query string; "
                f"{_WHERE} (URLs are logged and cached: replace a token sent this way)",
            )
    if query_string and table.found_in(query_string):
        raise Refusal(400, "token_in_url", f"a token was sent in the URL; {_WHERE}")
    for name, value in pairs:
        if name != "authorization" and (name in TOKEN_HEADER_NAMES or table.found_in(value)):
            raise Refusal(
                400, "token_in_wrong_header", f"a token was sent in the header {name!r}; {_WHERE}"
            )
    values = [value for name, value in pairs if name == "authorization"]
    if not values:
        raise Refusal(
            401,
            "token_missing",
            "this server requires a bearer token on every "
            f"request and none was sent; {_WHERE} (the operator hands out tokens "
            "from the server's --token-file)",
        )
    if len(values) > 1:
        raise Refusal(400, "token_ambiguous", f"two Authorization headers were sent; {_WHERE}")
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Refusal(
            401, "bad_scheme", f"the Authorization header does not use the Bearer scheme; {_WHERE}"
        )
    grant = table.lookup(token.strip())
    if grant is None:
        raise Refusal(
            401,
            "token_invalid",
            "the bearer token is not valid for this server; "
            "ask its operator for a token (a line in its --token-file)",
        )
    return grant


# --- per-tool decisions ------------------------------------------------------------


def grant_from_context(ctx: Context[Any, Any] | Any) -> Grant | None:
    """The ``Grant`` the HTTP layer attached to this call's request, if any."""
    with suppress(Exception):  # no request (stdio), or not an HTTP one: no grant
        request = ctx.request_context.request
        grant = request.scope.get(GRANT_SCOPE_KEY) if request is not None else None
        return grant if isinstance(grant, Grant) else None
    return None


def authorize_call(
    tool: str,
    grant: Grant | None,
    caller: Caller,
    *,
    policy: Policy,
    confirm: bool = False,
    run_id: str | None = None,
) -> Decision:
    """Decide one call over HTTP: the token's role, then (``continuum_confirm``) the
    confirm token. No grant (which the HTTP layer never lets through) is denied."""
    if grant is None:
        return Decision(
            False,
            tool,
            caller.name,
            "auth.no_grant",
            "the request carried no verified bearer token",
            f"send 'Authorization: Bearer <token>' with a token whose role is {_needed(tool)}",
        )
    if not allows(grant.role, tool):
        tools = ROLE_TOOLS[grant.role] or frozenset()
        return Decision(
            False,
            tool,
            caller.name,
            "auth.role_denied",
            f"the bearer token's role {grant.role.value!r} may call only "
            f"{', '.join(sorted(tools))}; {tool} needs role {_needed(tool)}",
            f"ask the operator of this server for a token with role {_needed(tool)} (a "
            f"'{roles_for(tool)[0].value} <token>' line in its --token-file; see "
            "references/operators.md)",
        )
    if confirm:
        return policy.confirm_decision(tool, caller, run_id=run_id)
    return Decision(True, tool, caller.name)


def _needed(tool: str) -> str:
    return " or ".join(role.value for role in roles_for(tool))


def log_role_denial(decision: Decision, grant: Grant | None) -> None:
    """The denial on stderr with the token's role and line (never the token)."""
    with suppress(Exception):
        get_logger("continuum.mcp.auth").warning(
            "mcp.call_denied",
            tool=decision.tool,
            caller=logged_name(decision.caller),
            code=decision.code,
            reason=decision.reason,
            role=grant.role.value if grant else None,
            token_line=grant.line if grant else None,
        )
