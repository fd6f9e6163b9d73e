"""`continuum mcp install`: writes or prints a host's configuration, merging safely."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result

CLI = Callable[..., Result]


@pytest.mark.parametrize(("client", "path", "name"), [
    ("claude-code", ".mcp.json", "claude-code"),
    ("gemini", ".gemini/settings.json", "gemini-cli-mcp-client"),
    ("kilo", ".kilocode/mcp.json", "kilo-code"),
])
def test_install_writes_the_server_with_store_and_allowlist(
        cli: CLI, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        client: str, path: str, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("--json", "mcp", "install", "--client", client)
    assert r.code == 0, r.out
    config = json.loads((tmp_path / path).read_text())
    entry = config["mcpServers"]["continuum"]
    assert entry["args"][-2:] == ["--db", str(Path(db).absolute())]
    assert name in entry["env"]["CONTINUUM_MCP_MUTATING_CLIENTS"].split(",")
    assert Path(entry["command"]).name in ("continuum-mcp", "python", "python3") or entry["command"]


def test_install_merges_without_losing_other_entries(cli: CLI, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mcp.json").write_text(json.dumps(
        {"mcpServers": {"other": {"command": "x"}}, "extra": 1}))
    assert cli("mcp", "install", "--client", "claude-code").code == 0
    config = json.loads((tmp_path / ".mcp.json").read_text())
    assert config["mcpServers"]["other"] == {"command": "x"}
    assert config["extra"] == 1
    assert "continuum" in config["mcpServers"]


def test_install_print_writes_nothing(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("mcp", "install", "--client", "gemini", "--print")
    assert r.code == 0
    assert json.loads(r.out)["mcpServers"]["continuum"]["trust"] is False
    assert not (tmp_path / ".gemini").exists()


def test_install_refuses_an_invalid_existing_file_and_leaves_it(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mcp.json").write_text("{not json")
    r = cli("--json", "mcp", "install", "--client", "claude-code")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file"
    assert (tmp_path / ".mcp.json").read_text() == "{not json"
