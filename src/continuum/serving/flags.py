"""What ``continuum-mcp`` and ``continuum ui`` accept as transport flags, checked before
anything of the HTTP stack is imported: a stdio server never loads it (start-up time)."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_HTTP_MAX_IN_FLIGHT = 64
"""Requests served at once over HTTP (all clients together) by default."""

HTTP_FLAGS = ("--listen", "--token-file", "--tls-cert", "--tls-key", "--tls-client-ca")


def flag_problem(transport: str, values: Mapping[str, object]) -> str | None:
    """What is wrong with this combination of transport flags, in one line, or None.

    ``values`` maps each flag of ``HTTP_FLAGS`` to what was given (None: not given).
    """
    given = [flag for flag in HTTP_FLAGS if values.get(flag) is not None]
    if transport == "stdio":
        if given:
            return (
                f"{given[0]} is for --transport streamable-http; stdio takes none of "
                f"{', '.join(HTTP_FLAGS)}"
            )
        return None
    for flag in ("--listen", "--token-file"):
        if values.get(flag) is None:
            return f"--transport streamable-http needs {flag}"
    cert, key = values.get("--tls-cert"), values.get("--tls-key")
    if (cert is None) != (key is None):
        return "--tls-cert and --tls-key go together: give both or neither"
    if values.get("--tls-client-ca") is not None and cert is None:
        return "--tls-client-ca needs --tls-cert and --tls-key (client certificates need TLS)"
    return None


MAX_IN_FLIGHT_FLAG = "--max-in-flight"
"""The command-line flag that changes the in-flight limit; named in the busy answer."""


SERVER_BUSY = -32050
"""JSON-RPC code (server-defined range -32000..-32099, unused by the SDK) for a request
refused because the connection already has the limit of unanswered requests."""
