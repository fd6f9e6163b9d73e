"""Roles and the token file: which tools a bearer token's role may call, and the file of
'ROLE TOKEN' lines an operator hands out (private, unique tokens, errors that name the line).

- Roles (``ROLE_TOOLS``, the one table to extend when a tool is added): ``read`` (the
  read-only tools), ``submit`` (read plus the agent's mutating tools), ``approve`` (read
  plus the human's tools: confirm, reconcile, approval decisions), ``admin`` (every tool,
  including ones added later). ``submit`` and ``approve`` are kept apart on purpose: the
  agent that reports effects is not the one that settles them.
- Token file (``load_token_file``): one ``ROLE TOKEN`` per line, ``#`` comments and blank
  lines allowed. Tokens are at least ``MIN_TOKEN_CHARS`` characters of the RFC 6750
  ``b64token`` alphabet and unique. The file must be a regular file owned by this user
  (or root) and not accessible by group or others (``chmod 600``), like an ssh key.
  Errors name the line, never a token. Tokens are held as SHA-256 digests.

Used by the MCP HTTP transport and by ``continuum ui``; imports the leaves and
``serving.secrets``."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from continuum.errors import UsageError
from continuum.serving.secrets import CONFIRM_TOKEN_ENV, Secret


class Role(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    APPROVE = "approve"
    ADMIN = "admin"


READ_TOOLS = ("continuum_validate", "continuum_resume", "continuum_list_actions")
"""The read-only tools: every role may call them."""


SUBMIT_TOOLS = (
    "continuum_record_progress",
    "continuum_checkpoint",
    "continuum_intercept_action",
    "continuum_complete_action",
    "continuum_fail_action",
    "continuum_observe",
    "continuum_resolve_branch",
    "continuum_handoff",
)
"""What an agent reports about its own work."""


APPROVE_TOOLS = ("continuum_confirm", "continuum_reconcile_action")
"""What a person decides: confirming claims, settling effects (add approval decisions here)."""


ROLE_TOOLS: Mapping[Role, frozenset[str] | None] = MappingProxyType(
    {
        Role.READ: frozenset(READ_TOOLS),
        Role.SUBMIT: frozenset(READ_TOOLS + SUBMIT_TOOLS),
        Role.APPROVE: frozenset(READ_TOOLS + APPROVE_TOOLS),
        Role.ADMIN: None,  # every tool, including ones added later
    }
)
"""Role -> the tools it may call (``None``: all). A tool named nowhere is admin-only."""


MIN_TOKEN_CHARS = 16


MAX_TOKEN_CHARS = 512


MAX_TOKEN_FILE_BYTES = 1 << 20


GRANT_SCOPE_KEY = "continuum.grant"
"""Where the HTTP layer leaves the request's ``Grant`` in the ASGI scope."""


_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 b64token


_PIECES = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # token-shaped runs: t=TOKEN gives t, TOKEN


_ROLES = frozenset(r.value for r in Role)


_ROLE_NAMES = ", ".join(r.value for r in Role)


def allows(role: Role, tool: str) -> bool:
    tools = ROLE_TOOLS[role]
    return tools is None or tool in tools


def roles_for(tool: str) -> tuple[Role, ...]:
    """The roles that may call ``tool``, narrowest first (``admin`` always last)."""
    return tuple(role for role in Role if allows(role, tool))


@dataclass(frozen=True)
class Grant:
    """What one authenticated request may do: its token's role, and which line of the
    token file holds that token (an operator's handle on it; never the token)."""

    role: Role
    line: int

    @property
    def principal(self) -> str:
        """A stable id for this token, for binding HTTP sessions to it."""
        return f"token-file-line-{self.line}"


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    role: Role
    line: int


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()


class TokenTable:
    """The loaded token file: digests of the tokens with their roles, never the tokens."""

    def __init__(self, entries: Iterable[_Entry], source: str) -> None:
        self._entries = tuple(entries)
        self._digests = frozenset(e.digest for e in self._entries)
        self.source = source

    def lookup(self, presented: str) -> Grant | None:
        """The grant of ``presented``; compares against every entry (no early exit)."""
        digest = _digest(presented)
        found: _Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry
        return Grant(found.role, found.line) if found is not None else None

    def found_in(self, text: str) -> bool:
        """Whether ``text`` (a header value, a query string) holds a configured token as one
        token-shaped run (best effort, to say where a token belongs: a request without a
        valid ``Authorization`` header is refused anyway)."""
        return any(
            _digest(piece) in self._digests
            for piece in _PIECES.findall(text)
            if len(piece) >= MIN_TOKEN_CHARS
        )

    def found_in_path(self, path: str) -> bool:
        """Whether a URL path holds a configured token, whole or as one of its segments
        (best effort, like ``found_in``: such a path is refused and never logged anyway)."""
        return self.found_in(path) or any(self.found_in(part) for part in path.split("/"))

    def shares_a_token_with(self, secret: Secret) -> bool:
        digest = secret.digest()
        return any(hmac.compare_digest(digest, e.digest) for e in self._entries)

    def describe(self) -> dict[str, Any]:
        """For logs and ``--doctor``: where the tokens come from and how many per role."""
        counts = {role.value: sum(1 for e in self._entries if e.role is role) for role in Role}
        return {"token_file": self.source, "tokens": counts}

    def __repr__(self) -> str:
        return f"TokenTable({self.source!r}, {len(self._entries)} tokens)"


