"""Who may call mutating MCP tools: the allowlist, the optional tokens, the confirm gate.

Pure policy plus its loading from the environment and ``.continuum/mcp-policy.json``;
no tool logic lives here. The server calls ``Policy.authorize`` for mutating tools
only (read-only tools are never gated) and turns a denial into an ``isError``
result carrying ``Decision.text()``.

Rules an operator can rely on (references/contract.md §5 and §9):

- Allowlist: ``CONTINUUM_MCP_MUTATING_CLIENTS`` (alias ``CONTINUUM_MCP_ALLOW``),
  names separated by commas or newlines, whitespace around each name trimmed and
  spaces inside a name kept: real hosts have such names (Kilo Code's client calls
  itself ``Kilo Code``), so a space cannot separate names. Empty pieces (``a,,b``,
  a trailing comma) are skipped. A variable that is present wins over the file, even
  when empty (empty = nobody, the server is read-only). Both variables present with
  different names is ambiguous and refused. Else the file, ``{"allow": [names]}`` or
  ``[names]``. No allowlist: read-only.
- Names: any printable text up to ``MAX_NAME_CHARS`` characters. A name holding
  control, bidi or invisible characters (which make two different names look alike
  in a log or a denial), or an empty one, is refused when the policy is loaded.
- Tokens: ``CONTINUUM_MCP_TOKEN`` (one shared secret) or ``CONTINUUM_MCP_CLIENT_TOKENS``
  (``name:secret`` pairs separated by commas or newlines, split at the first ``:``, so
  a name may hold spaces but no ``:``; the secret is bound to the name). Setting both is refused:
  which one applies would be a guess. ``CONTINUUM_MCP_CONFIRM_TOKEN`` gates
  ``continuum_confirm`` and must differ from every other secret; two names may not
  share a secret either (the binding would mean nothing). It must also be at least
  ``MIN_CONFIRM_TOKEN_CHARS`` characters with at least ``MIN_CONFIRM_TOKEN_DISTINCT``
  different ones (``continuum confirm-token new`` makes one of 256 random bits), and a
  presented one is compared only through the store's attempt counter
  (``Policy.confirm_limit``, ``confirm_limit.py``): wrong ones are limited per store.
- A present-but-empty secret variable is refused rather than read as "no token":
  a template that expanded to nothing must not silently switch authentication off.

Caller identity is self-declared (``clientInfo.name``); on stdio the real boundary is
the operator who wrote the host's MCP configuration, including this allowlist.
Secrets never appear in messages, reprs, decisions or logs. A client's name is
its own text, of any length: logs show at most ``LOGGED_NAME_CHARS`` of it (plus its
length), denials at most 80. ``ClientLog`` logs each connecting client once, saying
whether it may call mutating tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from mcp_types import CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY, InitializeRequestParams

from continuum.errors import ContinuumError, UsageError
from continuum.log import get_logger
from continuum.serving.confirm_limit import ConfirmLimit, attempt_denial
from continuum.serving.secrets import (
    ALLOW_ALIAS_ENV,
    ALLOW_ENV,
    CLIENT_TOKENS_ENV,
    CONFIRM_TOKEN_ENV,
    TOKEN_ENV,
    Secret,
    _secret,
    _token_error,
    check_confirm_token_strength,
)
from continuum.untrusted import check_identifier

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.mcpserver import Context

__all__ = [
    "AUTH_TOKEN_META_KEY",
    "CONFIRM_TOKEN_META_KEY",
    "LOGGED_NAME_CHARS",
    "MAX_NAME_CHARS",
    "POLICY_FILE",
    "Caller",
    "ClientLog",
    "Decision",
    "Policy",
    "caller_from_context",
    "caller_identity",
    "connecting_client",
    "load_policy",
    "log_denial",
    "logged_name",
]

POLICY_FILE = Path(".continuum") / "mcp-policy.json"
AUTH_TOKEN_META_KEY = "authToken"
CONFIRM_TOKEN_META_KEY = "confirmToken"

MAX_NAME_CHARS = 200
"""Longest client name an operator can put on the allowlist or bind a secret to."""

LOGGED_NAME_CHARS = 200
"""Most characters of a client's self-declared name that one log line carries."""


