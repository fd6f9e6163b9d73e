"""Fixtures for the real-host tests: a temp project per test, configured as a user would."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts.harness import Host, Project


def make_project(host: Host, tmp_path: Path, run: str = "proj") -> Project:
    return Project(host, tmp_path / host.name, run=run)


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    return tmp_path
