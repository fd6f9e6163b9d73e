"""`continuum mcp uninstall` removes our server alone; `mcp install --client gemini` reads a
settings file with comments and writes it only with --force (issue 12)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from continuum.cli.mcp_clients import strip_json_comments
from tests.cli.conftest import Result

CLI = Callable[..., Result]

FILES = {
    "claude-code": ".mcp.json",
    "gemini": ".gemini/settings.json",
}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("client", sorted(FILES))
def test_uninstall_removes_only_our_server_and_keeps_everything_else(
    cli: CLI, here: Path, client: str
) -> None:
    path = here / FILES[client]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"theme": "dark", "mcpServers": {"other": {"command": "x"}}, "tail": [1, 2]})
    )
    assert cli("mcp", "install", "--client", client).code == 0
    assert "continuum" in json.loads(path.read_text())["mcpServers"]
    r = cli("--json", "mcp", "uninstall", "--client", client)
    assert r.code == 0, r.out
    assert (r.json()["removed"], r.json()["written"]) == (True, True)
    assert json.loads(path.read_text()) == {
        "theme": "dark",
        "mcpServers": {"other": {"command": "x"}},
        "tail": [1, 2],
    }


def test_uninstall_drops_an_mcp_servers_object_only_ours_filled(cli: CLI, here: Path) -> None:
    assert cli("mcp", "install", "--client", "claude-code").code == 0
    r = cli("mcp", "uninstall", "--client", "claude-code")
    assert r.code == 0 and "removed the 'continuum' server from .mcp.json" in r.out
    assert json.loads((here / ".mcp.json").read_text()) == {}


def test_uninstall_keeps_the_file_mode(cli: CLI, here: Path) -> None:
    path = here / ".mcp.json"
    assert cli("mcp", "install", "--client", "claude-code").code == 0
    path.chmod(0o600)
    assert cli("mcp", "uninstall", "--client", "claude-code").code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_uninstall_with_nothing_to_remove_exits_0_and_writes_nothing(cli: CLI, here: Path) -> None:
    r = cli("--json", "mcp", "uninstall", "--client", "kilo")
    assert r.code == 0 and (r.json()["removed"], r.json()["written"]) == (False, False)
    assert not (here / ".kilo" / "kilo.jsonc").exists()
    path = here / ".mcp.json"
    path.write_text('{"mcpServers": {"other": {}}}')
    before = os.stat(path).st_mtime_ns
    r = cli("mcp", "uninstall", "--client", "claude-code")
    assert r.code == 0 and "nothing to remove: no 'continuum' server in .mcp.json" in r.out
    assert (
        path.read_text() == '{"mcpServers": {"other": {}}}' and os.stat(path).st_mtime_ns == before
    )


def test_uninstall_refuses_invalid_json_and_leaves_it(cli: CLI, here: Path) -> None:
    path = here / ".mcp.json"
    path.write_text('{"mcpServers": {"continuum": {}},')
    r = cli("--json", "mcp", "uninstall", "--client", "claude-code")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file"
    assert path.read_text() == '{"mcpServers": {"continuum": {}},'
    path.write_text('{"mcpServers": ["continuum"]}')
    r = cli("--json", "mcp", "uninstall", "--client", "claude-code")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file"


def test_uninstall_print_writes_nothing(cli: CLI, here: Path) -> None:
    assert cli("mcp", "install", "--client", "gemini").code == 0
    path = here / ".gemini" / "settings.json"
    before = path.read_text()
    r = cli("mcp", "uninstall", "--client", "gemini", "--print")
    assert r.code == 0 and json.loads(r.out) == {}
    assert path.read_text() == before


def test_uninstall_takes_another_file_with_config(cli: CLI, here: Path) -> None:
    other = here / "elsewhere.json"
    assert cli("mcp", "install", "--client", "kilo", "--config", str(other)).code == 0
    assert cli("mcp", "uninstall", "--client", "kilo", "--config", str(other)).code == 0
    assert json.loads(other.read_text()) == {}


# -- Gemini CLI's settings.json may have comments -------------------------------------------

COMMENTED = """{
  // the look
  "theme": "dark", /* inline */ "url": "http://example.com/a//b",
  "note": "not /* a comment */ here \\" // nor here",
  "mcpServers": {
    /* another server,
       kept */
    "other": {"command": "x"}
  }
}
"""


def test_comments_are_stripped_outside_strings_only() -> None:
    text, found = strip_json_comments(COMMENTED)
    assert found
    assert json.loads(text) == {
        "theme": "dark",
        "url": "http://example.com/a//b",
        "note": 'not /* a comment */ here " // nor here',
        "mcpServers": {"other": {"command": "x"}},
    }
    assert text.count("\n") == COMMENTED.count("\n")  # error positions stay right
    assert strip_json_comments('{"a": "//"}') == ('{"a": "//"}', False)


def test_gemini_install_into_a_file_with_comments_needs_force_and_says_so(
    cli: CLI, here: Path
) -> None:
    path = here / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(COMMENTED)
    refused = cli("--json", "mcp", "install", "--client", "gemini")
    assert refused.code == 1 and refused.json()["error"]["code"] == "usage.config_has_comments"
    assert "--force" in refused.json()["error"]["hint"]
    assert path.read_text() == COMMENTED
    printed = cli("mcp", "install", "--client", "gemini", "--print")
    assert printed.code == 0 and "comments" in printed.err
    assert set(json.loads(printed.out)["mcpServers"]) == {"other", "continuum"}
    assert path.read_text() == COMMENTED
    forced = cli("mcp", "install", "--client", "gemini", "--force")
    assert forced.code == 0
    assert f"note: {Path('.gemini/settings.json')} has comments; they are dropped" in forced.err
    config = json.loads(path.read_text())
    assert config["theme"] == "dark" and config["note"] == 'not /* a comment */ here " // nor here'
    assert set(config["mcpServers"]) == {"other", "continuum"}


def test_gemini_uninstall_from_a_file_with_comments_needs_force(cli: CLI, here: Path) -> None:
    path = here / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(COMMENTED.replace('"other"', '"continuum": {}, "other"'))
    r = cli("--json", "mcp", "uninstall", "--client", "gemini")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.config_has_comments"
    assert cli("mcp", "uninstall", "--client", "gemini", "--force").code == 0
    assert set(json.loads(path.read_text())["mcpServers"]) == {"other"}


def test_comments_are_still_refused_for_hosts_that_do_not_allow_them(cli: CLI, here: Path) -> None:
    (here / ".mcp.json").write_text(COMMENTED)
    r = cli("--json", "mcp", "install", "--client", "claude-code", "--force")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file"
    assert (here / ".mcp.json").read_text() == COMMENTED