# Commas and line breaks separate names; a space does not ("Kilo Code" is one name).
_SEPARATORS = re.compile(r"[,\r\n]")


Era = Literal["handshake", "2026-07-28"]


@dataclass(frozen=True)
class Caller:
    """The self-declared identity of one call, and the tokens it presented."""

    name: str | None
    era: Era = "handshake"
    auth_token: str | None = field(default=None, repr=False)
    confirm_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Decision:
    """Allowed, or a denial the agent can read and an operator can act on."""

    allowed: bool
    tool: str
    caller: str | None
    code: str = "auth.allowed"
    reason: str = ""
    remedy: str = ""

    def text(self) -> str:
        who = _shown(self.caller)
        if self.allowed:
            return f"Allowed: tool {self.tool} for client {who}."
        return f"Denied: tool {self.tool} for client {who}.\nReason: {self.reason}\nRemedy: {self.remedy}"

    def as_dict(self) -> dict[str, Any]:
        """The structured form of a denial (for ``structuredContent``)."""
        return {
            "allowed": self.allowed,
            "tool": self.tool,
            "caller": self.caller,
            "code": self.code,
            "reason": self.reason,
            "remedy": self.remedy,
        }


def _shown(name: str | None) -> str:
    if name is None:
        return "(no name declared)"
    return repr(name if len(name) <= 80 else name[:77] + "...")


