"""The gateway in front of a published MCP server: the MCP project's reference file-system
server (``@modelcontextprotocol/server-filesystem``, pinned in tests/gateway/servers.toml,
installed from npm by ``make hosts``), run offline by Node.js as a real subprocess.

Its ``write_file`` is the effect. Whether the upstream was really called is read from the
world, not from anything the gateway says: after the first write the test deletes the
file, so a call that reaches the server makes it appear again.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest
from mcp.client.session import ClientSession

from continuum.runtime.facade import Continuum

from .test_mcp_gateway import call, connect, ledger_meta, text

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
RUN = "files"
RULES = """\
run = "files"
read_only = ["read_.*", "list_.*", "directory_tree", "search_files", "get_file_info"]

[[effect]]
tool = "write_file"
action_type = "write_file"
key = "write:{path}"

[[effect]]
tool = "move_file"
action_type = "move_file"
key = "move:{source}:{destination}"
"""


def server_binary() -> Path:
    """The installed server; a missing one fails the test (``make hosts`` installs it)."""
    with (Path(__file__).with_name("servers.toml")).open("rb") as f:
        pin = tomllib.load(f)["server-filesystem"]
    root = Path(os.environ.get("CONTINUUM_HOSTS_DIR") or REPO / ".cache" / "hosts")
    exe = root / f"server-filesystem-{pin['version']}" / "node_modules" / ".bin" / pin["bin"]
    assert exe.exists(), f"{exe} is missing: run `make hosts` (make test does)"
    return exe


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".continuum").mkdir()
    (tmp_path / ".continuum" / "gateway.toml").write_text(RULES, encoding="utf-8")
    (tmp_path / "world").mkdir()
    return tmp_path


def direct(project: Path) -> list[str]:
    return [str(server_binary()), str(project / "world")]


def gateway(project: Path) -> list[str]:
    return [sys.executable, "-m", "continuum", "gateway", "mcp", "--", *direct(project)]


async def write(session: ClientSession, project: Path, content: str) -> tuple[bool, str]:
    result = await call(
        session, "write_file", path=str(project / "world" / "report.txt"), content=content
    )
    return bool(result.is_error), text(result)


async def test_the_published_servers_tools_are_pinned_and_a_write_is_performed_once(
    project: Path,
) -> None:
    report = project / "world" / "report.txt"
    async with connect(project, gateway(project)) as session:
        listed = {t.name for t in (await session.list_tools()).tools}
        first = await write(session, project, "Q3 figures")
        assert report.read_text(encoding="utf-8") == "Q3 figures"  # the server wrote it
        report.unlink()
        again = await call(session, "write_file", path=str(report), content="Q3 figures")
        listing = await call(session, "list_directory", path=str(project / "world"))
    async with connect(project, gateway(project)) as session:  # a fresh gateway
        later = await call(session, "write_file", path=str(report), content="Q3 figures")
    assert {"write_file", "move_file", "read_text_file", "list_directory"} <= listed
    assert not first[0] and "report.txt" in first[1]
    for repeat in (again, later):
        assert not repeat.is_error and ledger_meta(repeat)["answered"] == "from_ledger"
    assert not report.exists()  # neither repeat reached the server
    assert not listing.is_error and "report.txt" not in text(listing)  # a read: forwarded
    pins = json.loads((project / ".continuum" / "gateway-pins.json").read_text("utf-8"))
    assert listed <= set(json.dumps(pins).replace('"', " ").split())  # every tool pinned


async def test_without_the_gateway_a_repeated_write_reaches_the_server_again(
    project: Path,
) -> None:
    """Negative control for the test above: straight to the server, the repeat writes."""
    report = project / "world" / "report.txt"
    async with connect(project, direct(project)) as session:
        assert not (await write(session, project, "Q3 figures"))[0]
        report.unlink()
        assert not (await write(session, project, "Q3 figures"))[0]
    assert report.read_text(encoding="utf-8") == "Q3 figures"  # written a second time


async def test_the_gateway_killed_after_the_servers_write_leaves_it_unknown_and_refused(
    project: Path,
) -> None:
    report = project / "world" / "report.txt"
    async with connect(project, gateway(project), CONTINUUM_FAULTS="gateway_after_forward") as s:
        with pytest.raises(Exception):  # noqa: B017 - the gateway died: the SDK's own error
            await write(s, project, "Q3 figures")
    assert report.read_text(encoding="utf-8") == "Q3 figures"  # the server did it
    report.unlink()
    async with connect(project, gateway(project)) as session:
        refused, said = await write(session, project, "Q3 figures")
    assert refused and "unknown" in said and f"continuum reconcile {RUN}" in said
    assert not report.exists()  # not written again


async def test_the_servers_error_is_a_certain_failure_that_may_be_tried_again(
    project: Path,
) -> None:
    source, target = project / "world" / "a.txt", project / "world" / "b.txt"
    async with connect(project, gateway(project)) as session:
        missing = await call(session, "move_file", source=str(source), destination=str(target))
        source.write_text("now here", encoding="utf-8")
        moved = await call(session, "move_file", source=str(source), destination=str(target))
    assert missing.is_error  # the server's own error: nothing was moved
    assert not moved.is_error and ledger_meta(moved) == {}  # forwarded again, not refused
    assert target.read_text(encoding="utf-8") == "now here" and not source.exists()
    with Continuum.open(str(project / "continuum.db"), create=False) as rt:
        [action] = rt.actions(RUN)
    assert action.status == "completed" and action.attempt == 2  # failed once, then done


def _started(project: Path) -> bool:
    if not (project / "continuum.db").exists():
        return False
    with Continuum.open(str(project / "continuum.db"), create=False) as rt:
        try:
            return any(a.status == "started" for a in rt.actions(RUN))
        except Exception:  # noqa: BLE001 - the run is not there yet
            return False


def _server_pid(project: Path) -> int:
    """The pid of the file-system server the gateway started (its argument: world/)."""
    world = str(project / "world").encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in cmdline:  # the gateway's own command line names the server too
            continue
        if world in cmdline and any(b"mcp-server-filesystem" in part for part in cmdline):
            return int(entry.name)
    raise AssertionError("the file-system server's process was not found")


async def test_the_published_server_killed_mid_call_leaves_the_call_unknown_and_refused(
    project: Path,
) -> None:
    import signal

    import anyio

    report = project / "world" / "report.txt"
    async with connect(project, gateway(project)) as session:
        await session.list_tools()
        pid = _server_pid(project)
        os.kill(pid, signal.SIGSTOP)  # the call reaches its pipe, never an answer

        async def kill_once_forwarded() -> None:
            # The intercept commits before the call is forwarded: once the action is
            # started, the call is on its way to the stopped server's pipe.
            with anyio.fail_after(60):
                while not _started(project):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.2)  # the forward is one write after that commit
            os.kill(pid, signal.SIGKILL)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_once_forwarded)
            lost, said = await write(session, project, "Q3 figures")
    async with connect(project, gateway(project)) as session:  # a fresh server
        again, said_again = await write(session, project, "Q3 figures")
    assert lost and "may or may not have happened" in said
    assert again and "unknown" in said_again and f"continuum reconcile {RUN}" in said_again
    assert not report.exists()  # the stopped server never wrote; nothing retried it
    with Continuum.open(str(project / "continuum.db"), create=False) as rt:
        [action] = rt.actions(RUN)
    assert action.status == "unknown"  # only a person may say it did not happen
