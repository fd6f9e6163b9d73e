"""The operator page: runs, their verdicts and what waits for a person, in a browser.

Served by ``continuum ui --listen`` or by ``continuum-mcp --transport streamable-http
--ui`` (both mount ``routes.operator_routes`` under ``/ui``; see references/operators.md,
"The operator page"). Server-rendered HTML, no script, no external asset:

- ``page``: the HTML. Every stored value goes through ``page.agent`` or ``page.text``
  (terminal escapes and bidi characters shown as visible escapes, then HTML-escaped),
  and agent-supplied text is marked as such, as the CLI marks it.
- ``sessions``: log-in by a token POSTed in a form (never in a URL), a random session id
  in an HttpOnly SameSite=Strict cookie, a CSRF token per session.
- ``routes``: the Starlette routes; confirm, reconcile and decide record exactly what
  ``continuum confirm|reconcile|decide`` record (origin human), for the ``approve`` and
  ``admin`` roles only, and only with the person's confirm token typed into the form
  (``ConfirmGate``; none configured: the page is read-only).

This package knows nothing of the MCP server or the token file: whoever mounts it passes
a function that turns a presented token into a ``Principal`` (``ui.mount.operator_page``).
"""

from continuum.ui.routes import UI_PREFIX, operator_routes, ui_paths
from continuum.ui.sessions import Authenticator, ConfirmGate, Principal

__all__ = [
    "UI_PREFIX",
    "Authenticator",
    "ConfirmGate",
    "Principal",
    "operator_routes",
    "ui_paths",
]