@dataclass(frozen=True)
class Policy:
    """The loaded authorization settings. ``Policy()`` is the read-only default."""

    allow: frozenset[str] = frozenset()
    allow_source: str | None = None  # variable name or file path that set the allowlist
    shared_token: Secret | None = None
    client_tokens: Mapping[str, Secret] = field(default_factory=dict)
    confirm_token: Secret | None = None
    # The store's counter of wrong confirm tokens (``confirm_limit.py``); the server always
    # sets one with the confirm token. None (a unit test's policy): compared directly.
    confirm_limit: ConfirmLimit | None = field(default=None, repr=False, compare=False)

    @property
    def read_only(self) -> bool:
        return not self.allow

    @property
    def auth_mode(self) -> Literal["client_tokens", "shared_token", "none"]:
        if self.client_tokens:
            return "client_tokens"
        return "shared_token" if self.shared_token else "none"

    def describe(self) -> dict[str, Any]:
        """A startup log summary, free of secrets (names are bounded by ``MAX_NAME_CHARS``)."""
        return {
            "allow": sorted(self.allow),
            "allow_source": self.allow_source,
            "read_only": self.read_only,
            "auth": self.auth_mode,
            "confirm_over_mcp": self.confirm_token is not None,
        }

    def verdicts(self, name: str | None) -> dict[str, Decision]:
        """What a call from a client named ``name`` that presents no token (as interactive
        hosts cannot) would be told: a mutating tool, and ``continuum_confirm``."""
        caller = Caller(name)
        return {
            "mutating": self.authorize("continuum_record_progress", caller),
            "confirm": self.authorize("continuum_confirm", caller, confirm=True),
        }

    def authorize(
        self, tool_name: str, caller: Caller, *, confirm: bool = False, run_id: str | None = None
    ) -> Decision:
        """Decide a mutating call; ``confirm=True`` for ``continuum_confirm`` (needs the confirm token).

        ``run_id`` fills the ``continuum confirm <run_id>`` remedy when given.
        """
        denial = (
            self._allowlist_denial(caller.name)
            or self._token_denial(caller)
            or (self._confirm_denial(caller, run_id) if confirm else None)
        )
        if denial is None:
            return Decision(True, tool_name, caller.name)
        return Decision(False, tool_name, caller.name, *denial)

    def confirm_decision(
        self, tool_name: str, caller: Caller, *, run_id: str | None = None
    ) -> Decision:
        """The confirm-token check alone: over HTTP the token's role replaces the
        allowlist and the auth token, but confirming still needs the human's secret."""
        denial = self._confirm_denial(caller, run_id)
        if denial is None:
            return Decision(True, tool_name, caller.name)
        return Decision(False, tool_name, caller.name, *denial)

    def _allowlist_denial(self, name: str | None) -> tuple[str, str, str] | None:
        grant = (
            f"set {ALLOW_ENV} (names separated by commas) in the environment the MCP host "
            f"starts the server with, or list the name in {POLICY_FILE}"
        )
        if self.read_only:
            reason = "this server is read-only: no client is allowed to call mutating tools"
            return "auth.read_only", reason, f"an operator must {grant}"
        if name is None:
            reason = (
                "the client declared no name (clientInfo.name), so it cannot be on the allowlist"
            )
            return "auth.no_name", reason, f"send clientInfo.name; an operator must {grant}"
        if name not in self.allow:
            reason = f"client {_shown(name)} is not on the allowlist of mutating clients"
            return (
                "auth.not_allowed",
                reason,
                f"an operator must add {_shown(name)} to {self.allow_source}",
            )
        return None

    def _token_denial(self, caller: Caller) -> tuple[str, str, str] | None:
        if not self.client_tokens and self.shared_token is None:
            return None
        name = caller.name or ""
        expected = self.client_tokens.get(name) if self.client_tokens else self.shared_token
        source = CLIENT_TOKENS_ENV if self.client_tokens else TOKEN_ENV
        send = f"send the secret from {source} as _meta.authToken (in the initialize _meta or this call's _meta)"
        if expected is None:
            reason = f"{CLIENT_TOKENS_ENV} binds no secret to client {_shown(name)}"
            return (
                "auth.no_token_for_client",
                reason,
                f"an operator must add '{name}:<secret>' to {source}",
            )
        if caller.auth_token is None:
            return (
                "auth.token_missing",
                "this server requires an authentication token; none was presented",
                send,
            )
        if not expected.matches(caller.auth_token):
            return (
                "auth.token_mismatch",
                "the presented authentication token is not valid for this client",
                send,
            )
        return None

    def _confirm_denial(self, caller: Caller, run_id: str | None) -> tuple[str, str, str] | None:
        # An agent with a shell could run the command itself and vouch for its own claims;
        # the CLI refuses to confirm without a terminal unless --yes, and says so too.
        human = (
            f"a person must run `continuum confirm {run_id or '<run_id>'}` at a terminal after "
            "checking the goal and progress; an agent must not run it itself (its confirmation "
            "would vouch for its own claims)"
        )
        if self.confirm_token is None:
            reason = f"confirming over MCP is disabled ({CONFIRM_TOKEN_ENV} is not set)"
            return "auth.confirm_disabled", reason, human
        if caller.confirm_token is None:
            return (
                "auth.confirm_token_missing",
                "confirming needs _meta.confirmToken; none was presented",
                human,
            )
        secret, presented = self.confirm_token, caller.confirm_token
        if self.confirm_limit is None:
            if not secret.matches(presented):
                return (
                    "auth.confirm_token_mismatch",
                    "the presented confirm token is not valid",
                    human,
                )
            return None
        try:
            attempt = self.confirm_limit.attempt(
                run_id, lambda: secret.matches(presented), caller.name
            )
        except ContinuumError as e:  # the attempt cannot be counted: it is not compared
            reason = (
                f"the store could not count this attempt [{e.code}], so the confirm token "
                "was not checked"
            )
            return "auth.confirm_unavailable", reason, human
        return attempt_denial(attempt, run_id, human)


