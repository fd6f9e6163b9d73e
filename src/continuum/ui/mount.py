"""Mounting the operator page in an HTTP server (``continuum ui``, ``continuum-mcp --ui``):
its routes, a login that maps a token of the server's token file to a ``Principal``, and the
confirm gate on the person's confirm token (without one the page is read-only).

Imports ``serving`` (the server's configuration) and the rest of ``ui``."""

from __future__ import annotations

import sys

from starlette.routing import BaseRoute

from continuum.serving.config import HttpConfig
from continuum.serving.secrets import CONFIRM_TOKEN_ENV
from continuum.serving.tokens import allows
from continuum.ui.routes import operator_routes, ui_paths
from continuum.ui.sessions import ConfirmGate, Principal


def operator_page(config: HttpConfig, store_url: str) -> tuple[list[BaseRoute], list[str]]:
    """The operator page's routes (``--ui``, ``continuum ui``) and their paths, which skip
    the bearer check: the page logs in with a token from the same token file, POSTed in a
    form, and acts only for a role that may call ``continuum_confirm`` and only with the
    person's confirm token (``CONTINUUM_MCP_CONFIRM_TOKEN``) typed into each form; without
    one configured the page is read-only (said on stderr here, at start-up)."""
    secret = config.confirm_token
    gate = ConfirmGate(secret.matches if secret is not None else None, CONFIRM_TOKEN_ENV)
    if secret is None:
        sys.stderr.write(
            f"continuum: the operator page is read-only ({CONFIRM_TOKEN_ENV} is not set: "
            "confirm, reconcile and decide need the person's confirm token)\n"
        )
        sys.stderr.flush()

    def principal(token: str) -> Principal | None:
        grant = config.tokens.lookup(token) if token else None
        if grant is None:
            return None
        return Principal(
            grant.role.value,
            allows(grant.role, "continuum_confirm"),
            f"token-file line {grant.line}",
        )

    return (
        operator_routes(store_url, principal, confirm=gate, secure=config.tls is not None),
        ui_paths(),
    )
