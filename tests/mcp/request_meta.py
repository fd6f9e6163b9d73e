"""The ``_meta`` a test sends with ``Client.call_tool`` (``authToken``, ``confirmToken``).

``mcp_types.RequestParamsMeta`` is an open TypedDict (PEP 728 ``extra_items=Any``): the
SDK carries any key to the server unchanged. mypy does not implement ``extra_items`` yet
and refuses every key but ``progress_token``, so the tests hand their keys over through
this one cast; what goes on the wire is the same dict.
"""

from __future__ import annotations

from typing import Any, cast

from mcp_types import RequestParamsMeta


def request_meta(items: dict[str, Any]) -> RequestParamsMeta:
    return cast(RequestParamsMeta, items)
