"""``registry.may_run`` (the hooks' look at a shell command before splitting it) never
says "cannot run" for a command whose split runs a wanted program: a wrong "no" would let
an effect through ungated. Commands are drawn from program names, their pieces, quotes,
backslashes, separators, wrappers and assignments. ``is_name`` and ``assigns`` answer
as the patterns they replace. A control shows the check catches a prefilter that
ignores quoting."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from continuum.hooks import registry
from continuum.hooks.registry import assigns, is_name, may_run, runs, shell_commands

WANTED = [("git", "push"), ("./send",), ("send",), ("kubectl", "apply"), ("twine", "upload")]
pieces = st.sampled_from(
    [
        "git",
        "gi",
        "t",
        "push",
        "send",
        "./send",
        "/usr/bin/",
        "kubectl",
        "apply",
        "sudo",
        "env",
        "A=1",
        "python",
        "-m",
        "twine",
        "upload",
        " ",
        " ",
        ";",
        "&&",
        "|",
        "(",
        ")",
        "`",
        "$(",
        "\n",
        "'",
        '"',
        "\\",
        "#",
        "-C",
        "x",
        "INV-1",
    ]
)
commands = st.lists(pieces, max_size=10).map("".join)


def really_runs(command: str, wanted: list[tuple[str, ...]]) -> bool:
    return any(
        runs(words, w, frozenset({"-C"})) for words in shell_commands(command) for w in wanted
    )


def prefilter_holds(check: object, command: str) -> bool:
    return check(command, WANTED) or not really_runs(command, WANTED)  # type: ignore[operator]


@settings(max_examples=4000, deadline=None)
@given(commands)
def test_a_command_that_runs_a_wanted_program_is_never_passed_over(command: str) -> None:
    assert prefilter_holds(may_run, command)


def test_it_passes_over_a_plain_command_without_the_programs() -> None:
    assert not may_run("echo hello && ls -la | wc -l", WANTED)
    assert may_run("echo 'hello'", WANTED)  # quoted: split it
    assert may_run("cd x && git push", WANTED)


def test_control_a_prefilter_blind_to_quoting_is_caught() -> None:
    def blind(command: str, wanted: list[tuple[str, ...]]) -> bool:
        return any(w[0] in command for w in wanted)

    assert not prefilter_holds(blind, "g'i't push origin")


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
words = st.text(alphabet="aZ_09=-.é ", max_size=6)


@settings(max_examples=2000, deadline=None)
@given(words)
def test_names_and_assignments_are_read_as_their_patterns(word: str) -> None:
    assert is_name(word) == (NAME.fullmatch(word) is not None)
    assert assigns(word) == (ASSIGNMENT.match(word) is not None)


def test_the_shell_rules_still_match_through_the_prefilter() -> None:
    rule_shell = (("git", "push"),)
    assert registry.may_run("git push", rule_shell) and not registry.may_run("ls", rule_shell)


# -- templates read by hand (registry._tokens) as the pattern read them ---------------------

PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
templates = st.text(alphabet="{}ab_ 1'\"\\", max_size=12)


@settings(max_examples=3000, deadline=None)
@given(templates)
def test_template_tokens_are_the_patterns_matches(template: str) -> None:
    expected = [(m.start(), m.end(), m.group(1)) for m in PLACEHOLDER.finditer(template)]
    assert registry._tokens(template) == expected
    for i in range(len(template)):
        m = PLACEHOLDER.match(template, i)
        assert registry._token_at(template, i) == (None if m is None else (m.end(), m.group(1)))


@settings(max_examples=2000, deadline=None)
@given(templates, st.dictionaries(st.sampled_from(["a", "b", "a_1", ""]), st.text(max_size=3)))
def test_a_template_renders_as_the_pattern_rendered_it(
    template: str, values: dict[str, str]
) -> None:
    def by_pattern() -> str:
        def fill(m: re.Match[str]) -> str:
            token = m.group(0)
            if token in ("{{", "}}"):
                return token[0]
            if m.group(1) not in values:
                raise KeyError(m.group(1))
            return values[m.group(1)]

        return PLACEHOLDER.sub(fill, template)

    try:
        expected: object = by_pattern()
    except KeyError:
        expected = "missing"
    try:
        got: object = registry.render(template, values)
    except registry.UsageError:
        got = "missing"
    assert got == expected