def log_denial(decision: Decision) -> None:
    """Record a denial on stderr (structlog); a decision holds no secret to leak.

    A failing log (stderr closed by the host) must not turn the denial into a crash.
    """
    d = decision
    with suppress(Exception):
        logger = get_logger("continuum.mcp.auth")
        logger.warning(
            "mcp.call_denied",
            tool=d.tool,
            caller=logged_name(d.caller),
            code=d.code,
            reason=d.reason,
        )


def logged_name(name: str | None) -> str | None:
    """A client's name fit for one log line: at most ``LOGGED_NAME_CHARS`` characters of it,
    then its full length (a 100 KB name must not make a 100 KB log line)."""
    if name is None or len(name) <= LOGGED_NAME_CHARS:
        return name
    return f"{name[:LOGGED_NAME_CHARS]}... ({len(name)} characters)"


def connecting_client(
    method: str, params: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
) -> tuple[Era | None, str | None]:
    """``(era, name)`` of the client one inbound message identifies, from the raw params.

    The handshake era names the client once, in ``initialize``; the 2026-07-28 era in
    every request's ``_meta``. Any other message identifies nobody: ``(None, None)``.
    """
    if meta is not None and PROTOCOL_VERSION_META_KEY in meta:
        info = meta.get(CLIENT_INFO_META_KEY)
        return "2026-07-28", _str_or_none(info.get("name")) if isinstance(info, Mapping) else None
    if method == "initialize":
        info = params.get("clientInfo") if isinstance(params, Mapping) else None
        return "handshake", _str_or_none(info.get("name")) if isinstance(info, Mapping) else None
    return None, None


class ClientLog:
    """Log each client the server sees once: its name, and whether it may write.

    So an operator whose host is denied finds the exact name to allow in the log the
    moment the host connects, not only after a denied call. A name is remembered for
    the connection (the handshake era names the client once; the 2026-07-28 era on
    every request, so only the first sighting of each name is logged). At most
    ``max_names`` names are remembered: past that, one line says so and new names are
    no longer logged, which bounds both memory and log volume.
    """

    def __init__(self, policy: Policy, max_names: int = 64) -> None:
        self._policy = policy
        self._max_names = max_names
        self._seen: set[str | None] = set()
        self._full = False

    def saw(self, name: str | None, era: Era) -> None:
        if name in self._seen or self._full:
            return
        logger = get_logger("continuum.mcp.auth")
        if len(self._seen) >= self._max_names:
            self._full = True
            with suppress(Exception):
                logger.warning(
                    "mcp.client_names_not_logged",
                    remembered=self._max_names,
                    note="too many distinct client names; new ones are not logged",
                )
            return
        self._seen.add(name)
        denial = self._policy._allowlist_denial(name)
        who = f"client {_shown(name)}" if name is not None else "a client without a name"
        with suppress(Exception):
            if denial is None:
                logger.info(
                    "mcp.client_connected",
                    client=logged_name(name),
                    era=era,
                    mutating="allowed",
                    source=self._policy.allow_source,
                    message=f"{who} connected; it is on the allowlist "
                    f"({self._policy.allow_source}); mutating tools are allowed"
                    + (
                        "" if self._policy.auth_mode == "none" else " with its authentication token"
                    ),
                )
            else:
                _code, reason, remedy = denial
                logger.warning(
                    "mcp.client_connected",
                    client=logged_name(name),
                    era=era,
                    mutating="denied",
                    code=_code,
                    message=f"{who} connected; {reason}; mutating tools will be "
                    f"denied; to allow it, {remedy}",
                )


# --- loading -----------------------------------------------------------------


_NAME_HINT = (
    f"client names are printable text (spaces allowed, at most {MAX_NAME_CHARS} characters) "
    "without control, bidi or invisible characters; in a variable, separate them with commas"
)


def _clean_name(name: object, where: str, code: str = "mcp.bad_policy") -> str:
    """``name`` if an operator may list it; else a one-line ``UsageError`` naming ``where``.

    Such characters would let two different names look the same in a log or a denial.
    """
    return check_identifier(
        name, what=f"{where}: client name", code=code, hint=_NAME_HINT, max_length=MAX_NAME_CHARS
    )


