"""The effect registry: which tool calls of a coding host are side effects to gate.

Read from ``.continuum/effects.toml`` in the project. Each ``[[effect]]`` table is a rule::

    [[effect]]
    tool = "Bash"                          # regex, full match on the host's tool name
    match = { command = "git push|curl -X POST" }   # optional: tool_input field -> regex (search)
    shell = "git push"                     # optional: the command line runs it (parsed)
    shell_options = ["-C"]                 # options of it that take a value
    action_type = "deploy"
    key = "{command}"                      # template over tool_input fields (and {cwd})
    replay = "never"                       # never | safe | idempotent | reconcile
    probe = "git ls-remote origin | grep -q {git_head}"   # optional

The first rule that matches a call decides. Templates name top-level ``tool_input``
fields in braces, plus ``{cwd}``, ``{tool_name}``, ``{session_id}`` and ``{git_head}``
(the HEAD commit of ``cwd`` when the call was gated); ``{{`` and ``}}`` are literal
braces. In a ``probe``, every substituted value is shell-quoted: tool input is written
by the model and must never become shell syntax.

This module is on the hot path of every tool call, so it imports only the standard
library and the error tree: a call that matches no rule never loads the store.
"""

from __future__ import annotations

import os

from continuum.errors import UsageError
from continuum.rule_tables import (
    Bad,
    Entry,
    Regex,
    as_text,
    rule_regex,
    rule_tables,
)

TYPE_CHECKING = False  # no typing, dataclasses, pathlib or hashlib on the hot path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import Any

REGISTRY_PATH = os.path.join(".continuum", "effects.toml")
REPLAYS = ("never", "safe", "idempotent", "reconcile")
BUILTINS = ("cwd", "tool_name", "session_id", "git_head", "agent_id", "agent_type")
_FIELDS = {
    "tool",
    "match",
    "shell",
    "shell_options",
    "action_type",
    "key",
    "replay",
    "probe",
    "description",
    "block_drift",
}
# The version fields a rule may say block a replay when they drift (ledger/core.py).
_VERSION_FIELDS = ("prompt_hash", "tool_schema_hash", "model")
# A plain field name, and a shell variable assignment's start: [A-Za-z_][A-Za-z0-9_]*
# (checked character by character: no pattern compiled on a tool call for them).
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")


def is_name(text: str) -> bool:
    """Whether ``text`` is a plain field name (``[A-Za-z_][A-Za-z0-9_]*``, whole)."""
    return bool(text) and text[0] in _NAME_START and all(c in _NAME_CHARS for c in text)


def assigns(word: str) -> bool:
    """Whether a shell word starts with a variable assignment (``NAME=``)."""
    i = 0
    while i < len(word) and word[i] in _NAME_CHARS:
        i += 1
    return 0 < i < len(word) and word[i] == "=" and word[0] in _NAME_START


KEY_LIMIT = 200  # longer rendered keys keep a prefix and a digest of the whole
# Compiled on first use (a key is rendered only for a registered call).
_UNSAFE_IN_KEY = (
    r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    r"\u2060-\u206f\ufeff\ufff9-\ufffb]"
)


