"""The owner tag of a call over HTTP, as logic (``continuum.mcp.owners.owner_tag``;
contract §6: only the owner settles an action in flight; contract §9).

The SDK objects a tool's context reaches are stood in for by plain namespaces here; the
real ones are exercised end to end in ``test_http_review_ownership.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from continuum.errors import ContinuumError
from continuum.mcp.owners import owner_tag
from continuum.serving.auth import Caller
from continuum.serving.tokens import Grant, Role

GRANT = Grant(Role.SUBMIT, 2)


def ctx(connection: Any, headers: dict[str, str] | None = None) -> Any:
    session = SimpleNamespace(_connection=connection) if connection is not None else object()
    request = SimpleNamespace(headers=headers or {})
    return SimpleNamespace(request_context=SimpleNamespace(session=session, request=request))


def connection(session_id: str | None) -> Any:
    return SimpleNamespace(session_id=session_id, state={})


def test_a_session_keeps_one_random_tag_that_does_not_show_its_session_id() -> None:
    a, b = connection("a" * 32), connection("a" * 32)  # even an equal id: another connection
    first, conn = owner_tag(ctx(a), GRANT, Caller("agent"))
    assert conn is a
    assert owner_tag(ctx(a), GRANT, Caller("agent"))[0] == first
    assert owner_tag(ctx(b), GRANT, Caller("agent"))[0] != first
    assert first.startswith("token-file-line-2/session-") and "a" * 32 not in first


def test_a_per_request_call_is_owned_by_its_token_line_and_client_name() -> None:
    tag, conn = owner_tag(ctx(connection(None)), GRANT, Caller("agent-a"))
    assert conn is None and tag.startswith("token-file-line-2/client-")
    assert "agent-a" not in tag  # a digest: the name is the caller's text
    assert owner_tag(ctx(connection(None)), GRANT, Caller("agent-a"))[0] == tag
    assert owner_tag(ctx(connection(None)), GRANT, Caller("agent-b"))[0] != tag
    assert owner_tag(ctx(connection(None)), Grant(Role.SUBMIT, 3), Caller("agent-a"))[0] != tag


def test_a_session_call_whose_connection_cannot_be_found_is_refused() -> None:
    """Fail closed: without the SDK's connection a session must not fall back to the
    token-and-name owner that other sessions with the same token would share."""
    with pytest.raises(ContinuumError) as caught:
        owner_tag(ctx(None, {"mcp-session-id": "x" * 32}), GRANT, Caller("agent"))
    assert caught.value.code == "mcp.owner_unknown"
    # Negative control: with no session header it is a per-request call, and has an owner.
    tag, _ = owner_tag(ctx(None), GRANT, Caller("agent"))
    assert tag.startswith("token-file-line-2/client-")
