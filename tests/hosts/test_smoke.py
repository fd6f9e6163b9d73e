"""Each real host starts, talks to the scripted model, and runs continuum's MCP server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts.conftest import make_project
from tests.hosts.harness import Host
from tests.hosts.host_claude import ClaudeCode
from tests.hosts.script import mcp

HOSTS: list[Host] = [ClaudeCode()]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.name)
def test_host_lists_continuum_tools_and_its_client_name_may_write(host: Host, tmp_path: Path) -> None:
    p = make_project(host, tmp_path)
    p.install_mcp()
    s = p.session(
        [
            [mcp("continuum_resume")],
            [mcp("continuum_record_progress", run_id="smoke", goal="say hello", completed=1, total=2)],
        ]
    )
    assert s.code == 0 and not s.model.problems, s.describe()
    resume, progress = s.model.results()
    assert resume.json()["mode"] == "no_active_run", s.describe()
    assert not progress.is_error and progress.json()["progress"]["completed"] == 1, s.describe()
    status = p.continuum_json("status", "smoke")
    assert status["progress"]["completed"] == 1, status