class Rule:
    """One ``[[effect]]`` of the registry, compiled (a plain class: ``dataclasses`` costs an
    import of ``inspect`` on every tool call)."""

    __slots__ = (
        "action_type",
        "block_drift",
        "description",
        "index",
        "key",
        "line",
        "match",
        "probe",
        "replay",
        "shell",
        "shell_options",
        "tool",
    )

    def __init__(
        self,
        *,
        index: int,
        line: int,
        tool: Regex,
        action_type: str,
        key: str,
        replay: str = "never",
        match: Mapping[str, Regex] | None = None,
        probe: str | None = None,
        description: str | None = None,
        shell: tuple[tuple[str, ...], ...] = (),
        shell_options: frozenset[str] = frozenset(),
        block_drift: tuple[str, ...] = ("tool_schema_hash",),
    ) -> None:
        self.index = index  # 1-based position among the rules
        self.line = line  # line of its [[effect]] header (0 if unknown)
        self.tool = tool
        self.action_type = action_type
        self.key = key
        self.replay = replay
        self.match: Mapping[str, Regex] = match or {}
        self.probe = probe
        self.description = description
        # Commands this rule gates, as words (("git", "push"), ...), matched on the parsed
        # `command` (shell_commands), and the options of theirs that take a value.
        self.shell = shell
        self.shell_options = shell_options
        # Which recorded versions, changed, stop an interrupted safe/idempotent call from
        # running again (the ledger's version_drift); the tool schema by default.
        self.block_drift = block_drift

    def __repr__(self) -> str:
        return f"Rule({self.where}, {self.action_type!r})"

    @property
    def where(self) -> str:
        return f"effect #{self.index}" + (f" (line {self.line})" if self.line else "")

    def matches(self, tool_name: str, tool_input: Mapping[str, Any]) -> bool:
        # The cheap tests first: the tool's name, then the shell commands; the argument
        # patterns (compiled on first use) only for a call that passed those.
        if not self.tool.fullmatch(tool_name):
            return False
        if self.shell:
            command = tool_input.get("command")
            if not isinstance(command, str) or not may_run(command, self.shell):
                return False
            if not any(
                runs(words, wanted, self.shell_options)
                for words in shell_commands(command)
                for wanted in self.shell
            ):
                return False
        for name, pattern in self.match.items():
            value = tool_input.get(name)
            if value is None or not pattern.search(as_text(value)):
                return False
        return True

    def names(self) -> set[str]:
        """The placeholders its key and probe use."""
        return set(placeholders(self.key)) | set(placeholders(self.probe or ""))

    def shape(self) -> tuple[Any, ...]:
        """Every field, comparable: two rules of one shape gate and record alike."""
        return (
            self.index,
            self.line,
            self.tool.pattern,
            self.action_type,
            self.key,
            self.replay,
            sorted((k, p.pattern) for k, p in self.match.items()),
            self.probe,
            self.description,
            self.shell,
            sorted(self.shell_options),
            self.block_drift,
        )


class Registry:
    __slots__ = ("path", "rules")

    def __init__(self, path: str | None, rules: tuple[Rule, ...] = ()) -> None:
        self.path = path  # None: there is no registry file
        self.rules = rules

    def find(self, tool_name: str, tool_input: Mapping[str, Any]) -> Rule | None:
        """The first rule matching this call, or None (the call is not gated)."""
        for rule in self.rules:
            if rule.matches(tool_name, tool_input):
                return rule
        return None


# Words that run the command after them (with options, and for some an argument).
_WRAPPERS = {
    "sudo": 0,
    "doas": 0,
    "env": 0,
    "nohup": 0,
    "time": 0,
    "nice": 0,
    "exec": 0,
    "command": 0,
    "builtin": 0,
    "xargs": 0,
    "timeout": 1,  # its duration
}
# What an action type may hold (as the ledger's usage.bad_action_type check; a set, not a
# pattern: no regex compiled on a tool call for it).
_ACTION_TYPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_SEPARATORS = frozenset({";", "&", "&&", "|", "||", "|&", "\n", "(", ")", "`", ";;"})


# What can make a shell word differ from the text it was written as (quotes, escapes).
_QUOTING = ("'", '"', "\\")


