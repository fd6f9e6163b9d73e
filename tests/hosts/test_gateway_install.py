"""`continuum gateway install` through each real host: the project's MCP server entry
"billing" (tests/gateway/mcp_upstream.py, a real MCP server that appends each invoice it
sends to a file) is put behind the gateway, and the host itself starts the rewritten
entry. The scripted model calls ``send_invoice`` for INV-1 twice: the upstream is called
once, the repeat answered from the ledger; the same with the upstream served over
streamable HTTP and the gateway's entry written by hand with ``--url``. Negative control
(Claude Code): the same session without the gateway sends the invoice twice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from continuum.cli.mcp_clients import ALLOW_ENV, CLIENTS
from continuum.runtime.facade import Continuum
from tests.gateway.test_mcp_gateway_http import http_upstream
from tests.hosts.conftest import make_project
from tests.hosts.harness import Host, Project, SessionResult
from tests.hosts.hosts_all import CLAUDE, MCP_HOSTS
from tests.hosts.script import mcp

UPSTREAM = str(Path(__file__).resolve().parents[1] / "gateway" / "mcp_upstream.py")
RULES = '[[effect]]\ntool = "send_invoice"\naction_type = "send_invoice"\nkey = "{invoice_id}"\n'
RUN = "billing"


def _toml(value: Any) -> str:
    return (
        json.dumps(value)
        if not isinstance(value, dict)
        else "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items()) + " }"
    )


def write_billing_entry(p: Project, command: list[str] | None = None, **extra_env: str) -> None:
    """The project's MCP server entry "billing", in the host's format: by default the
    upstream itself, before any continuum; else ``command`` (with ``extra_env``)."""
    env = {"UPSTREAM_EFFECTS": str(p.dir / "effects.txt"), **extra_env}
    program, *args = command or [sys.executable, UPSTREAM]
    client = p.host.mcp_client
    if client == "claude-code":
        config = {"mcpServers": {"billing": {"command": program, "args": args, "env": env}}}
        p.write_file(".mcp.json", json.dumps(config))
    elif client == "gemini":
        entry = {"command": program, "args": args, "env": env, "trust": True}
        p.write_file(".gemini/settings.json", json.dumps({"mcpServers": {"billing": entry}}))
    elif client == "codex":
        p.write_file(
            ".codex/config.toml",
            "[mcp_servers.billing]\n"
            f"command = {_toml(program)}\nargs = {_toml(args)}\n"
            f"env = {_toml(env)}\nrequired = true\n",
        )
    else:
        entry = {"type": "local", "command": [program, *args], "environment": env}
        p.write_file(
            ".kilo/kilo.jsonc", json.dumps({"mcp": {"billing": {**entry, "enabled": True}}})
        )


def effects(p: Project) -> list[str]:
    path = p.dir / "effects.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def billing_project(host: Host, tmp_path: Path, *, gateway: bool) -> Project:
    p = make_project(host, tmp_path, run=RUN)
    write_billing_entry(p)
    if gateway:
        p.write_file(".continuum/gateway.toml", RULES)
        p.continuum(
            "gateway", "install", "--client", host.mcp_client, "--server", "billing", "--run", RUN
        )
    return p


SEND = [mcp("send_invoice", invoice_id="INV-1", amount=5)]


def assert_sent_once(p: Project, s: SessionResult) -> None:
    """Both calls answered with the invoice sent, the upstream called once, the action
    completed as the gateway (not the agent) observed it."""
    assert not s.model.problems, s.describe()
    results = [r for r in s.model.results() if (r.name or "").endswith("send_invoice")]
    assert len(results) == 2, s.describe()
    assert all("sent invoice INV-1 for 5" in r.text for r in results), s.describe()
    assert effects(p) == ["invoice INV-1 5"], s.describe()  # the upstream was called once
    with Continuum.open(str(p.db), create=False) as rt:
        [action] = rt.actions(RUN)
    assert action.status == "completed" and action.origin == "deterministic"


@pytest.mark.parametrize("host", MCP_HOSTS, ids=lambda h: h.name)
def test_the_host_starts_the_installed_gateway_and_a_repeated_call_is_not_sent_again(
    host: Host, tmp_path: Path
) -> None:
    p = billing_project(host, tmp_path, gateway=True)
    s = p.session([SEND, SEND])
    assert_sent_once(p, s)


@pytest.mark.parametrize("host", MCP_HOSTS, ids=lambda h: h.name)
def test_the_host_through_the_gateway_to_an_http_upstream_sends_a_repeat_once(
    host: Host, tmp_path: Path
) -> None:
    # The upstream serves streamable HTTP; the host's entry is the gateway with --url. Both
    # of the gateway's sides pass the SDK by here (serving/host_calls.py, http_leg.py).
    p = make_project(host, tmp_path, run=RUN)
    p.write_file(".continuum/gateway.toml", RULES)
    with http_upstream(p.dir) as url:
        gateway = [
            *(sys.executable, "-m", "continuum", "gateway", "mcp", "--db", str(p.db)),
            *("--name", "billing", "--run", RUN, "--url", url),
            *("--rules", str(p.dir / ".continuum" / "gateway.toml")),
        ]
        # As `gateway install` sets it: registered calls allowed from this host's names. The
        # gateway's debug log goes to a file the test reads (the host keeps its stderr).
        allowed = ",".join(n.name for n in CLIENTS[host.mcp_client].names)
        log = p.logs / "gateway.log"
        logged = ["sh", "-c", f'exec "$0" "$@" 2>>"{log}"', *gateway]
        write_billing_entry(p, logged, **{ALLOW_ENV: allowed, "CONTINUUM_LOG_LEVEL": "debug"})
        s = p.session([SEND, SEND])
    assert_sent_once(p, s)
    # Both calls were taken past the SDK's server, in the era the host speaks (Claude Code:
    # 2026-07-28; the others: the handshake).
    lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines() if x[:1] == "{"]
    taken = [(e["tool"], e["era"]) for e in lines if e.get("event") == "gateway.direct_call"]
    era = "2026-07-28" if host is CLAUDE else "handshake"
    assert taken == [("send_invoice", era)] * 2, (host.name, taken)


def test_control_without_the_gateway_the_host_sends_the_repeat(tmp_path: Path) -> None:
    p = billing_project(CLAUDE, tmp_path, gateway=False)
    s = p.session([SEND, SEND])
    assert not s.model.problems, s.describe()
    assert effects(p) == ["invoice INV-1 5", "invoice INV-1 5"], s.describe()
