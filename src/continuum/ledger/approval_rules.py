"""Which calls need a person's decision: the rules of ``.continuum/approvals.toml``.

Each ``[[approval]]`` table is one rule::

    [[approval]]
    action_type = "wire_money"                 # the ledger's action type, exactly
    when = { amount = ">= 10000" }             # optional: argument path -> number test
    description = "transfers of 10,000 or more"

    [[approval]]
    effect = "git_push"                        # a host effect rule's action_type (hooks)
    match = { input.command = "--force" }      # optional: argument path -> regex (search)

Each ``[[branch]]`` table declares the risk of plan branches (``Continuum.resolve_branch``,
``continuum_resolve_branch``)::

    [[branch]]
    branch = "pay_.*"                          # regex (full match) on the branch id
    risk = "high"                              # high | low
    description = "anything that moves money"

Each ``[[retry]]`` table caps new attempts (a retried or re-run action)::

    [[retry]]
    action_type = "send_invoice"
    max_attempts = 3                           # attempts of one action, the first included

    [[retry]]
    run_retries = 10                           # new attempts in one run, all types together

An intercept that would start an attempt past a cap answers ``retry_cap_reached`` and
writes nothing; the counts are the ledger's (an action's identity, not its spelling), so
they hold across crashes and processes. The tightest matching rule applies.

A branch's risk is the highest of what the call declares, what any matching rule says and
what the branch was declared before: a call cannot lower it.

A call needs approval when any rule matches it: its action type is the rule's
``action_type`` (or, for ``effect``, the call came through the host hook gate under the
effect rule with that action type), every ``match`` pattern is found in the text of that
argument, and every ``when`` condition holds for it. Keys of both are paths into the
arguments (``amount``, ``input.command``: TOML's dotted keys and nested tables both work).

Rules judge the action, not its spelling: each condition is tried on the arguments the
ledger derives the action's identity from (``ledger.normalize_arguments``: text trimmed
and in NFC, whole floats as integers, paths absolute; the intercept passes them in as
``canonical``) and on the arguments as given; holding on either is enough, so nothing a
rule matched as given escapes it. ``50000``, ``50000.0``, ``5e4`` and ``" 50000"`` are
judged alike. ``when`` compares numbers as numbers, exactly (decimal, no float
rounding): ``OP NUMBER`` with ``>=``, ``>``, ``<=``, ``<``, ``==`` or ``!=``
(``">= 10000"``; a list of them must all hold: ``[">= 10000", "< 1e6"]``). A JSON number,
or a string that spells one as JSON does (``"50000"``, ``"5e4"``), is that number. A
``match`` regex searches text; a value that is not text is matched as its JSON.

Fail closed: a call that does not have a named field at all **counts as a match**
(leaving an argument out never escapes a rule), and so does a ``when`` field whose value
is not a number (``"50,000"``, ``"fifty thousand"``, ``true``, ``null``, a list): spelling
an amount oddly never escapes a rule either.

Where the rules come from: ``.continuum/approvals.toml`` in the working directory of the
server or command (for the host hooks: the project directory), and the same file beside
a SQLite store (``/data/.continuum/approvals.toml`` for ``/data/agent.db``). When both
exist, both apply: a call matched by either needs approval, so neither file can switch
off a rule of the other. A malformed file is refused with its line, and until it is fixed
every intercept is refused (fail closed); it is read again when it changes, each read of
one version of the file (a rewrite during the read is read again). A file that held rules
and disappears (or is emptied) refuses the calls its last rules named
(``approvals.rules_missing``) until it is back.
"""

from __future__ import annotations