def _split(value: str) -> list[str]:
    """Pieces separated by commas or line breaks, trimmed; empty pieces are skipped."""
    return [piece.strip() for piece in _SEPARATORS.split(value) if piece.strip()]


def _names(value: str, variable: str) -> frozenset[str]:
    return frozenset(_clean_name(piece, variable) for piece in _split(value))


def _bad(code: str, message: str, hint: str, **fields: Any) -> UsageError:
    return UsageError(message, code=code, hint=hint, **fields)


def _load_allow(env: Mapping[str, str], cwd: Path) -> tuple[frozenset[str], str | None]:
    primary, alias = env.get(ALLOW_ENV), env.get(ALLOW_ALIAS_ENV)
    if (
        primary is not None
        and alias is not None
        and (_names(primary, ALLOW_ENV) != _names(alias, ALLOW_ALIAS_ENV))
    ):
        raise _bad(
            "mcp.bad_policy",
            f"{ALLOW_ENV} and its alias {ALLOW_ALIAS_ENV} are both set, to different names",
            f"set only {ALLOW_ENV}",
            variable=ALLOW_ALIAS_ENV,
        )
    if primary is not None:
        return _names(primary, ALLOW_ENV), ALLOW_ENV
    if alias is not None:
        return _names(alias, ALLOW_ALIAS_ENV), ALLOW_ALIAS_ENV
    path = cwd / POLICY_FILE
    if not path.exists():
        return frozenset(), None
    return _read_policy_file(path), str(path)


def _read_policy_file(path: Path) -> frozenset[str]:
    hint = f'write {{"allow": ["client-name", ...]}} to {path}, or remove it for a read-only server'

    def bad(problem: str) -> UsageError:
        return _bad("mcp.bad_policy", f"policy file {path}: {problem}", hint, path=str(path))

    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise bad(f"cannot be read ({exc.strerror or type(exc).__name__})") from exc
    except UnicodeDecodeError as exc:
        raise bad("is not UTF-8") from exc
    except json.JSONDecodeError as exc:
        raise bad(f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"allow"})
        if unknown:
            raise bad(f'unknown key(s) {", ".join(map(repr, unknown))}; only "allow" is read')
        if "allow" not in data:
            raise bad('has no "allow" key')
        data = data["allow"]
    if not isinstance(data, list):
        raise bad('must be {"allow": [names]} or a JSON list of names')
    names: set[str] = set()
    for index, entry in enumerate(data):
        if not isinstance(entry, str):
            raise bad(f"entry {index} is not a string")
        if not entry.strip():
            raise bad(f"entry {index} is an empty name")
        names.add(_clean_name(entry, f"policy file {path} entry {index}"))
    return frozenset(names)


def _pair_problem(name: str, colon: str, secret: str, seen: Mapping[str, Secret]) -> str | None:
    # Positions and names only: the pair itself contains the secret.
    if not colon:
        return "has no ':' between name and secret"
    if not name:
        return "has an empty name"
    if not secret:
        return f"has an empty secret for {name!r}"
    return f"names {name!r} a second time" if name in seen else None


def _client_tokens(env: Mapping[str, str]) -> dict[str, Secret]:
    value = env.get(CLIENT_TOKENS_ENV)
    if value is None:
        return {}
    pairs = _split(value)
    if not pairs:
        raise _token_error(f"{CLIENT_TOKENS_ENV} is set but empty", CLIENT_TOKENS_ENV)
    tokens: dict[str, Secret] = {}
    for index, pair in enumerate(pairs, start=1):
        # The first ':' ends the name (a name may hold spaces, a secret may hold ':').
        raw_name, colon, raw_secret = pair.partition(":")
        name, secret = raw_name.strip(), raw_secret.strip()
        problem = _pair_problem(name, colon, secret, tokens)
        if problem:
            raise _token_error(f"{CLIENT_TOKENS_ENV} entry {index} {problem}", CLIENT_TOKENS_ENV)
        _clean_name(name, f"{CLIENT_TOKENS_ENV} entry {index}", code="mcp.bad_token_setting")
        candidate = Secret(secret)
        twin = next((other for other, known in tokens.items() if candidate.same_as(known)), None)
        if twin is not None:
            raise _bad(
                "mcp.secret_reused",
                f"{CLIENT_TOKENS_ENV} gives {twin!r} and {name!r} the same secret",
                "give every client its own secret (a shared secret binds no name)",
                variable=CLIENT_TOKENS_ENV,
            )
        tokens[name] = candidate
    return tokens


