"""Serving ``continuum gateway mcp``: the upstream started or reached, its tools judged,
then the host served on stdio (the hardened transport, with the gateway's ``divert`` hook)
until the host closes it; the passthrough of resources and prompts; the renewal of the
leases the gateway holds. The judging of calls and the ledger around them are
``mcp_gateway.py``'s ``Gateway``."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.client.session import ClientSession
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from continuum.errors import ContinuumError, UsageError
from continuum.gateway.mcp_gateway import LEASE_RENEW_SECONDS, Gateway, GatewayConfig
from continuum.gateway.upstream import (
    STARTUP_TIMEOUT,
    http_upstream,
    stdio_upstream,
    upstream_failed,
)
from continuum.log import get_logger
from continuum.serving.transport import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE_BYTES,
    hardened_stdio_server,
)
from continuum.version import __version__

__all__ = ["Passthrough", "serve"]

log = get_logger("continuum.gateway")


def _page(params: types.PaginatedRequestParams | None) -> types.PaginatedRequestParams | None:
    """Only the host's cursor goes upstream: its ``_meta`` may hold its tokens for the
    gateway itself."""
    if params is None or params.cursor is None:
        return None
    return types.PaginatedRequestParams(cursor=params.cursor)


class Passthrough:
    """Resources and prompts, forwarded as they are: reads that change nothing, so they
    are neither judged by the rules nor recorded (a prompt's or resource's text still
    reaches the model as the upstream wrote it, as without the gateway). Registered only
    for what the upstream's handshake says it offers."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def _session(self) -> ClientSession:
        await self.gateway.reach()
        return self.gateway.session

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await (await self._session()).list_resources(params=_page(params))

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await (await self._session()).list_resource_templates(params=_page(params))

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        result = await (await self._session()).read_resource(params.uri)
        if not isinstance(result, types.ReadResourceResult):  # asks the client for input
            raise MCPError(types.INVALID_REQUEST, "the upstream asked for input: not proxied")
        return result

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return await (await self._session()).list_prompts(params=_page(params))

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        result = await (await self._session()).get_prompt(params.name, params.arguments)
        if not isinstance(result, types.GetPromptResult):
            raise MCPError(types.INVALID_REQUEST, "the upstream asked for input: not proxied")
        return result

    def handlers(self, offered: types.ServerCapabilities) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if offered.resources is not None:
            found.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
            )
        if offered.prompts is not None:
            found.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        return found


async def _renew(gateway: Gateway) -> None:
    while True:
        await anyio.sleep(LEASE_RENEW_SECONDS)
        try:
            await anyio.to_thread.run_sync(gateway.renew_leases)
        except ContinuumError as e:
            log.warning("gateway.lease_renewal_failed", code=e.code)


async def serve(config: GatewayConfig) -> None:
    """Start (or connect to) the upstream, judge its tools, then serve the host on
    stdin/stdout until the host closes it. Raises ``UsageError``
    (``gateway.upstream_failed``) when the upstream cannot be started or reached or does
    not answer the handshake."""
    log.info("gateway.policy", server=config.server, **config.policy.describe())
    async with AsyncExitStack() as stack:
        try:
            if config.url is not None:
                reconnector = await stack.enter_async_context(
                    http_upstream(config.url, config.headers, config.timeout)
                )
            else:
                reconnector = await stack.enter_async_context(
                    stdio_upstream(config.upstream, config.timeout, os.environ)
                )
            first = reconnector.current
            assert first.session is not None and first.hello is not None
            session, hello, relay = first.session, first.hello, first.relay
            gateway = Gateway(config, session)
            gateway.reconnector = reconnector
            if first.leg is not None:
                gateway.leg = (session, first.leg)
            with anyio.fail_after(STARTUP_TIMEOUT):
                await gateway.refresh()
        except UsageError:  # the pins file: its own error
            raise
        except Exception as e:  # not found, not executable, no handshake, no listing
            raise upstream_failed(config.server, config.url, e) from e
        server: Server[Any] = Server(
            "continuum-gateway",
            version=__version__,
            instructions=f"continuum's gateway in front of {config.server!r}: calls "
            "its rules name as effects are recorded, and a repeat is answered from "
            "continuum's ledger instead of being performed again.",
            on_list_tools=gateway.list_tools,
            on_call_tool=gateway.call_tool,
            **Passthrough(gateway).handlers(hello.capabilities),
        )
        try:
            async with anyio.create_task_group() as tg:
                # Host calls taken past the SDK's server run in this group: cancelled (and
                # settled, as the SDK's handlers are) when the host side stops serving.
                gateway.spawn = tg.start_soon
                gateway.stamp = lambda: server.server_info_stamp
                if relay is not None:
                    relay.bind(gateway, tg.start_soon)
                    gateway.relay = relay
                tg.start_soon(_renew, gateway)
                async with hardened_stdio_server(
                    DEFAULT_MAX_MESSAGE_BYTES,
                    max_in_flight=DEFAULT_MAX_IN_FLIGHT,
                    divert=gateway.divert,
                ) as (read, write):
                    await server.run(read, write, server.create_initialization_options())
                tg.cancel_scope.cancel()
        finally:
            gateway.drop_runtime()
