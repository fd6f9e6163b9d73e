"""`continuum mcp install`: writes or prints a host's configuration, merging safely.
`continuum mcp doctor`: what a server started here would load and tell each client."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from continuum.serving.auth import load_policy
from tests.cli.conftest import Result

CLI = Callable[..., Result]


@pytest.mark.parametrize(
    ("client", "path", "name"),
    [
        ("claude-code", ".mcp.json", "claude-code"),
        ("gemini", ".gemini/settings.json", "gemini-cli-mcp-client"),
    ],
)
def test_install_writes_the_server_with_store_and_allowlist(
    cli: CLI,
    db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    path: str,
    name: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("--json", "mcp", "install", "--client", client)
    assert r.code == 0, r.out
    config = json.loads((tmp_path / path).read_text())
    entry = config["mcpServers"]["continuum"]
    assert entry["args"][-2:] == ["--db", str(Path(db).absolute())]
    assert name in entry["env"]["CONTINUUM_MCP_MUTATING_CLIENTS"].split(",")
    assert Path(entry["command"]).name in ("continuum-mcp", "python", "python3") or entry["command"]


def test_install_merges_without_losing_other_entries(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"other": {"command": "x"}}, "extra": 1})
    )
    assert cli("mcp", "install", "--client", "claude-code").code == 0
    config = json.loads((tmp_path / ".mcp.json").read_text())
    assert config["mcpServers"]["other"] == {"command": "x"}
    assert config["extra"] == 1
    assert "continuum" in config["mcpServers"]


def test_install_print_writes_nothing(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("mcp", "install", "--client", "gemini", "--print")
    assert r.code == 0
    assert json.loads(r.out)["mcpServers"]["continuum"]["trust"] is False
    assert not (tmp_path / ".gemini").exists()


def test_install_refuses_an_invalid_existing_file_and_leaves_it(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mcp.json").write_text("{not json")
    r = cli("--json", "mcp", "install", "--client", "claude-code")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file"
    assert (tmp_path / ".mcp.json").read_text() == "{not json"


def test_install_for_kilo_writes_kilo_jsonc_with_every_name_kilo_sends(
    cli: CLI, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kilo CLI 7.7.x reads .kilo/kilo.jsonc's "mcp" (a local server: command as an array,
    # "environment") and sends "kilo"; 7.0.x sent "opencode"; the VS Code extension sends
    # "Kilo Code". The legacy .kilocode/mcp.json is not written.
    monkeypatch.chdir(tmp_path)
    assert cli("mcp", "install", "--client", "kilo").code == 0
    assert not (tmp_path / ".kilocode").exists()
    server = json.loads((tmp_path / ".kilo" / "kilo.jsonc").read_text())["mcp"]["continuum"]
    assert server["type"] == "local" and server["enabled"] is True
    assert server["command"][-2:] == ["--db", str(Path(db).absolute())]
    env = server["environment"]
    assert env == {"CONTINUUM_MCP_MUTATING_CLIENTS": "kilo,opencode,Kilo Code"}
    assert load_policy(env, tmp_path).allow == {"kilo", "opencode", "Kilo Code"}


def test_install_for_kilo_keeps_comments_only_with_force_and_other_servers_always(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".kilo" / "kilo.jsonc"
    path.parent.mkdir()
    text = '{\n  // mine\n  "mcp": {"other": {"type": "local", "command": ["x"]},},\n  "theme": "d"\n}\n'
    path.write_text(text)
    r = cli("mcp", "install", "--client", "kilo")
    assert r.code != 0 and "comments" in r.err and path.read_text() == text
    assert cli("mcp", "install", "--client", "kilo", "--force").code == 0
    config = json.loads(path.read_text())
    assert config["theme"] == "d" and config["mcp"]["other"] == {"type": "local", "command": ["x"]}
    assert "continuum" in config["mcp"]
    assert cli("mcp", "uninstall", "--client", "kilo").code == 0
    assert json.loads(path.read_text()) == {
        "mcp": {"other": {"type": "local", "command": ["x"]}},
        "theme": "d",
    }


CODEX_BEFORE = """# my settings
model = "o3"

