"""`continuum --help` lists the commands by task, every command's --help ends with an
example that works as printed, and the CLI answers to the MCP tools' names (issue 31,
items 14 and 9). One table (cli/help.py) feeds the help; references/cli.md shows the same."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from continuum.cli.help import ALIASES, HELP, SECTIONS
from continuum.cli.main import cli as cli_group
from continuum.cli.main import run
from continuum.mcp.tools import tool_table
from tests.cli.conftest import Result

CLI = Callable[..., Result]
CLI_MD = Path(__file__).resolve().parents[2] / "references" / "cli.md"

# Commands whose --help is not click's, so it cannot end with the example; each with why.
HELP_OF_ITS_OWN = {
    "hook": "`continuum hook` goes straight to the hooks' lean entry point, which prints its "
    "own usage (cli/launch.py); its example is in references/cli.md",
}
# MCP tools with no CLI command or alias on purpose, each with why (none today).
NO_CLI_COUNTERPART: dict[str, str] = {}


def paths(group: click.Group, prefix: str = "") -> list[str]:
    """Every command path, groups included: 'mcp', 'mcp install', ..."""
    out = []
    for name, command in group.commands.items():
        out.append(prefix + name)
        if isinstance(command, click.Group):
            out += paths(command, f"{prefix}{name} ")
    return out


def help_text(path: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert run([*path.split(), "--help"]) == 0
    return capsys.readouterr().out


def top_help(capsys: pytest.CaptureFixture[str]) -> str:
    assert run(["--help"]) == 0
    return capsys.readouterr().out


# -- sections -------------------------------------------------------------------------------


def test_every_command_is_in_exactly_one_section() -> None:
    placed = [name for _, names in SECTIONS for name in names]
    assert len(placed) == len(set(placed)), "a command is in two sections"
    assert set(placed) - set(cli_group.commands) == set(), "a section names no command"
    missing = sorted(set(cli_group.commands) - set(placed))
    assert not missing, f"give these a section in cli/help.py SECTIONS: {missing}"


def test_the_top_level_help_lists_each_command_once_under_its_section(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = top_help(capsys)
    listing = out.split("\nCommands:\n", 1)[1]
    assert "Other:" not in listing and "..." not in listing
    titles = [m.group(1) for m in re.finditer(r"^  (\S.*):$", listing, flags=re.M)]
    assert titles == [title for title, _ in SECTIONS]
    for title, names in SECTIONS:
        block = listing.split(f"  {title}:\n", 1)[1].split("\n\n", 1)[0]
        listed = [
            line.split()[0]
            for line in block.splitlines()
            if line.startswith("    ") and line[4] != " "
        ]
        assert listed == list(names), title
        for name in names:
            summary = HELP[name].summary
            assert re.search(rf"^    {re.escape(name)} +{re.escape(summary)}", block, re.M), name


def test_summaries_fit_on_one_line_so_none_is_cut() -> None:
    width = max(len(n) for _, names in SECTIONS for n in names)
    for path, entry in HELP.items():
        assert entry.summary and len(entry.summary) <= 78 - 4 - width - 2, path


# -- examples -------------------------------------------------------------------------------


def test_every_command_has_an_entry_and_no_entry_is_stale() -> None:
    assert set(HELP) == set(paths(cli_group))


def test_every_example_is_an_example_of_its_own_command() -> None:
    for path, entry in HELP.items():
        assert entry.examples, path
        for example in entry.examples:
            words = shlex.split(example, comments=True)
            assert words[0] == "continuum", example
            words = words[1:]
            while words[0].startswith("--"):  # global options: --db URL
                words = words[2:]
            assert words[: len(path.split())] == path.split(), example


@pytest.mark.parametrize("path", sorted(set(HELP) - set(HELP_OF_ITS_OWN)))
def test_every_commands_help_ends_with_its_examples(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = help_text(path, capsys)
    shown = out.split("\n  Example", 1)[1]  # after the options: the epilog
    for example in HELP[path].examples:
        assert f"\n    {example}\n" in shown, (path, example)
    for alias in (a for a, target in ALIASES.items() if target == path):
        assert f"continuum {alias}" in shown


def test_references_cli_md_shows_every_example_and_alias() -> None:
    lines = set(CLI_MD.read_text(encoding="utf-8").splitlines())
    missing = [e for entry in HELP.values() for e in entry.examples if e not in lines]
    assert not missing, f"examples missing from references/cli.md: {missing}"
    for alias, target in ALIASES.items():
        row = f"| `{alias}` | `{target}` | `continuum_{alias.replace('-', '_')}` |"
        assert row in lines, row


def example(path: str, index: int = 0) -> list[str]:
    """The argv of a printed example (without `continuum`)."""
    return shlex.split(HELP[path].examples[index], comments=True)[1:]


def test_the_examples_work_as_printed_on_a_scratch_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONTINUUM_DB", raising=False)

    def ok(argv: list[str], code: int = 0) -> str:
        got = run(argv)
        out, err = capsys.readouterr()
        assert got == code, (argv, out, err)
        return out

    assert "store ready" in ok(example("init"))
    ok(example("start"))
    assert "PROCEED" in ok(example("intercept"))
    ok(example("complete"))
    assert "1/3 completed" in ok(example("record-progress"))
    ok(example("append"))
    ok(example("checkpoint"))
    assert "verdict: resume" in ok(example("resume"))
    ok(example("validate"))
    events = ok(example("events"))
    assert "action_completed" in events and "send_invoice:invoice:INV-1" in events
    assert "  payload {" in ok(example("events", 1))
    assert "completed" in ok(example("actions"))
    ok(example("status"))
    ok(example("inspect"))
    assert "checkpoint" in ok(example("history"))
    ok(example("diff"))
    ok(example("replay"))
    assert "verdict: resume" in ok(example("show-contract"))
    assert (tmp_path / "contract.json").is_file()
    ok(example("verify-contract"))
    assert "ok" in ok(example("verify"))
    ok(example("anchor"))
    ok(example("export"))
    ok(example("import"))
    assert "invoice-batch" in ok(example("runs"))
    assert str(tmp_path / "continuum.db") in ok(example("where"))
    ok(example("event-types"))
    assert "unverified" in ok(example("observe"))
    assert "pay button label" in ok(example("observations"))
    ok(example("finish"))


# -- names of the MCP tools -----------------------------------------------------------------


def guessed(tool: str) -> str:
    return tool.removeprefix("continuum_").replace("_", "-")


def test_every_mcp_tool_has_a_command_or_an_alias_of_its_name() -> None:
    tools = [spec.name for spec, _ in tool_table()]
    assert set(NO_CLI_COUNTERPART) <= set(tools)
    for tool in tools:
        if tool in NO_CLI_COUNTERPART:
            assert guessed(tool) not in cli_group.commands and guessed(tool) not in ALIASES
            continue
        name = guessed(tool)
        assert name in cli_group.commands or name in ALIASES, f"no `continuum {name}` for {tool}"


def test_aliases_are_mcp_tool_names_of_existing_commands() -> None:
    tools = {guessed(spec.name) for spec, _ in tool_table()}
    for alias, target in ALIASES.items():
        assert alias in tools, f"{alias} is no MCP tool's name"
        assert alias not in cli_group.commands and target in cli_group.commands
        assert cli_group.get_command(click.Context(cli_group), alias) is cli_group.commands[target]


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_an_aliases_help_is_its_commands_help(
    alias: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ALIASES[alias]
    assert help_text(alias, capsys) == help_text(target, capsys).replace(
        f"Usage: continuum {target} ", f"Usage: continuum {alias} "
    )


def test_an_alias_does_what_its_command_does(cli: CLI) -> None:
    cli("start", "r1", "--goal", "g")
    first = cli("--json", "intercept-action", "r1", "send", "--key", "k1")
    assert first.code == 0 and first.json()["proceed"] is True
    again = cli("--json", "intercept", "r1", "send", "--key", "k1")
    assert again.code == 20  # the same ledger: the alias's intercept is the one seen
    assert cli("complete-action", "r1", "send:k1", "--external-id", "x1").code == 0
    listed, by_alias = cli("--json", "actions", "r1"), cli("--json", "list-actions", "r1")
    assert (listed.code, listed.out) == (by_alias.code, by_alias.out)
    assert by_alias.json()["actions"][0]["status"] == "completed"


def test_shell_completion_offers_the_aliases_too() -> None:
    ctx = click.Context(cli_group, info_name="continuum")
    offered = [item.value for item in cli_group.shell_complete(ctx, "list-")]
    assert offered == ["list-actions"]
    assert [item.value for item in cli_group.shell_complete(ctx, "wat")] == ["watch"]
