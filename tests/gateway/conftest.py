"""Fixtures the gateway tests share: the async backend, and a project whose
``.continuum/gateway.toml`` holds the MCP gateway tests' rules (``RULES`` of
``test_mcp_gateway.py``; a test module with other rules defines its own ``project``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_mcp_gateway import RULES


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "gateway.toml").write_text(RULES, encoding="utf-8")
    return tmp_path
