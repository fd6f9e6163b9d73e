"""A rule's pattern (``rule_tables.Regex``) matches exactly as Python's ``re`` does.

The hooks compile a rule's pattern only when a call reaches it, and match a pattern that
is plain text (or plain texts joined by ``|``) by string comparison. Both must give
``re``'s answer for every pattern and text: a wrong "no" lets an effect through ungated.
The control shows the comparison catches a fast path that is subtly wrong.
"""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuum.digest import sha256_hex
from continuum.errors import UsageError
from continuum.rule_tables import Regex, rule_regex

# Texts drawn from few characters, so patterns and texts often meet; the specials too.
ALPHABET = "ab|.*+?^$()[]{}\\-Bsh _\n\u00e9"
texts = st.text(alphabet=ALPHABET, max_size=8)
patterns = st.text(alphabet=ALPHABET, min_size=1, max_size=8)


def _compiles(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": still valid
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


@settings(max_examples=3000, deadline=None)
@given(patterns, texts)
def test_a_rule_pattern_answers_as_re_does(pattern: str, text: str) -> None:
    if not _compiles(pattern):
        return
    regex = Regex(pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert regex.fullmatch(text) == (re.fullmatch(pattern, text) is not None)
        assert regex.search(text) == (re.search(pattern, text) is not None)


# Literals with escaped punctuation, anchored or not: "^\\./send ", "a\\-b" (and their near
# misses: a letter escaped, a special left bare), each against texts that often hold them.
literal_parts = st.sampled_from(
    [
        "a",
        "b",
        " ",
        "/",
        "\\.",
        "\\-",
        "\\ ",
        "\\^",
        "\\|",
        "\\\\",
        ".",
        "\\d",
        "\\b",
        "$",
        "_",
        "\\_",
    ]
)
literals = st.builds(
    lambda anchored, parts: ("^" if anchored else "") + "".join(parts),
    st.booleans(),
    st.lists(literal_parts, min_size=1, max_size=5),
)
literal_texts = st.lists(
    st.sampled_from(["a", "b", " ", "/", ".", "-", "^", "|", "\\", "_", "x"]), max_size=7
).map("".join)


@settings(max_examples=3000, deadline=None)
@given(literals, literal_texts)
def test_a_literal_pattern_answers_as_re_does(pattern: str, text: str) -> None:
    if not _compiles(pattern):
        return
    regex = Regex(pattern)
    assert regex.fullmatch(text) == (re.fullmatch(pattern, text) is not None)
    assert regex.search(text) == (re.search(pattern, text) is not None)
    for at in range(len(text) + 1):  # the literal itself placed at every position
        body = pattern[1:] if pattern.startswith("^") else pattern
        literal = re.sub(r"\\(.)", r"\1", body)
        placed = text[:at] + literal + text[at:]
        assert regex.search(placed) == (re.search(pattern, placed) is not None)


@pytest.mark.parametrize(
    ("pattern", "plain"),
    [
        ("Bash", True),
        ("Bash|run_shell_command|bash", True),
        ("mcp__stripe__create_charge", True),
        ("a||b", True),
        ("Bash.*", False),
        ("(Bash|bash)", False),
        ("^\\./send ", True),
        ("\\./send\\ now", True),
        ("^\\d", False),
        ("^a|b", False),
        ("a{2}", False),
    ],
)
def test_plain_patterns_are_matched_without_compiling_and_others_compile_once(
    pattern: str, plain: bool
) -> None:
    regex = Regex(pattern)
    regex.fullmatch("Bash")
    regex.search("run Bash")
    assert (regex._compiled is None) == plain  # noqa: SLF001 - the point of the test
    if not plain:
        first = regex._compiled  # noqa: SLF001
        regex.search("again")
        assert regex._compiled is first  # noqa: SLF001


def test_an_invalid_pattern_is_refused_when_read_and_raises_at_use_when_kept() -> None:
    def bad(path: str, where: str, problem: str) -> UsageError:
        return UsageError(f"{path}: {where}: {problem}", code="hooks.bad_registry")

    with pytest.raises(UsageError, match="not a valid regular expression"):
        rule_regex(bad, "effects.toml", "effect #1", "tool", "Bash(")
    # Tables a person accepted were checked then: compiled on first use, and an invalid
    # one (a damaged acceptance) raises the same error there, naming the rule, which the
    # gate turns into a refusal.
    kept = rule_regex(bad, "effects.toml", "effect #1", "tool", "Bash(", checked=True)
    with pytest.raises(UsageError, match="effect #1.*not a valid regular expression"):
        kept.fullmatch("Bash")


class _WrongRegex(Regex):
    """A fast path that forgets ``|`` alternates: the control."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        if self._texts is not None:
            self._texts = (pattern,)


def test_control_the_comparison_catches_a_fast_path_that_forgets_alternation() -> None:
    wrong = _WrongRegex("Bash|bash")
    assert wrong.fullmatch("bash") != (re.fullmatch("Bash|bash", "bash") is not None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_the_hooks_sha256_is_hashlibs(data: bytes) -> None:
    import hashlib

    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
