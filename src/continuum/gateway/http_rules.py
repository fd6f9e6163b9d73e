"""The rules of ``continuum gateway http``: which upstreams an agent may reach through the
gateway, and which of its requests are side effects to put through the ledger.

A TOML file of two kinds of tables (the style of the hooks' effect registry)::

    [[upstream]]
    name = "payments"                 # the agent calls http://GATEWAY/payments/...
    url = "http://127.0.0.1:9000"     # ... and the gateway forwards to this base URL
    timeout = 30                      # seconds; past it an effect's outcome is unknown

    [[effect]]
    upstream = "payments"
    method = "POST"                   # regex, full match (default POST|PUT|PATCH|DELETE)
    path = "/charges(/(?P<charge>[^/]+))?"   # regex, full match on the path after the name
    action_type = "charge"
    key = "{charge}:{amount}"         # optional; without it the Idempotency-Key header
    replay = "never"                  # never | safe | idempotent | reconcile

The first effect rule that matches a request decides. A key template names, in braces, the
path regex's named groups, the query's parameters and the top-level fields of a JSON
body (a group wins over a parameter of the same name, a parameter over a body field), and
``{idempotency_key}`` (the request's ``Idempotency-Key`` header); ``{{`` and ``}}`` are
literal braces. A request no rule matches is forwarded untouched; a name no
``[[upstream]]`` declares is refused.

Imports the hooks' template helpers and the leaves (standard library only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from continuum.errors import UsageError
from continuum.hooks.registry import REPLAYS, placeholders, render_key
from continuum.rule_tables import rule_regex

DEFAULT_METHODS = "POST|PUT|PATCH|DELETE"
DEFAULT_TIMEOUT = 30.0
IDEMPOTENCY_KEY = "idempotency_key"  # the placeholder of the Idempotency-Key header
_TABLES = ("upstream", "effect")
_UPSTREAM_FIELDS = {"name", "url", "timeout", "description"}
_EFFECT_FIELDS = {"upstream", "method", "path", "action_type", "key", "replay", "description"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}")
_ACTION_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,100}")


@dataclass(frozen=True)
class Upstream:
    """One ``[[upstream]]``: its name (the first path segment the agent uses) and the
    base URL requests are forwarded to."""

    name: str
    url: str
    timeout: float = DEFAULT_TIMEOUT
    line: int = 0

    def target(self, rest: str, query: str) -> str:
        """The upstream URL for the path ``rest`` (after the name) and the raw query."""
        base = self.url.rstrip("/")
        return base + rest + (f"?{query}" if query else "")


@dataclass(frozen=True)
class EffectRule:
    """One ``[[effect]]``, compiled."""

    index: int
    line: int
    upstream: str
    method: re.Pattern[str]
    path: re.Pattern[str]
    action_type: str
    key: str | None
    replay: str = "never"
    description: str | None = None

    @property
    def where(self) -> str:
        return f"effect #{self.index}" + (f" (line {self.line})" if self.line else "")


@dataclass(frozen=True)
class HttpRules:
    """The whole rules file: upstreams by name and the effect rules in order."""

    path: str
    upstreams: Mapping[str, Upstream]
    effects: tuple[EffectRule, ...] = field(default=())

    def find(
        self, upstream: str, method: str, path: str
    ) -> tuple[EffectRule, dict[str, str]] | None:
        """The first effect rule matching this request and its path's named groups, or
        None (the request is forwarded untouched)."""
        for rule in self.effects:
            if rule.upstream != upstream or not rule.method.fullmatch(method):
                continue
            m = rule.path.fullmatch(path)
            if m:
                return rule, {k: v for k, v in m.groupdict().items() if v is not None}
        return None


class MissingKey(Exception):
    """A registered request without what its key needs (answered 428)."""

    def __init__(self, missing: str) -> None:
        super().__init__(missing)
        self.missing = missing


def effect_key(
    rule: EffectRule,
    groups: Mapping[str, str],
    query: Mapping[str, str],
    body: Any,
    idempotency_key: str | None,
) -> str:
    """The ledger key of a registered request; ``MissingKey`` names what it lacks."""
    if rule.key is None:
        if not idempotency_key:
            raise MissingKey("Idempotency-Key header")
        return render_key("{k}", {"k": idempotency_key})
    values: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
    values.update(query)
    values.update(groups)
    if idempotency_key:
        values[IDEMPOTENCY_KEY] = idempotency_key
    for name in placeholders(rule.key):
        if values.get(name) is None:
            what = "Idempotency-Key header" if name == IDEMPOTENCY_KEY else repr(name)
            raise MissingKey(what)
    return render_key(rule.key, values)


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(
        f"gateway rules {path}: {where}: {problem}",
        code="gateway.bad_rules",
        hint=f"fix {path} (see references/operators.md, 'The HTTP gateway'); the gateway "
        "does not start until it is valid",
        path=path,
    )


def _tables(text: str, path: str) -> dict[str, list[tuple[int, str, dict[str, Any]]]]:
    """Each table of the file as (line of its header, how errors name it, its fields)."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, "not valid TOML", str(e)) from e
    unknown = sorted(set(data) - set(_TABLES))
    if unknown:
        raise _bad(
            path,
            "top level",
            f"unknown key(s) {', '.join(map(repr, unknown))}; write [[upstream]] and "
            "[[effect]] tables only",
        )
    out: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for table, fields in (("upstream", _UPSTREAM_FIELDS), ("effect", _EFFECT_FIELDS)):
        entries = data.get(table, [])
        if not isinstance(entries, list):
            raise _bad(path, "top level", f"{table} must be an array of tables: [[{table}]]")
        header = re.compile(r"\s*\[\[\s*" + table + r"\s*\]\]")
        lines = [i for i, line in enumerate(text.splitlines(), 1) if header.match(line)]
        found = []
        for i, entry in enumerate(entries, 1):
            line = lines[i - 1] if i <= len(lines) else 0
            where = f"{table} #{i}" + (f" (line {line})" if line else "")
            if not isinstance(entry, dict):
                raise _bad(path, where, "must be a table")
            extra = sorted(set(entry) - fields)
            if extra:
                raise _bad(
                    path,
                    where,
                    f"unknown field(s) {', '.join(map(repr, extra))}; it has "
                    f"{', '.join(sorted(fields))}",
                )
            found.append((line, where, entry))
        out[table] = found
    return out