def _bad_file(path: Path, problem: str, hint: str) -> UsageError:
    return UsageError(
        f"token file {path}: {problem}", code="mcp.bad_token_file", hint=hint, path=str(path)
    )


_FORMAT_HINT = (
    f"write one 'ROLE TOKEN' per line (roles: {_ROLE_NAMES}; tokens at least "
    f"{MIN_TOKEN_CHARS} characters of A-Z a-z 0-9 - . _ ~ + / =); see "
    "references/operators.md"
)


def _read_private(path: Path) -> bytes:
    """The file's bytes, checked on the open descriptor (no swap between check and read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as e:
        raise _bad_file(
            path,
            "does not exist",
            "give --token-file the path of an existing file; " + _FORMAT_HINT,
        ) from e
    except OSError as e:
        raise _bad_file(
            path,
            f"cannot be opened ({e.strerror or type(e).__name__})",
            "check the path and that this user may read it",
        ) from e
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _bad_file(path, "is not a regular file", "give --token-file a file")
        if info.st_uid not in (os.geteuid(), 0):
            raise _bad_file(
                path,
                f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root",
                f"chown it to the user that runs the server, then chmod 600 {path}",
            )
        if info.st_mode & 0o077:
            raise _bad_file(
                path,
                f"is accessible by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); its tokens may have been read",
                f"run `chmod 600 {path}`, and replace the tokens if others could read it",
            )
        if info.st_size > MAX_TOKEN_FILE_BYTES:
            raise _bad_file(path, f"is larger than {MAX_TOKEN_FILE_BYTES} bytes", _FORMAT_HINT)
        try:
            return f.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as e:
            raise _bad_file(
                path, f"cannot be read ({e.strerror or type(e).__name__})", "check the file"
            ) from e


def _line_problem(fields: list[str]) -> str | None:
    """What is wrong with one line's fields; never quotes a field (one may be a token)."""
    if len(fields) != 2:
        return f"has {len(fields)} fields; expected 2 (ROLE TOKEN)"
    role, token = fields
    if role not in _ROLES:
        if token in _ROLES:
            return "starts with something that is not a role; the role comes first (ROLE TOKEN)"
        return f"does not start with a role (one of {_ROLE_NAMES}; lower case)"
    if len(token) < MIN_TOKEN_CHARS:
        return f"has a token of {len(token)} characters; tokens need at least {MIN_TOKEN_CHARS}"
    if len(token) > MAX_TOKEN_CHARS:
        return f"has a token longer than {MAX_TOKEN_CHARS} characters"
    if not _TOKEN.fullmatch(token):
        return "has a token with characters outside A-Z a-z 0-9 - . _ ~ + / ="
    return None


def load_token_file(path: str | Path) -> TokenTable:
    """Read and check the token file; ``UsageError`` (``mcp.bad_token_file``) otherwise."""
    path = Path(path)
    data = _read_private(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad_file(path, "is not UTF-8", _FORMAT_HINT) from e
    entries: list[_Entry] = []
    seen: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.strip()
        if not content or content.startswith("#"):
            continue
        fields = content.split()
        problem = _line_problem(fields)
        if problem:
            raise _bad_file(path, f"line {number} {problem}", _FORMAT_HINT)
        digest = _digest(fields[1])
        if digest in seen:
            raise _bad_file(
                path,
                f"line {number} repeats the token of line {seen[digest]}",
                "give every holder its own token (one token, one role)",
            )
        seen[digest] = number
        entries.append(_Entry(digest, Role(fields[0]), number))
    if not entries:
        raise _bad_file(path, "holds no tokens, so every request would be refused", _FORMAT_HINT)
    return TokenTable(entries, str(path))


def check_confirm_token_apart(table: TokenTable, confirm: Secret | None) -> None:
    """The human's confirm token must not also be a bearer token (one secret, one use)."""
    if confirm is not None and table.shares_a_token_with(confirm):
        raise UsageError(
            f"{CONFIRM_TOKEN_ENV} is also a token in {table.source}",
            code="mcp.secret_reused",
            hint=f"give {CONFIRM_TOKEN_ENV} a secret of its own, so a bearer token cannot confirm",
            variable=CONFIRM_TOKEN_ENV,
        )
