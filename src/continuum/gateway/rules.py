"""The MCP gateway's rules: which upstream tool calls are side effects to record.

Read from ``.continuum/gateway.toml`` (``continuum gateway mcp --rules FILE``), in the
style of the hooks' effect registry (``hooks/registry.py``)::

    run = "payments"                       # optional: the run the gateway records into
    read_only = ["get_.*", "list_.*"]      # optional: tool regexes (full match) that pass

    [[effect]]
    tool = "send_invoice"                  # regex, full match on the upstream tool's name
    match = { to = "@example\\.com$" }     # optional: argument -> regex (search)
    action_type = "send_invoice"
    key = "invoice:{invoice_id}"           # template over the call's arguments (+ {tool_name})
    replay = "never"                       # never | safe | idempotent | reconcile
    description = "an invoice e-mailed to a customer"

The first ``[[effect]]`` that matches a call decides; a call no effect matches passes
through untouched (``read_only`` names the tools known to be reads, for the reader and
for ``explain``; an effect rule still wins over it, the safer reading of a mistake).
``{{`` and ``}}`` are literal braces in a key. A malformed file is refused as a whole,
naming the rule and its line (``gateway.bad_rules``): the gateway does not start.

The hooks' registry parser is not imported (``hooks`` is a sibling of ``gateway``, not
below it); the shared part, the ``[[table]]`` reading with line numbers, is
``rule_tables``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuum.errors import UsageError

# The hooks' field checks and key rendering: one meaning of a rule for both.
from continuum.hooks.registry import (
    block_drift_field,
    key_text,
    probe_field,
    render,
    template_field,
)
from continuum.rule_tables import Entry, as_text, rule_regex, rule_tables

RULES_PATH = os.path.join(".continuum", "gateway.toml")
REPLAYS = ("never", "safe", "idempotent", "reconcile")
_FIELDS = {"tool", "match", "action_type", "key", "replay", "description", "probe", "block_drift"}
_TOP_LEVEL = frozenset({"run", "read_only"})


@dataclass(frozen=True)
class EffectRule:
    """One ``[[effect]]``, compiled."""

    index: int
    line: int
    tool: re.Pattern[str]
    action_type: str
    key: str
    replay: str = "never"
    match: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    description: str | None = None
    # A shell command template over the call's arguments (each value shell-quoted) that
    # checks the upstream's world for an unknown call: exit 0 it happened, 1 it did not.
    probe: str | None = None
    # Which recorded versions, changed, stop an interrupted safe/idempotent call from
    # running again (the gateway pins each call's tool definition as tool_schema_hash).
    block_drift: tuple[str, ...] = ("tool_schema_hash",)

    @property
    def where(self) -> str:
        return f"effect #{self.index}" + (f" (line {self.line})" if self.line else "")

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        if not self.tool.fullmatch(tool):
            return False
        for name, pattern in self.match.items():
            value = arguments.get(name)
            if value is None or not pattern.search(as_text(value)):
                return False
        return True


@dataclass(frozen=True)
class GatewayRules:
    """A whole rules file: ``path`` None when there is none (nothing is recorded)."""

    path: str | None
    effects: tuple[EffectRule, ...] = ()
    read_only: tuple[re.Pattern[str], ...] = ()
    run: str | None = None

    def find(self, tool: str, arguments: Mapping[str, Any]) -> EffectRule | None:
        """The first effect rule matching this call, or None (the call passes)."""
        for rule in self.effects:
            if rule.matches(tool, arguments):
                return rule
        return None

    def is_read_only(self, tool: str) -> bool:
        return any(p.fullmatch(tool) for p in self.read_only)


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(
        f"gateway rules {path}: {where}: {problem}",
        code="gateway.bad_rules",
        hint=f"fix {path}; the gateway does not start with a malformed rules file",
        path=path,
    )


def _rule(path: str, entry: Entry) -> EffectRule:
    where, table = entry.where, entry.table
    for required in ("tool", "action_type", "key"):
        if required not in table:
            raise _bad(path, where, f"{required!r} is required")
    action_type = table["action_type"]
    if not isinstance(action_type, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", action_type):
        raise _bad(path, where, "action_type must be 1-100 letters, digits, '_', '.' or '-'")
    replay = table.get("replay", "never")
    if replay not in REPLAYS:
        raise _bad(path, where, f"replay {replay!r} must be one of {', '.join(REPLAYS)}")
    match = table.get("match", {})
    if not isinstance(match, dict):
        raise _bad(path, where, "match must be a table of argument = regex")
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    key = template_field(_bad, path, where, "key", table["key"])
    probe = table.get("probe")
    if probe is not None:
        probe = probe_field(_bad, path, where, probe)
    return EffectRule(
        index=entry.number,
        line=entry.line,
        tool=_regex(path, where, "tool", table["tool"]),
        action_type=action_type,
        key=key,
        replay=replay,
        match={str(k): _regex(path, where, f"match.{k}", v) for k, v in match.items()},
        description=description,
        probe=probe,
        block_drift=tuple(
            dict.fromkeys(block_drift_field(_bad, path, where, table.get("block_drift")))
        ),
    )


def _line_of(text: str, key: str) -> str:
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*" + re.escape(key) + r"\s*=", line):
            return f"{key} (line {i})"
    return key


def parse_rules(text: str, path: str | Path) -> GatewayRules:
    """Compile a rules file; ``UsageError`` (``gateway.bad_rules``) names the rule and line."""
    import tomllib

    path = str(path)
    entries = rule_tables(
        text, path, "effect", _bad, label="effect", fields=_FIELDS, top_level=_TOP_LEVEL
    )
    data = tomllib.loads(text)  # rule_tables has refused text that is not TOML
    run = data.get("run")
    if run is not None and (not isinstance(run, str) or not run.strip()):
        raise _bad(path, _line_of(text, "run"), "run must be a non-empty string")
    read_only = data.get("read_only", [])
    if not isinstance(read_only, list):
        raise _bad(path, _line_of(text, "read_only"), "read_only must be a list of tool regexes")
    patterns = tuple(
        _regex(path, _line_of(text, "read_only"), f"read_only[{i}]", p)
        for i, p in enumerate(read_only)
    )
    return GatewayRules(
        path=path, effects=tuple(_rule(path, e) for e in entries), read_only=patterns, run=run
    )


def load_rules(path: str | Path | None) -> GatewayRules:
    """The rules at ``path`` (default ``.continuum/gateway.toml``). The default path may be
    absent (nothing is recorded); a path given explicitly must exist."""
    explicit = path is not None
    where = str(path) if path is not None else RULES_PATH
    try:
        raw = Path(where).read_bytes()
    except FileNotFoundError as e:
        if not explicit:
            return GatewayRules(path=None)
        raise _bad(where, "cannot be read", "no such file") from e
    except OSError as e:
        raise _bad(where, "cannot be read", e.strerror or type(e).__name__) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(where, "not UTF-8", f"byte {e.start}") from e
    return parse_rules(text, where)


def render_key(rule: EffectRule, tool: str, arguments: Mapping[str, Any]) -> str:
    """The ledger key of a call: the rule's template filled from the call's arguments
    (and ``{tool_name}``), whitespace runs collapsed, control and invisible characters
    escaped, a long key shortened to a prefix plus a digest of the whole. A missing
    argument is a ``UsageError`` (``gateway.missing_argument``): the call is refused."""

    def missing(name: str | None) -> UsageError:
        return UsageError(
            f"the call to {tool!r} has no argument {name!r} for the key "
            f"{rule.key!r} of {rule.where}",
            code="gateway.missing_argument",
            hint="pass the argument, or fix the rule's key or match so it only "
            "matches calls that have it",
        )

    return key_text(render(rule.key, {"tool_name": tool, **arguments}, missing=missing))


def explain(rules: GatewayRules) -> list[str]:
    """One line per rule, for a person."""
    if rules.path is None:
        return [f"no gateway rules ({RULES_PATH} is absent): every call passes through"]
    out = [f"{len(rules.effects)} effect rule(s) in {rules.path}; the first that matches decides"]
    for r in rules.effects:
        out.append(
            f"{r.where}: tool /{r.tool.pattern}/ -> {r.action_type} key {r.key!r} replay {r.replay}"
        )
    if rules.read_only:
        out.append("read-only: " + ", ".join(f"/{p.pattern}/" for p in rules.read_only))
    return out


def _regex(path: str, where: str, what: str, value: Any) -> re.Pattern[str]:
    return rule_regex(_bad, path, where, what, value).compiled()
