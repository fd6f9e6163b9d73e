"""`continuum ui --listen HOST:PORT --token-file FILE`: the operator page on its own.

The flags, listener, TLS and token-file checks are ``continuum.serving``'s (one
implementation of each, shared with ``continuum-mcp --transport streamable-http``, so
``continuum ui`` and ``continuum-mcp --ui`` refuse and accept exactly the same set-ups);
the page itself is ``continuum.ui``, mounted by ``continuum.ui.mount``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import click

from continuum.cli.common import common
from continuum.cli.output import Settings
from continuum.runtime.facade import Continuum
from continuum.store import resolve_url

MAX_FORM_BYTES = 1 << 20
MAX_IN_FLIGHT = 16


@click.command("ui")
@click.option(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    help="Address to serve on, e.g. 127.0.0.1:8766 (TLS required off loopback).",
)
@click.option(
    "--token-file",
    required=True,
    metavar="FILE",
    help="'ROLE TOKEN' lines, mode 0600 (as for continuum-mcp): read sees, approve "
    "and admin may confirm, reconcile and decide.",
)
@click.option("--tls-cert", default=None, metavar="PEM", help="TLS certificate (TLS 1.3).")
@click.option("--tls-key", default=None, metavar="PEM", help="TLS private key.")
@common
def ui_cmd(
    s: Settings, listen: str, token_file: str, tls_cert: str | None, tls_key: str | None
) -> None:
    """Serve the operator page: runs and verdicts, a run's chain, evidence, unresolved
    actions and pending approvals, with confirm, reconcile and decide for a person.

    Log in with a token of --token-file (typed into the page's form, never put in a URL).
    Confirm, reconcile and decide also need the person's confirm token, typed into each
    form: set CONTINUUM_MCP_CONFIRM_TOKEN (as for continuum-mcp); unset, the page is
    read-only.
    Runs until SIGTERM or Ctrl-C. See references/operators.md, "The operator page".
    """
    # Imported here: the HTTP stack is loaded only by the command that serves.
    from starlette.applications import Starlette

    from continuum.serving.config import MCP_PATH, STDIO_GATE_VARIABLES, load_http_config
    from continuum.serving.flags import flag_problem
    from continuum.serving.server import InFlightLimit, bind, serve
    from continuum.ui import UI_PREFIX
    from continuum.ui.mount import operator_page

    problem = flag_problem(
        "streamable-http",
        {
            "--listen": listen,
            "--token-file": token_file,
            "--tls-cert": tls_cert,
            "--tls-key": tls_key,
        },
    )
    if problem:
        raise click.UsageError(problem)
    # The person's confirm token (CONTINUUM_MCP_CONFIRM_TOKEN), read as continuum-mcp reads
    # it (contract §5); the stdio gate variables are no concern of the page.
    env = {k: v for k, v in os.environ.items() if k not in STDIO_GATE_VARIABLES}
    config = load_http_config(
        listen=listen,
        token_file=token_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=None,
        max_body=MAX_FORM_BYTES,
        max_in_flight=MAX_IN_FLIGHT,
        env=env,
    )
    url = resolve_url(s.db)
    Continuum.open(url, create=False).close()  # a missing or foreign store: refuse to start
    routes, _ = operator_page(config, url)
    sock = bind(config.listen)
    port = sock.getsockname()[1]
    where = config.listen.url(port, config.tls is not None).removesuffix(MCP_PATH)

    @asynccontextmanager
    async def ready(_app: Any) -> AsyncIterator[None]:
        sys.stderr.write(
            f"continuum ui: serving the operator page at {where}{UI_PREFIX}/ "
            f"({'TLS 1.3' if config.tls is not None else 'no TLS (loopback)'}; "
            f"tokens from {config.tokens.source})\n"
        )
        sys.stderr.flush()
        yield

    app = Starlette(routes=routes, lifespan=ready)
    from continuum.ledger.deliverer import delivering
    from continuum.runtime.verdicts import VerdictWatch

    with delivering(url, os.getcwd(), "continuum ui", watch=VerdictWatch()):
        serve(InFlightLimit(app, MAX_IN_FLIGHT), sock, config.tls)


COMMANDS = [ui_cmd]