def may_run(text: str, wanted: Sequence[tuple[str, ...]]) -> bool:
    """False only when no simple command of ``text`` can run a program of ``wanted``
    (``runs`` compares the program word with ``wanted[0]`` exactly), decided without
    splitting the text (which loads ``shlex`` and ``re``). Without quotes and
    backslashes every word ``shell_commands`` reads, and so every program name (a word,
    or the part of it after its last ``/``), is a stretch of the text as written: a
    program name absent from the text cannot be run by it. With quotes or a backslash a
    word can be spelled in pieces (``g'i't``): True, and the text is split."""
    if any(q in text for q in _QUOTING):
        return True
    return any(w and w[0] in text for w in wanted)


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell command line, as words: split at line breaks, ``;``,
    ``&``, ``&&``, ``|``, ``||``, parentheses and backquotes (``$(...)`` too), with
    leading variable assignments and wrappers (``sudo``, ``env``, ``timeout 10``, ...)
    dropped. A reading of the text, not a shell: ``eval``, variables and scripts are not
    followed. A line that cannot be split (an open quote) is read as whitespace-separated
    words, so a malformed line is still judged."""
    import shlex

    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()\n`")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = text.replace(";", " ; ").replace("|", " | ").replace("&", " & ").split()
    out: list[list[str]] = []
    current: list[str] = []
    for token in [*tokens, ";"]:
        parts = [token] if token not in _SEPARATORS and token != "\n" else []
        if parts:
            current.append(token)
            continue
        words = _unwrapped(current)
        if words:
            out.append(words)
        current = []
    return out


def _unwrapped(words: list[str]) -> list[str]:
    i = 0
    while i < len(words):
        word = words[i]
        base = word.rsplit("/", 1)[-1]
        if assigns(word):
            i += 1
        elif base in _WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith("-") or assigns(words[i])):
                i += 1 + (words[i] in ("-n", "-u", "-g", "-s", "-k") and base != "env")
            i += _WRAPPERS[base]
        elif base.startswith("python") and i + 2 < len(words) and words[i + 1] == "-m":
            return [words[i + 2], *words[i + 3 :]]  # python -m twine upload
        else:
            return [base, *words[i + 1 :]]
    return []


def runs(words: list[str], wanted: tuple[str, ...], value_options: frozenset[str]) -> bool:
    """Whether the simple command ``words`` runs ``wanted`` (a program and the first
    words of its arguments, such as ``git push``), options skipped: ``git -C dir push``
    and ``kubectl -n prod apply`` run ``git push`` and ``kubectl apply`` when ``-C`` and
    ``-n`` are among ``value_options`` (options followed by their value)."""
    if not words or words[0] != wanted[0]:
        return False
    rest = iter(words[1:])
    for expected in wanted[1:]:
        for word in rest:
            if word == "--":
                continue
            if word.startswith("-") and len(word) > 1:
                if word in value_options:
                    next(rest, None)
                continue
            if word != expected:
                return False
            break
        else:
            return False
    return True


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(
        f"effect registry {path}: {where}: {problem}",
        code="hooks.bad_registry",
        hint=f"fix {path} (`continuum hooks effects --check` explains every rule); "
        "until then every tool call that could be an effect is refused",
        path=path,
    )


def _token_at(template: str, i: int) -> tuple[int, str | None] | None:
    """The template token at ``i`` as the pattern ``\\{\\{|\\}\\}|\\{([^{}]*)\\}|[{}]``
    would match it there: its end and its name (None for ``{{``, ``}}`` and a lone brace),
    or None when no token starts at ``i``. Read by hand: no `re` on a tool call."""
    c = template[i]
    if c not in "{}":
        return None
    if template.startswith("{{", i) or template.startswith("}}", i):
        return i + 2, None
    if c == "{":
        j = i + 1
        while j < len(template) and template[j] not in "{}":
            j += 1
        if j < len(template) and template[j] == "}":
            return j + 1, template[i + 1 : j]
    return i + 1, None


def _tokens(template: str) -> list[tuple[int, int, str | None]]:
    """Every token of ``template``, left to right, as ``finditer`` finds them: (start,
    end, name)."""
    out, i = [], 0
    while i < len(template):
        found = _token_at(template, i)
        if found is None:
            i += 1
            continue
        end, name = found
        out.append((i, end, name))
        i = end
    return out


def placeholders(template: str) -> list[str]:
    """The names a template uses, in order (``{{``/``}}`` are literal braces)."""
    out = []
    for start, end, name in _tokens(template):
        token = template[start:end]
        if token in ("{{", "}}"):
            continue
        if name is None or not is_name(name):
            raise ValueError(
                f"{token!r} is not a placeholder: write {{field}} with a plain "
                "field name, or {{ and }} for literal braces"
            )
        out.append(name)
    return out


def quoted_placeholders(template: str) -> list[str]:
    """The placeholders of a shell ``template`` that stand inside single or double quotes,
    where the shell quoting of their values does not hold (``"{x}"`` with ``x = $(cmd)``
    runs ``cmd``): a probe must put each one outside quotes."""
    found: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(template):
        c = template[i]
        if quote != "'" and c == "\\":
            i += 2
            continue
        if c in "'\"" and quote in (None, c):
            quote = None if quote == c else c
        elif c == "{" and quote is not None:
            token = _token_at(template, i)
            if token is not None and token[1] is not None:
                found.append(token[1])
        i += 1
    return found


def template_field(bad: Bad, path: str, where: str, what: str, value: Any) -> str:
    """A rule's template field (a key, a probe), or ``bad(...)`` saying what is wrong."""
    if not isinstance(value, str) or not value.strip():
        raise bad(path, where, f"{what} must be a non-empty template string")
    try:
        placeholders(value)
    except ValueError as e:
        raise bad(path, where, f"{what}: {e}") from e
    return value


