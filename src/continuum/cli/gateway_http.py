"""`continuum gateway http --listen HOST:PORT --rules FILE`: the ledger in front of HTTP
APIs, in base-URL mode (``continuum.gateway.http_proxy``; the rules file:
``continuum.gateway.http_rules``). The listen and TLS checks are ``continuum.serving``'s,
as for ``continuum-mcp`` over HTTP and ``continuum ui``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from continuum.cli.common import common
from continuum.cli.output import Settings
from continuum.store import redact_url, resolve_url

DEFAULT_RUN = "gateway-http"
MAX_CONNECTIONS = 256  # past it uvicorn answers 503


@click.command("http")
@click.option(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    help="Address to serve on, e.g. 127.0.0.1:8780 (port 0: any free one; TLS required "
    "off loopback).",
)
@click.option(
    "--rules",
    "rules_file",
    required=True,
    metavar="FILE",
    help="TOML: [[upstream]] name and url of each API; [[effect]] upstream, method, path, "
    "action_type, key, replay of each request that is a side effect.",
)
@click.option(
    "--run",
    "run_id",
    default=DEFAULT_RUN,
    show_default=True,
    metavar="RUN",
    help="The run whose ledger records the effects (started if absent).",
)
@click.option("--tls-cert", default=None, metavar="PEM", help="TLS certificate (TLS 1.3).")
@click.option("--tls-key", default=None, metavar="PEM", help="TLS private key.")
@click.option(
    "--token-file",
    default=None,
    metavar="FILE",
    help="Tokens and their roles, one 'ROLE TOKEN' per line (mode 0600; the format of "
    "continuum-mcp's): every request then needs Proxy-Authorization: Bearer TOKEN, an "
    "effect a token of role submit or above. Required off loopback.",
)
@common
def http_cmd(
    s: Settings,
    listen: str,
    rules_file: str,
    run_id: str,
    tls_cert: str | None,
    tls_key: str | None,
    token_file: str | None,
) -> None:
    """Serve an HTTP proxy for an agent's outbound calls: the agent calls
    http://GATEWAY/NAME/PATH, forwarded to the url of [[upstream]] NAME plus PATH.

    A request an [[effect]] rule matches is intercepted first and needs an Idempotency-Key
    header or the rule's key template (else 428); it is forwarded only when the ledger
    says proceed, then settled: 2xx completed (status and body kept), 4xx failed for
    certain, 5xx, a timeout or a lost connection unknown. A repeat of a completed one is
    answered from the ledger (Continuum-Replayed: true) without calling upstream; an
    unknown one is refused (409) until a person runs `continuum reconcile`. Other requests
    pass through untouched; an undeclared NAME is refused (403). While the store is
    unusable, effects are refused (503) and other requests still pass.

    Runs until SIGTERM or Ctrl-C. See references/operators.md, "The HTTP gateway".
    """
    # Imported here: the HTTP stack is loaded only by the command that serves.
    from continuum.gateway.http_proxy import HttpGateway, write_ready
    from continuum.gateway.http_rules import load_http_rules
    from continuum.serving.config import bad_setting, parse_listen, tls_context
    from continuum.serving.server import bind, serve
    from continuum.serving.tokens import load_token_file

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together: give both or neither")
    where = parse_listen(listen)
    if tls_cert is None and not where.loopback:
        raise bad_setting(
            "gateway.tls_required",
            f"--listen {listen} is not a loopback address and TLS is off: the agents' "
            "requests and their credentials would cross the network in plaintext",
            "give --tls-cert and --tls-key (see references/operators.md), or listen on 127.0.0.1",
        )
    if token_file is None and not where.loopback:
        raise bad_setting(
            "gateway.token_file_required",
            f"--listen {listen} is not a loopback address and no --token-file is given: "
            "anyone who reaches it could make the agents' effects",
            "give --token-file (see references/operators.md), or listen on 127.0.0.1",
        )
    tokens = load_token_file(token_file) if token_file is not None else None
    rules = load_http_rules(rules_file)
    tls = tls_context(Path(tls_cert), Path(tls_key)) if tls_cert and tls_key else None
    url = resolve_url(s.db)
    app = HttpGateway(rules, db_url=url, run_id=run_id, tokens=tokens)
    sock = bind(where)
    port = sock.getsockname()[1]
    host = f"[{where.host}]" if ":" in where.host else where.host
    base = f"{'https' if tls else 'http'}://{host}:{port}"
    line = (
        f"continuum gateway http: serving at {base}/ ({len(rules.upstreams)} upstream(s): "
        f"{', '.join(sorted(rules.upstreams))}; {len(rules.effects)} effect rule(s); run "
        f"{run_id}; store {redact_url(url)}; "
        f"{'TLS 1.3' if tls is not None else 'no TLS (loopback)'}; "
        f"{'tokens from ' + str(token_file) if tokens is not None else 'no tokens (loopback)'})"
    )
    app.ready = write_ready(line)
    from continuum.ledger.deliverer import delivering
    from continuum.runtime.verdicts import VerdictWatch

    with delivering(url, os.getcwd(), "continuum gateway http", watch=VerdictWatch()):
        serve(app, sock, tls, connection_limit=MAX_CONNECTIONS)


COMMANDS: list[click.Command] = [http_cmd]
"""Subcommands of `continuum gateway` (see cli/gateway.py)."""