def load_policy(env: Mapping[str, str], cwd: Path) -> Policy:
    """Read the policy; raise ``UsageError`` (``mcp.bad_policy`` / ``mcp.bad_token_setting`` /
    ``mcp.secret_reused`` / ``mcp.weak_confirm_token``) on any malformed setting, so the
    server refuses to start. The server then gives it its store's ``confirm_limit``."""
    allow, source = _load_allow(env, cwd)
    if env.get(TOKEN_ENV) is not None and env.get(CLIENT_TOKENS_ENV) is not None:
        hint = f"use {TOKEN_ENV} for one shared secret or {CLIENT_TOKENS_ENV} per client, not both"
        raise _token_error(f"{TOKEN_ENV} and {CLIENT_TOKENS_ENV} are both set", TOKEN_ENV, hint)
    shared = _secret(env, TOKEN_ENV)
    client_tokens = _client_tokens(env)
    confirm = _secret(env, CONFIRM_TOKEN_ENV)
    others = [shared] if shared is not None else list(client_tokens.values())
    if confirm is not None and any(confirm.same_as(other) for other in others):
        raise _bad(
            "mcp.secret_reused",
            f"{CONFIRM_TOKEN_ENV} reuses the secret of {TOKEN_ENV if shared else CLIENT_TOKENS_ENV}",
            f"give {CONFIRM_TOKEN_ENV} a secret of its own, so an agent's token cannot confirm",
            variable=CONFIRM_TOKEN_ENV,
        )
    check_confirm_token_strength(confirm)
    return Policy(allow, source, shared, client_tokens, confirm)


# --- identity ----------------------------------------------------------------


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def caller_identity(
    client_params: InitializeRequestParams | None, request_meta: Mapping[str, Any] | None
) -> Caller:
    """Read the caller from either protocol era.

    A request carrying the 2026-07-28 envelope (``_meta`` with the protocol-version
    key) is identified by its own ``io.modelcontextprotocol/clientInfo``; any other
    request by the ``initialize`` handshake's ``clientInfo``. Tokens: the call's
    ``_meta`` first, then the ``initialize`` request's ``_meta``.
    """
    meta: Mapping[str, Any] = request_meta or {}
    init_meta: Mapping[str, Any] = (client_params.meta if client_params is not None else None) or {}
    if PROTOCOL_VERSION_META_KEY in meta:
        info = meta.get(CLIENT_INFO_META_KEY)
        name = _str_or_none(info.get("name")) if isinstance(info, Mapping) else None
        era: Era = "2026-07-28"
    else:
        name = _str_or_none(client_params.client_info.name) if client_params is not None else None
        era = "handshake"

    def token(key: str) -> str | None:
        found = _str_or_none(meta.get(key))
        return found if found is not None else _str_or_none(init_meta.get(key))

    return Caller(name, era, token(AUTH_TOKEN_META_KEY), token(CONFIRM_TOKEN_META_KEY))


def caller_from_context(ctx: Context[Any, Any] | ServerRequestContext[Any, Any]) -> Caller:
    """The caller of a tool: from an ``MCPServer`` ``Context`` or a low-level request context."""
    # Duck-typed so this module does not import the server stack at run time.
    request_context = cast("ServerRequestContext[Any, Any]", getattr(ctx, "request_context", ctx))
    return caller_identity(request_context.session.client_params, request_context.meta)