def block_drift_field(bad: Bad, path: str, where: str, value: Any) -> tuple[str, ...]:
    """A rule's ``block_drift``: which recorded versions, changed, stop a re-run (shared
    with the gateway's rules). Default: the tool's schema alone."""
    block = ["tool_schema_hash"] if value is None else value
    if not isinstance(block, list) or not all(b in _VERSION_FIELDS for b in block):
        raise bad(
            path,
            where,
            f"block_drift must be a list of any of {', '.join(map(repr, _VERSION_FIELDS))}",
        )
    return tuple(block)


def probe_field(bad: Bad, path: str, where: str, value: Any) -> str:
    """A rule's probe: a template whose every placeholder stands outside quotes (there the
    shell quoting of the values holds), or ``bad(...)``. Shared with the gateways."""
    template = template_field(bad, path, where, "probe", value)
    inside = quoted_placeholders(template)
    if inside:
        raise bad(
            path,
            where,
            f"probe: {', '.join('{' + n + '}' for n in inside)} inside quotes; write each "
            "placeholder outside quotes (continuum shell-quotes every value itself)",
        )
    return template


def _template(path: str, where: str, what: str, value: Any) -> str:
    return template_field(_bad, path, where, what, value)


def _rule(path: str, entry: Entry, checked: bool = False) -> Rule:
    index, line, where, table = entry.number, entry.line, entry.where, entry.table
    for required in ("tool", "action_type", "key"):
        if required not in table:
            raise _bad(path, where, f"{required!r} is required")
    action_type = table["action_type"]
    if not (
        isinstance(action_type, str)
        and 1 <= len(action_type) <= 100
        and _ACTION_TYPE_CHARS.issuperset(action_type)
    ):
        raise _bad(path, where, "action_type must be 1-100 letters, digits, '_', '.' or '-'")
    replay = table.get("replay", "never")
    if replay not in REPLAYS:
        raise _bad(path, where, f"replay {replay!r} must be one of {', '.join(REPLAYS)}")
    match = table.get("match", {})
    if not isinstance(match, dict):
        raise _bad(path, where, "match must be a table of tool_input field = regex")
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    probe = table.get("probe")
    shell = table.get("shell", [])
    if isinstance(shell, str):
        shell = [shell]
    if not isinstance(shell, list) or not all(isinstance(c, str) and c.split() for c in shell):
        raise _bad(path, where, 'shell must be a command ("git push") or a list of them')
    options = table.get("shell_options", [])
    if not isinstance(options, list) or not all(
        isinstance(o, str) and o.startswith("-") for o in options
    ):
        raise _bad(path, where, 'shell_options must be a list of options such as "-C"')
    if options and not shell:
        raise _bad(path, where, "shell_options needs shell")
    block = block_drift_field(_bad, path, where, table.get("block_drift"))
    return Rule(
        index=index,
        line=line,
        tool=_regex(path, where, "tool", table["tool"], checked),
        action_type=action_type,
        key=_template(path, where, "key", table["key"]),
        replay=replay,
        match={str(k): _regex(path, where, f"match.{k}", v, checked) for k, v in match.items()},
        probe=None if probe is None else probe_field(_bad, path, where, probe),
        description=description,
        shell=tuple(tuple(c.split()) for c in shell),
        shell_options=frozenset(options),
        block_drift=tuple(dict.fromkeys(block)),
    )


def parse_registry(text: str, path: str | Path) -> Registry:
    """Compile the registry text; ``UsageError`` (``hooks.bad_registry``) names the line."""
    path = str(path)
    return registry_of(path, registry_entries(text, path))


def registry_entries(text: str, path: str) -> list[Entry]:
    """The registry's ``[[effect]]`` tables as TOML gives them (the parse step)."""
    return rule_tables(text, path, "effect", _bad, label="effect", fields=_FIELDS)


def registry_of(path: str, entries: list[Entry], *, checked: bool = False) -> Registry:
    """The registry built from its tables, each rule checked; its patterns are compiled to
    check them unless ``checked`` (tables a person accepted: compiled on first use)."""
    return Registry(path=path, rules=tuple(_rule(path, e, checked) for e in entries))


