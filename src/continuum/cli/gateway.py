"""`continuum gateway ...`: the ledger in front of an MCP server or an HTTP API.

A thin group: the subcommands live in ``cli/gateway_mcp.py`` (``mcp``, ``accept``,
``install``) and ``cli/gateway_http.py`` (``http``), each over ``continuum.gateway``.
"""

from __future__ import annotations

import click

from continuum.cli import gateway_http, gateway_mcp


@click.group("gateway")
def gateway_group() -> None:
    """Put the ledger in front of another MCP server or an HTTP API: every call a rules
    file names as an effect is intercepted before it is forwarded and settled after, a
    repeat is answered from the ledger, an unknown one is refused; other calls pass."""


for _command in (*gateway_mcp.COMMANDS, *gateway_http.COMMANDS):
    gateway_group.add_command(_command)

COMMANDS = [gateway_group]