import math
import operator
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from continuum.errors import (
    UsageError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.rule_tables import Entry, rule_tables
from continuum.untrusted import check_identifier

if TYPE_CHECKING:
    from decimal import Decimal

APPROVALS_FILE = os.path.join(".continuum", "approvals.toml")
_FIELDS = {"action_type", "effect", "match", "when", "description"}
_BRANCH_FIELDS = {"branch", "risk", "description"}
_RETRY_FIELDS = {"action_type", "max_attempts", "run_retries", "description"}
RISKS = ("low", "high")
_MISSING = object()
AS_GIVEN: Any = object()  # ``canonical`` not given: judge the arguments as given only

# A number as JSON spells it (RFC 8259 section 6), in an argument given as text.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_MAX_NUMBER_CHARS = 400  # longer text is not read as a number (so it counts as a match)
# A condition as a rule writes it: an operator, then a number (``_`` may group digits).
_DIGITS = r"[0-9](?:_?[0-9])*"
_CONDITION = re.compile(
    rf"\s*(>=|<=|==|!=|>|<)\s*(-?{_DIGITS}(?:\.{_DIGITS})?(?:[eE][+-]?[0-9]+)?)\s*"
)
_OPS = {  # on two Decimals, each is Decimal's own comparison
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}


def number_of(value: Any) -> Decimal | None:
    """``value`` as an exact number, or None when it is not one: a JSON number (not a
    boolean), or text that spells one as JSON does (``"50000"``, ``"5e4"``, ``" -1.5 "``;
    not ``"50,000"``, ``"+5"``, ``"NaN"``). A float is read as it is written (``0.1`` is
    ``0.1``, not its binary neighbour)."""
    from decimal import Decimal  # loaded when a rule compares numbers

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= _MAX_NUMBER_CHARS:
        text = value.strip(" \t\n\r")  # the whitespace JSON allows around a number
        if _JSON_NUMBER.fullmatch(text):
            return Decimal(text)
    return None


class Condition(NamedTuple):
    """One numeric test of a ``when`` table: ``OP NUMBER``."""

    op: str
    number: Decimal
    text: str  # as written in the rule, for ``describe``

    def holds(self, value: Decimal) -> bool:
        return bool(_OPS[self.op](value, self.number))


class ApprovalRule(NamedTuple):
    """One ``[[approval]]`` table, compiled."""

    path: str
    index: int  # type: ignore[assignment]  # 1-based among the file's rules (shadows tuple.index)
    line: int  # its [[approval]] header (0 if unknown)
    action_type: str | None
    effect: str | None
    match: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = ()
    description: str | None = None
    when: tuple[tuple[tuple[str, ...], tuple[Condition, ...]], ...] = ()
    # A [[branch]] table: which branches (a full-match regex on the id) and their risk.
    # It gates no call (``matches`` is False for it).
    branch: re.Pattern[str] | None = None
    risk: str | None = None
    # A [[retry]] table: at most ``max_attempts`` attempts of its action type, or at most
    # ``run_retries`` new attempts in a run (all types). It gates no call either.
    retry: bool = False
    max_attempts: int | None = None
    run_retries: int | None = None

    @property
    def where(self) -> str:
        label = "branch rule" if self.branch is not None else "retry rule" if self.retry else "rule"
        return f"{self.path} {label} #{self.index}" + (f" (line {self.line})" if self.line else "")

    def describe(self) -> str:
        """What the rule gates, in one line (recorded with each approval it asks for)."""
        if self.branch is not None:
            text = f"branches /{self.branch.pattern}/ are {self.risk} risk"
            return f"{self.where}: {text}" + (f" ({self.description})" if self.description else "")
        if self.retry:
            text = (
                f"at most {self.max_attempts} attempt(s) of {self.action_type}"
                if self.max_attempts is not None
                else f"at most {self.run_retries} new attempt(s) in a run"
            )
            return f"{self.where}: {text}" + (f" ({self.description})" if self.description else "")
        what = (
            f"action type {self.action_type}"
            if self.effect is None
            else f"host effect {self.effect}"
        )
        conds = [f"{'.'.join(path)} ~ /{pattern.pattern}/" for path, pattern in self.match]
        conds += [f"{'.'.join(path)} {c.op} {c.text}" for path, tests in self.when for c in tests]
        text = what + (f" where {' and '.join(conds)}" if conds else "")
        return f"{self.where}: {text}" + (f" ({self.description})" if self.description else "")

    def matches(
        self,
        action_type: str,
        arguments: Any,
        effect: str | None = None,
        *,
        canonical: Any = AS_GIVEN,
    ) -> bool:
        """Whether this rule asks a person to decide the call. ``canonical``: the arguments
        as the ledger normalizes them for the action's identity; each condition holding on
        them or on ``arguments`` is enough (two spellings of one action are judged alike)."""
        if self.branch is not None or self.retry:
            return False  # a branch or retry rule declares limits, it gates no call
        if self.effect is not None:
            if effect != self.effect or action_type != self.effect:
                return False
        elif action_type != self.action_type:
            return False
        views = (arguments,) if canonical is AS_GIVEN else (arguments, canonical)
        for path, pattern in self.match:
            if not any(_found(pattern, _at(view, path)) for view in views):
                return False
        for path, tests in self.when:
            if not any(_holds(tests, _at(view, path)) for view in views):
                return False
        return True


class ApprovalRules(NamedTuple):
    """The rules that apply, and the files they were read from."""

    rules: tuple[ApprovalRule, ...] = ()
    sources: tuple[str, ...] = ()

    def find(
        self,
        action_type: str,
        arguments: Any,
        effect: str | None = None,
        *,
        canonical: Any = AS_GIVEN,
    ) -> ApprovalRule | None:
        """The first rule that asks a person to decide this call, or None. ``canonical``:
        the arguments the ledger derives the action's identity from (``ApprovalRule.
        matches``); the ledger's intercept always passes them."""
        for rule in self.rules:
            if rule.matches(action_type, arguments, effect, canonical=canonical):
                return rule
        return None

    def branch_rule(self, branch_id: str) -> ApprovalRule | None:
        """The first ``[[branch]]`` rule that makes ``branch_id`` high risk, else the first
        that matches it at all, else None."""
        found = [r for r in self.rules if r.branch is not None and r.branch.fullmatch(branch_id)]
        return next((r for r in found if r.risk == "high"), found[0] if found else None)

    def retry_caps(self, action_type: str) -> tuple[ApprovalRule | None, ApprovalRule | None]:
        """The tightest ``[[retry]]`` rule for ``action_type`` (``max_attempts``) and the
        tightest run-wide one (``run_retries``), each None when no rule says."""
        return _tightest(self.rules, action_type)

    def explain(self) -> list[str]:
        if not self.rules:
            where = ", ".join(self.sources) or APPROVALS_FILE
            return [f"no approval rules ({where}): no call needs a person's decision"]
        return [
            f"{len(self.rules)} rule(s) from {', '.join(self.sources)}; a call matched by "
            "any of them waits for a person's decision:",
            *(f"  {r.describe()}" for r in self.rules),
        ]


def _at(arguments: Any, path: tuple[str, ...]) -> Any:
    value = arguments
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _found(pattern: re.Pattern[str], value: Any) -> bool:
    if value is _MISSING:
        return True  # a missing field matches: leaving it out never escapes the rule
    return pattern.search(value if isinstance(value, str) else _as_text(value)) is not None


def _holds(tests: tuple[Condition, ...], value: Any) -> bool:
    number = None if value is _MISSING else number_of(value)
    if number is None:
        return True  # missing, or not a number: spelling it oddly never escapes the rule
    return all(test.holds(number) for test in tests)


def _as_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError, UsageError):
        return str(value)


