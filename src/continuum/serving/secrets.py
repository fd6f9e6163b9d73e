"""The secrets a server is configured with: the environment variables that name them, a
secret compared in constant time and never shown, and the person's confirm token and its strength.

Used by the MCP server (both transports) and by ``continuum ui``; imports only the leaves."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from continuum.errors import UsageError

ALLOW_ENV = "CONTINUUM_MCP_MUTATING_CLIENTS"
ALLOW_ALIAS_ENV = "CONTINUUM_MCP_ALLOW"
TOKEN_ENV = "CONTINUUM_MCP_TOKEN"
CLIENT_TOKENS_ENV = "CONTINUUM_MCP_CLIENT_TOKENS"
CONFIRM_TOKEN_ENV = "CONTINUUM_MCP_CONFIRM_TOKEN"
MIN_CONFIRM_TOKEN_CHARS = 32
"""Shortest confirm token accepted at start-up: 32 hex digits are 128 random bits."""


MIN_CONFIRM_TOKEN_DISTINCT = 8
"""Fewest different characters in it: refuses a repeated pattern ("aaaa...", a word
written four times); 32 random hex digits hold 14 on average, fewer than 8 almost never."""


class Secret:
    """A configured secret: compared in constant time, never shown."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value.encode("utf-8", errors="surrogatepass")

    def matches(self, presented: str | None) -> bool:
        if presented is None:
            return False
        return hmac.compare_digest(self._value, presented.encode("utf-8", errors="surrogatepass"))

    def same_as(self, other: Secret) -> bool:
        return hmac.compare_digest(self._value, other._value)

    def digest(self) -> bytes:
        """SHA-256 of the secret, to compare with secrets held only as digests."""
        return hashlib.sha256(self._value).digest()

    def shape(self) -> tuple[int, int]:
        """(characters, different characters): enough to judge its strength, nothing more."""
        text = self._value.decode("utf-8", errors="surrogatepass")
        return len(text), len(set(text))

    def __repr__(self) -> str:
        return "Secret(***)"


def _token_error(message: str, variable: str, hint: str = "") -> UsageError:
    hint = hint or f"write {CLIENT_TOKENS_ENV} as name:secret pairs separated by commas"
    return UsageError(message, code="mcp.bad_token_setting", hint=hint, variable=variable)


def _secret(env: Mapping[str, str], variable: str) -> Secret | None:
    value = env.get(variable)
    if value is not None and not value.strip():
        raise _token_error(
            f"{variable} is set but empty", variable, f"give {variable} a secret or unset it"
        )
    return None if value is None else Secret(value)


def load_confirm_token(env: Mapping[str, str]) -> Secret | None:
    """``CONTINUUM_MCP_CONFIRM_TOKEN`` alone (what the HTTP transport reads of this policy);
    its strength is checked after its reuse (``check_confirm_token_strength``)."""
    return _secret(env, CONFIRM_TOKEN_ENV)


def check_confirm_token_strength(secret: Secret | None) -> None:
    """Refuse (``mcp.weak_confirm_token``) a confirm token short or repetitive enough to
    guess. The message names the variable and the rule, never the value or its length."""
    if secret is None:
        return
    chars, distinct = secret.shape()
    if chars < MIN_CONFIRM_TOKEN_CHARS:
        problem = f"is shorter than {MIN_CONFIRM_TOKEN_CHARS} characters"
    elif distinct < MIN_CONFIRM_TOKEN_DISTINCT:
        problem = f"has fewer than {MIN_CONFIRM_TOKEN_DISTINCT} different characters"
    else:
        return
    raise UsageError(
        f"{CONFIRM_TOKEN_ENV} {problem}: a confirm token records origin human and must "
        "resist guessing",
        code="mcp.weak_confirm_token",
        hint="make one with `continuum confirm-token new` (256 random bits), set it, and "
        "start again",
        variable=CONFIRM_TOKEN_ENV,
    )