def _upstream(path: str, line: int, where: str, t: dict[str, Any]) -> Upstream:
    name, url = t.get("name"), t.get("url")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _bad(path, where, "name must be 1-63 letters, digits, '_', '.' or '-'")
    if not isinstance(url, str):
        raise _bad(path, where, "url is required: the base URL, e.g. http://127.0.0.1:9000")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(path, where, f"url {url!r} must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise _bad(path, where, f"url {url!r} must have no query or fragment")
    timeout = t.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise _bad(path, where, "timeout must be a number of seconds, more than 0, at most 3600")
    return Upstream(name=name, url=url, timeout=float(timeout), line=line)


def _effect(
    path: str, index: int, line: int, where: str, t: dict[str, Any], names: set[str]
) -> EffectRule:
    for required in ("upstream", "path", "action_type"):
        if required not in t:
            raise _bad(path, where, f"{required!r} is required")
    if not isinstance(t["upstream"], str) or t["upstream"] not in names:
        raise _bad(
            path,
            where,
            f"upstream {t['upstream']!r} is not declared by an [[upstream]] "
            f"(declared: {', '.join(sorted(names)) or 'none'})",
        )
    action_type = t["action_type"]
    if not isinstance(action_type, str) or not _ACTION_TYPE.fullmatch(action_type):
        raise _bad(path, where, "action_type must be 1-100 letters, digits, '_', '.' or '-'")
    replay = t.get("replay", "never")
    if replay not in REPLAYS:
        raise _bad(path, where, f"replay {replay!r} must be one of {', '.join(REPLAYS)}")
    description = t.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    path_re = _regex(path, where, "path", t["path"])
    key = t.get("key")
    if key is not None:
        if not isinstance(key, str) or not key.strip():
            raise _bad(path, where, "key must be a non-empty template string")
        try:
            placeholders(key)
        except ValueError as e:
            raise _bad(path, where, f"key: {e}") from e
    return EffectRule(
        index=index,
        line=line,
        upstream=t["upstream"],
        method=_regex(path, where, "method", t.get("method", DEFAULT_METHODS)),
        path=path_re,
        action_type=action_type,
        key=key,
        replay=replay,
        description=description,
    )


def parse_http_rules(text: str, path: str | Path) -> HttpRules:
    """Compile a rules file's text; ``UsageError`` (``gateway.bad_rules``) names the table
    and its line."""
    path = str(path)
    tables = _tables(text, path)
    upstreams: dict[str, Upstream] = {}
    for line, where, t in tables["upstream"]:
        up = _upstream(path, line, where, t)
        if up.name in upstreams:
            raise _bad(path, where, f"upstream {up.name!r} is declared twice")
        upstreams[up.name] = up
    effects = tuple(
        _effect(path, i, line, where, t, set(upstreams))
        for i, (line, where, t) in enumerate(tables["effect"], 1)
    )
    return HttpRules(path=path, upstreams=upstreams, effects=effects)


def load_http_rules(path: str | Path) -> HttpRules:
    """Read and compile the rules file at ``path``; ``UsageError`` if absent or malformed."""
    path = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, "not UTF-8", f"byte {e.start}") from e
    rules = parse_http_rules(text, path)
    if not rules.upstreams:
        raise _bad(path, "top level", "no [[upstream]]: the gateway would refuse every request")
    return rules


def _regex(path: str, where: str, what: str, value: Any) -> re.Pattern[str]:
    return rule_regex(_bad, path, where, what, value).compiled()