def _bad(path: str, where: str, problem: str) -> UsageError:
    return UsageError(
        f"approval rules {path}: {where}: {problem}",
        code="approvals.bad_rules",
        hint=f"fix {path} (`continuum approvals --rules` shows what is loaded); "
        "until then every intercept is refused",
        path=path,
    )


def _flatten(
    table: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for name, value in table.items():
        path = prefix + tuple(part for part in str(name).split(".") if part)
        if isinstance(value, Mapping):
            out += _flatten(value, path)
        else:
            out.append((path, value))
    return out


def _name(path: str, where: str, what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(path, where, f"{what} must be a string")
    try:
        return check_identifier(
            unicodedata.normalize("NFC", value.strip()),
            what=what,
            code="approvals.bad_rules",
            max_length=200,
            hint="",
        )
    except UsageError as e:
        raise _bad(path, where, e.message) from None


def _rule(path: str, entry: Entry) -> ApprovalRule:
    index, line, where, table = entry.number, entry.line, entry.where, entry.table
    action_type = (
        _name(path, where, "action_type", table["action_type"]) if "action_type" in table else None
    )
    effect = _name(path, where, "effect", table["effect"]) if "effect" in table else None
    if action_type is None and effect is None:
        raise _bad(
            path,
            where,
            'name what it gates: action_type = "..." (any path) or '
            'effect = "..." (a host effect rule\'s action_type)',
        )
    if action_type is not None and effect is not None and action_type != effect:
        raise _bad(
            path,
            where,
            f"action_type {action_type!r} and effect {effect!r} differ, so "
            "the rule could never match; a host effect is recorded under "
            "its own action_type: keep one of them",
        )
    match = table.get("match", {})
    if not isinstance(match, dict):
        raise _bad(path, where, "match must be a table of argument = regex")
    compiled = []
    for key, pattern in _flatten(match):
        name = ".".join(key)
        if not key:
            raise _bad(path, where, "match has an empty argument name")
        if not isinstance(pattern, str) or not pattern:
            raise _bad(path, where, f"match.{name} must be a non-empty regular expression string")
        try:
            compiled.append((key, re.compile(pattern)))
        except re.error as e:
            raise _bad(
                path, where, f"match.{name} {pattern!r} is not a valid regular expression ({e})"
            ) from e
    description = _description(path, where, table)
    return ApprovalRule(
        path=path,
        index=index,
        line=line,
        action_type=None if effect is not None else action_type,
        effect=effect,
        match=tuple(compiled),
        description=description,
        when=_when(path, where, table.get("when", {})),
    )


_CONDITION_HINT = (
    'write an operator (>=, >, <=, <, ==, !=) and a number, e.g. when = { amount = ">= 10000" }'
    ' (a list of them must all hold: [">= 10000", "< 1e6"])'
)


def _when(
    path: str, where: str, when: Any
) -> tuple[tuple[tuple[str, ...], tuple[Condition, ...]], ...]:
    from decimal import Decimal  # loaded when a rule compares numbers

    if not isinstance(when, dict):
        raise _bad(path, where, f"when must be a table of argument = condition; {_CONDITION_HINT}")
    out = []
    for key, value in _flatten(when):
        name = ".".join(key)
        if not key:
            raise _bad(path, where, "when has an empty argument name")
        texts = value if isinstance(value, list) else [value]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise _bad(
                path,
                where,
                f"when.{name} must be a condition string or a list of them; " + _CONDITION_HINT,
            )
        tests = []
        for text in texts:
            found = _CONDITION.fullmatch(text)
            if found is None:
                raise _bad(
                    path, where, f"when.{name} {text!r} is not a condition; {_CONDITION_HINT}"
                )
            tests.append(Condition(found[1], Decimal(found[2].replace("_", "")), found[2]))
        out.append((key, tuple(tests)))
    return tuple(out)


def _description(path: str, where: str, table: Mapping[str, Any]) -> str | None:
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise _bad(path, where, "description must be a string")
    return description


def _branch_rule(path: str, entry: Entry) -> ApprovalRule:
    where, table = entry.where, entry.table
    pattern, risk = table.get("branch"), table.get("risk")
    if not isinstance(pattern, str) or not pattern:
        raise _bad(path, where, 'name the branches: branch = "regex" (full match on the id)')
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise _bad(
            path, where, f"branch {pattern!r} is not a valid regular expression ({e})"
        ) from e
    if risk not in RISKS:
        raise _bad(path, where, f"risk must be one of {', '.join(RISKS)} (got {risk!r})")
    description = _description(path, where, table)
    return ApprovalRule(
        path=path,
        index=entry.number,
        line=entry.line,
        action_type=None,
        effect=None,
        description=description,
        branch=compiled,
        risk=str(risk),
    )


def _tightest(
    rules: Sequence[ApprovalRule], action_type: str
) -> tuple[ApprovalRule | None, ApprovalRule | None]:
    per_type = [
        r for r in rules if r.retry and r.max_attempts is not None and r.action_type == action_type
    ]
    run_wide = [r for r in rules if r.retry and r.run_retries is not None]
    return (
        min(per_type, key=lambda r: r.max_attempts or 0, default=None),
        min(run_wide, key=lambda r: r.run_retries or 0, default=None),
    )


def _retry_rule(path: str, entry: Entry) -> ApprovalRule:
    where, table = entry.where, entry.table

    def count(name: str, least: int) -> int | None:
        value = table.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise _bad(path, where, f"{name} must be a whole number >= {least} (got {value!r})")
        return value

    max_attempts, run_retries = count("max_attempts", 1), count("run_retries", 0)
    action_type = (
        _name(path, where, "action_type", table["action_type"]) if "action_type" in table else None
    )
    if (max_attempts is None) == (run_retries is None):
        raise _bad(
            path,
            where,
            "say one limit: max_attempts = N (with action_type) or run_retries = N (a run)",
        )
    if max_attempts is not None and action_type is None:
        raise _bad(path, where, 'max_attempts needs the action_type it limits: action_type = "..."')
    if run_retries is not None and action_type is not None:
        raise _bad(path, where, "run_retries limits a whole run: leave out action_type")
    description = _description(path, where, table)
    return ApprovalRule(
        path=path,
        index=entry.number,
        line=entry.line,
        action_type=action_type,
        effect=None,
        description=description,
        retry=True,
        max_attempts=max_attempts,
        run_retries=run_retries,
    )


def parse_rules(text: str, path: str) -> tuple[ApprovalRule, ...]:
    """Compile one file's rules (``[[approval]]``, then ``[[branch]]``); ``UsageError``
    (``approvals.bad_rules``) names the line."""
    tables = ("approval", "branch", "retry")

    def entries(table: str, label: str, fields: set[str]) -> list[Entry]:
        others = frozenset(t for t in tables if t != table)
        return rule_tables(text, path, table, _bad, label=label, fields=fields, top_level=others)

    return (
        tuple(_rule(path, e) for e in entries("approval", "rule", _FIELDS))
        + tuple(_branch_rule(path, e) for e in entries("branch", "branch rule", _BRANCH_FIELDS))
        + tuple(_retry_rule(path, e) for e in entries("retry", "retry rule", _RETRY_FIELDS))
    )


Stamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns
_READ_TRIES = 5


def _stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_stamped(path: str) -> tuple[str, Stamp] | None:
    """The whole text of ``path`` and the stamp of exactly what was read, or None if it
    does not exist. Atomic against a concurrent rewrite: the open file is stamped before
    and after the read, and the path after it; if any differ (written meanwhile, or
    replaced by a rename) it is read again, and refused if it never holds still."""
    for _ in range(_READ_TRIES):
        try:
            with open(path, "rb") as f:
                before = _stamp_of(os.fstat(f.fileno()))
                raw = f.read()
                after = _stamp_of(os.fstat(f.fileno()))
            now: Stamp | None = _stamp_of(os.stat(path))
        except FileNotFoundError:
            if _exists(path):  # replaced between the open and the stat: read it again
                continue
            return None
        except OSError as e:
            raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
        if before == after == now and len(raw) == after[1]:
            try:
                return raw.decode("utf-8"), after
            except UnicodeDecodeError as e:
                raise _bad(path, "not UTF-8", f"byte {e.start}") from e
    raise _unsettled(path)


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _unsettled(path: str) -> UsageError:
    return _bad(
        path,
        "cannot be read",
        "it kept changing while it was read (is something "
        "rewriting it?); write it to a temporary file and "
        "rename it into place",
    )


def _read(path: str) -> str | None:
    found = _read_stamped(path)
    return found[0] if found is not None else None


def load_rules(paths: Sequence[str]) -> ApprovalRules:
    """Every rule of the files that exist among ``paths`` (absent files have none)."""
    return _load_stamped(paths)[0]


def _load_stamped(
    paths: Sequence[str],
) -> tuple[ApprovalRules, tuple[Stamp | None, ...], dict[str, tuple[ApprovalRule, ...]]]:
    """The rules, the stamp of each file as read (None: absent), and each file's rules."""
    rules: list[ApprovalRule] = []
    sources: list[str] = []
    stamps: list[Stamp | None] = []
    per_file: dict[str, tuple[ApprovalRule, ...]] = {}
    for path in paths:
        found = _read_stamped(path)
        if found is None:
            stamps.append(None)
            continue
        text, stamp = found
        per_file[path] = parse_rules(text, path)
        rules += per_file[path]
        sources.append(path)
        stamps.append(stamp)
    return ApprovalRules(rules=tuple(rules), sources=tuple(sources)), tuple(stamps), per_file


def store_dir(store_url: str) -> str | None:
    """The directory of a SQLite store (``sqlite:///d/a.db`` or a path), None for a server."""
    if store_url.startswith("sqlite://"):
        return os.path.dirname(store_url[len("sqlite://") :]) or None
    if "://" in store_url:
        return None
    return os.path.dirname(os.path.abspath(store_url))


def rule_paths(directory: str, store_url: str | None = None) -> list[str]:
    """The approval files that apply: in ``directory``, and beside the store."""
    dirs = [os.path.abspath(directory)]
    beside = store_dir(store_url) if store_url else None
    if beside is not None and os.path.abspath(beside) not in dirs:
        dirs.append(os.path.abspath(beside))
    return [os.path.join(d, APPROVALS_FILE) for d in dirs]


class RuleFiles:
    """The rules of some approval files, read again whenever one of them changes (or
    appears, or goes): an intercept always judges by the files as they are now.

    Fail closed: while a file is malformed every intercept is refused
    (``approvals.bad_rules``); once a file that held rules is gone (or emptied to zero
    bytes, as a rewrite in place does midway), calls of the action types (and host
    effects) its last rules named are refused (``approvals.rules_missing``) rather than run
    without the decision they asked for, until it is back (or rewritten without those
    rules: a file holding only a comment has none)."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        self._seen: tuple[Any, ...] | None = None
        self._rules = ApprovalRules()
        self._held: dict[str, tuple[ApprovalRule, ...]] = {}
        self._gone: dict[str, tuple[ApprovalRule, ...]] = {}

    def __repr__(self) -> str:
        return f"RuleFiles(paths={self.paths!r})"

    @classmethod
    def around(cls, directory: str, store_url: str | None = None) -> RuleFiles:
        return cls(tuple(rule_paths(directory, store_url)))

    def _stamp(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for path in self.paths:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                out.append(None)
            except OSError as e:
                raise _bad(path, "cannot be read", e.strerror or type(e).__name__) from e
            else:
                out.append(_stamp_of(st))
        return tuple(out)

    def current(self) -> ApprovalRules:
        """The rules now; ``approvals.bad_rules`` while a file is malformed."""
        if self._seen is None or self._stamp() != self._seen:
            rules, stamps, per_file = _load_stamped(self.paths)  # raises on a bad file
            for path, stamp in zip(self.paths, stamps, strict=True):
                emptied = stamp is not None and stamp[1] == 0  # truncated, being rewritten?
                if path in per_file and not emptied:
                    self._gone.pop(path, None)
                elif self._held.get(path) or path in self._gone:
                    # It held rules, and went (or was emptied): keep refusing what they named.
                    self._gone[path] = self._held.get(path) or self._gone[path]
            # The stamps are of exactly what was read: a rewrite after the read differs
            # from them, so it is read on the next call, never missed.
            self._rules, self._seen, self._held = rules, stamps, per_file
        return self._rules

    def find(
        self,
        action_type: str,
        arguments: Any,
        effect: str | None = None,
        *,
        canonical: Any = AS_GIVEN,
    ) -> ApprovalRule | None:
        """``ApprovalRules.find`` on the rules now; refused while a file is malformed, or
        for a call a vanished file's rules named (``approvals.rules_missing``)."""
        rule = self.current().find(action_type, arguments, effect, canonical=canonical)
        if rule is not None:
            return rule
        for path, lost in self._gone.items():
            for old in lost:
                if old.branch is not None or old.retry:
                    continue  # limits, not decisions: branch_rule and retry_caps keep them
                if old.action_type == action_type or (
                    old.effect is not None and old.effect in (action_type, effect)
                ):
                    raise UsageError(
                        f"approval rules {path} are gone ({old.where} asked a person to "
                        f"decide {action_type} calls); this call is refused rather than run "
                        "without that decision",
                        code="approvals.rules_missing",
                        hint=f"put {path} back (or rewrite it without that rule if no "
                        "decision is needed any more); nothing was recorded",
                        path=path,
                        action_type=action_type,
                    )
        return None

    def branch_rule(self, branch_id: str) -> ApprovalRule | None:
        """``ApprovalRules.branch_rule`` on the rules now (refused while a file is
        malformed); a branch a vanished file's rule named counts as that rule said (its
        risk stays until the file is back or rewritten)."""
        rule = self.current().branch_rule(branch_id)
        if rule is not None and rule.risk == "high":
            return rule
        for lost in self._gone.values():
            for old in lost:
                if (
                    old.branch is not None
                    and old.branch.fullmatch(branch_id)
                    and old.risk == "high"
                ):
                    return old
        return rule

    def retry_caps(self, action_type: str) -> tuple[ApprovalRule | None, ApprovalRule | None]:
        """``ApprovalRules.retry_caps`` on the rules now and those of a vanished file (its
        caps stay until it is back or rewritten: a missing file never lifts a limit)."""
        kept = [r for lost in self._gone.values() for r in lost]
        return _tightest([*self.current().rules, *kept], action_type)