def read_registry(path: str) -> bytes | None:
    """The registry file's bytes; None when there is none."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e


def registry_text(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, "not UTF-8", f"byte {e.start}") from e


def load_registry(project: str | Path) -> Registry:
    """The project's registry; an absent file is an empty registry (nothing is gated)."""
    path = os.path.join(project, REGISTRY_PATH)
    raw = read_registry(path)
    if raw is None:
        return Registry(path=None)
    return parse_registry(registry_text(raw, path), path)


def render(
    template: str,
    values: Mapping[str, Any],
    *,
    quote: bool = False,
    missing: Callable[[str | None], Exception] | None = None,
) -> str:
    """Fill ``template`` from ``values``; a missing (or None) field is a ``UsageError``,
    or the error ``missing(name)`` gives (the gateways name the call and their rule)."""

    def fill(token: str, name: str | None) -> str:
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        if name is None or name not in values or values[name] is None:
            if missing is not None:
                raise missing(name)
            raise UsageError(
                f"the call has no {name!r} for the template {template!r}",
                code="hooks.missing_field",
                hint="fix the rule's template in the effect registry, or its match "
                "so it only matches calls that have the field",
            )
        text = as_text(values[name])
        if quote:
            import shlex

            return shlex.quote(text)
        return text

    out, at = [], 0
    for start, end, name in _tokens(template):
        out += [template[at:start], fill(template[start:end], name)]
        at = end
    return "".join([*out, template[at:]])


def render_key(template: str, values: Mapping[str, Any]) -> str:
    """The ledger key for a call: the template filled (``key_text`` then makes it a key)."""
    return key_text(render(template, values))


def key_text(rendered: str) -> str:
    """A filled key template as a ledger key: whitespace runs collapsed (a multi-line
    command is one line), control and invisible characters escaped, and a long key
    shortened to a prefix plus a digest of the whole, so the same call always gives the
    same key. Shared with the gateway's rules."""
    import re

    text = " ".join(rendered.split())
    text = re.sub(_UNSAFE_IN_KEY, lambda m: f"\\u{ord(m.group(0)):04x}", text)
    if len(text) > KEY_LIMIT:
        from continuum.digest import sha256_hex

        digest = sha256_hex(text.encode("utf-8"))[:16]
        text = f"{text[: KEY_LIMIT - 24]}... #{digest}"
    return text or "-"


def render_probe(template: str, values: Mapping[str, Any]) -> str:
    """A probe command with every substituted value shell-quoted."""
    return render(template, values, quote=True)


def explain(registry: Registry) -> list[str]:
    """One paragraph per rule, for `continuum hooks effects --check`."""
    if not registry.rules:
        where = registry.path or REGISTRY_PATH
        return [f"no effect rules ({where} is absent or empty): no tool call is gated"]
    out = [
        f"{len(registry.rules)} rule(s) in {registry.path}; the first rule that matches a "
        "call decides:"
    ]
    for r in registry.rules:
        cond = [f"the tool name fully matches /{r.tool.pattern}/"]
        cond += [f"tool_input.{k} contains a match of /{p.pattern}/" for k, p in r.match.items()]
        if r.shell:
            skipped = f" (options skipped; with a value: {', '.join(sorted(r.shell_options))})"
            cond.append(
                "the command line runs "
                + " or ".join(f"`{' '.join(words)}`" for words in r.shell)
                + (skipped if r.shell_options else " (options skipped)")
                + " in one of its lines or ; && || | segments"
            )
        out.append(f"{r.where}: {r.description or r.action_type}")
        out.append(f"  gated when {' and '.join(cond)}")
        out.append(
            f"  recorded as action type {r.action_type!r} with key {r.key!r}; "
            f"replay {r.replay}" + _replay_meaning(r.replay)
        )
        if r.probe:
            out.append(
                f"  probe (settles an unknown outcome: exit 0 happened, 1 did not, "
                f"other: still unknown): {r.probe}"
            )
    return out


def _replay_meaning(replay: str) -> str:
    return {
        "never": " (an interrupted call is never re-run: it becomes unknown)",
        "safe": " (an interrupted call may simply run again)",
        "idempotent": " (an interrupted call may run again; the receiver deduplicates)",
        "reconcile": " (an interrupted call must be reconciled first)",
    }[replay]


def _regex(path: str, where: str, what: str, value: Any, checked: bool) -> Regex:
    return rule_regex(_bad, path, where, what, value, checked=checked)