[mcp_servers.other]
command = "x" # theirs

[mcp_servers.continuum]
command = "an older continuum"
[mcp_servers.continuum.env]
A = "1"

[profiles.fast]
model = "o4-mini"
"""


def test_install_for_codex_writes_a_required_server_table_and_keeps_the_rest_as_text(
    cli: CLI, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib

    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(CODEX_BEFORE)
    r = cli("mcp", "install", "--client", "codex")
    assert r.code == 0, r.err
    assert "trust_level" in r.out and json.dumps(str(tmp_path)) in r.out  # how to trust it
    text = path.read_text()
    assert "# my settings" in text and 'command = "x" # theirs' in text
    assert "an older continuum" not in text and "A = " not in text
    config = tomllib.loads(text)
    assert config["profiles"] == {"fast": {"model": "o4-mini"}}
    assert config["mcp_servers"]["other"] == {"command": "x"}
    ours = config["mcp_servers"]["continuum"]
    assert ours["required"] is True and ours["args"][-1] == str(Path(db).absolute())
    assert ours["env"] == {"CONTINUUM_MCP_MUTATING_CLIENTS": "codex-mcp-client"}
    # Installing again changes nothing; uninstall leaves exactly the rest.
    assert cli("mcp", "install", "--client", "codex").code == 0
    assert path.read_text() == text
    assert cli("mcp", "uninstall", "--client", "codex").code == 0
    after = tomllib.loads(path.read_text())
    assert "continuum" not in after["mcp_servers"] and after["model"] == "o3"


@pytest.mark.parametrize(
    "text",
    [
        "model = [unclosed\n",  # not TOML
        'mcp_servers = { continuum = { command = "inline" } }\n',  # a form we do not edit
    ],
)
def test_install_for_codex_refuses_a_file_it_cannot_edit_safely_and_leaves_it(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(text)
    r = cli("--json", "mcp", "install", "--client", "codex")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_config_file", r.out
    assert path.read_text() == text


@pytest.mark.parametrize(
    "name", ["a,b", "Kilo\u202eCode", "zero\u200bwidth", "", " padded", "x" * 201]
)
def test_install_refuses_a_client_name_with_a_comma_or_unsafe_characters(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("--json", "mcp", "install", "--client", "kilo", "--client-name", name)
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_client_name"
    assert r.json()["error"]["hint"]
    assert not (tmp_path / ".kilocode").exists()


# --- doctor ---------------------------------------------------------------------------

MCP_VARIABLES = (
    "CONTINUUM_MCP_MUTATING_CLIENTS",
    "CONTINUUM_MCP_ALLOW",
    "CONTINUUM_MCP_TOKEN",
    "CONTINUUM_MCP_CLIENT_TOKENS",
    "CONTINUUM_MCP_CONFIRM_TOKEN",
)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean directory and environment: the doctor's server inherits both."""
    for variable in MCP_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_doctor_shows_the_allowlist_and_tells_each_host_whether_it_may_write(
    cli: CLI, here: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTINUUM_MCP_MUTATING_CLIENTS", "Kilo Code, my agent")
    r = cli("--json", "mcp", "doctor")
    assert r.code == 0, r.out + r.err
    report = r.json()
    assert report["starts"] is True and report["store"]["url"] == db
    policy = report["policy"]
    assert (policy["allow"], policy["allow_source"]) == (
        ["Kilo Code", "my agent"],
        "CONTINUUM_MCP_MUTATING_CLIENTS",
    )
    assert (policy["read_only"], policy["auth"], policy["confirm_over_mcp"]) == (
        False,
        "none",
        False,
    )
    clients = {c["name"]: c for c in report["clients"]}
    # Every name the supported hosts really send (mcp_clients.CLIENTS).
    assert sorted(clients) == sorted(
        [
            "claude-code",
            "gemini-cli-mcp-client",
            "codex-mcp-client",
            "kilo",
            "opencode",
            "Kilo Code",
        ]
    )
    assert clients["Kilo Code"]["mutating"]["allowed"] is True
    assert clients["claude-code"]["mutating"]["code"] == "auth.not_allowed"
    assert (
        "add 'claude-code' to CONTINUUM_MCP_MUTATING_CLIENTS"
        in clients["claude-code"]["mutating"]["text"]
    )
    confirm = clients["Kilo Code"]["confirm"]
    assert confirm["code"] == "auth.confirm_disabled"
    assert "a person must run `continuum confirm <run_id>` at a terminal" in confirm["text"]


def test_doctor_text_says_allowed_or_gives_the_denial(
    cli: CLI, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTINUUM_MCP_MUTATING_CLIENTS", "Kilo Code")
    r = cli("mcp", "doctor", "--client-name", "Kilo Code", "--client-name", "Kilo")
    assert r.code == 0, r.err
    out = r.out
    assert 'allowlist:  "Kilo Code" (from CONTINUUM_MCP_MUTATING_CLIENTS)' in out
    assert 'client "Kilo Code"' in out and 'client "Kilo"' in out
    kilo_code, kilo = out.split('client "Kilo Code"')[1].split('client "Kilo"')
    assert "a mutating tool: allowed" in kilo_code
    assert "a mutating tool: denied [auth.not_allowed]" in kilo
    assert "Remedy: an operator must add 'Kilo' to CONTINUUM_MCP_MUTATING_CLIENTS" in kilo
    assert "continuum_confirm: denied [auth.confirm_disabled]" in kilo_code


def test_doctor_without_an_allowlist_reports_a_read_only_server(cli: CLI, here: Path) -> None:
    report = cli("--json", "mcp", "doctor").json()
    assert report["policy"]["read_only"] is True and report["policy"]["allow_source"] is None
    assert {c["mutating"]["code"] for c in report["clients"]} == {"auth.read_only"}


def test_doctor_names_token_clients_but_never_a_secret(
    cli: CLI, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTINUUM_MCP_MUTATING_CLIENTS", "Kilo Code")
    monkeypatch.setenv("CONTINUUM_MCP_CLIENT_TOKENS", "Kilo Code:doc-secret-91")
    monkeypatch.setenv("CONTINUUM_MCP_CONFIRM_TOKEN", "doc-human-secret-22-0123456789abcdef")
    r = cli("--json", "mcp", "doctor")
    report = r.json()
    assert report["policy"]["auth"] == "client_tokens"
    assert report["policy"]["token_clients"] == ["Kilo Code"]
    assert report["policy"]["confirm_over_mcp"] is True
    kilo = next(c for c in report["clients"] if c["name"] == "Kilo Code")
    assert kilo["mutating"]["code"] == "auth.token_missing"  # a host cannot send the token
    text = cli("mcp", "doctor")
    assert "doc-secret" not in r.out + r.err + text.out + text.err
    assert "doc-human-secret" not in r.out + r.err + text.out + text.err


@pytest.mark.parametrize("where", ["env", "file"])
def test_doctor_exits_1_with_the_error_when_the_policy_would_refuse_start_up(
    cli: CLI, here: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "env":
        monkeypatch.setenv("CONTINUUM_MCP_MUTATING_CLIENTS", "claude-code, Kilo\u202eCode")
    else:
        (here / ".continuum").mkdir()
        (here / ".continuum" / "mcp-policy.json").write_text('{"allow": ["a",]}')
    r = cli("--json", "mcp", "doctor")
    assert r.code == 1 and r.json()["ok"] is False
    assert r.json()["error"]["code"] == "mcp.bad_policy"
    text = cli("mcp", "doctor")
    assert text.code == 1 and text.out == ""
    assert "[mcp.bad_policy]" in text.err.splitlines()[0]
    assert "\u202e" not in text.err
