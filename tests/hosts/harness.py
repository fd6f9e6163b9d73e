"""Running a real host in a temp project against a scripted model.

``Host`` is what differs per host (one module each: ``host_claude.py``, ``host_gemini.py``,
``host_codex.py``, ``host_kilo.py``): which binary, which wire protocol, which settings it
needs to run offline, its own tool names. ``Project`` is a temp project with a private
HOME, configured the way a user would: by running ``continuum mcp install --client X``
and ``continuum hooks install --client X`` there. ``Project.session`` runs one
non-interactive session of the real binary.

No model, no key, no network: every host is pointed at ``model_server.serve`` on
127.0.0.1, and the environment is built from scratch (nothing of the test runner's own
HOME or keys leaks in).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.hosts.model_server import Wire, serve
from tests.hosts.proc import BOUND, HostProcess
from tests.hosts.script import Model, Step, ToolCall

REPO = Path(__file__).resolve().parents[2]
PINS = Path(__file__).resolve().parent / "hosts.toml"
VENV_BIN = Path(sys.executable).parent
CONTINUUM = VENV_BIN / "continuum"


def pins() -> dict[str, dict[str, str]]:
    with PINS.open("rb") as f:
        return tomllib.load(f)


def hosts_root() -> Path:
    return Path(os.environ.get("CONTINUUM_HOSTS_DIR") or REPO / ".cache" / "hosts")


def binary(name: str) -> Path:
    """The pinned host's binary; a clear failure (never a skip) when it is not installed."""
    pin = pins()[name]
    path = hosts_root() / f"{name}-{pin['version']}" / "node_modules" / ".bin" / pin["bin"]
    if not path.exists():
        raise AssertionError(
            f"{name} {pin['version']} is not installed at {path}: run `make hosts` "
            "(make test does it), which installs it from the npm registry"
        )
    return path


class Host:
    """What one real host needs. Subclasses fill these in."""

    name: str  # the key in hosts.toml
    mcp_client: str  # continuum mcp install --client ...
    hooks_client: str | None  # continuum hooks install --client ..., None: no hooks
    shell_tool: str  # the model-facing name of its shell tool

    def wire(self) -> Wire:
        raise NotImplementedError

    def prepare(self, project: Project) -> None:
        """Host settings needed to run offline (auth, trust, model), never continuum's."""

    def argv(self, project: Project, prompt: str) -> list[str]:
        raise NotImplementedError

    def env(self, project: Project, base_url: str) -> dict[str, str]:
        raise NotImplementedError

    def shell(self, command: str) -> ToolCall:
        return ToolCall(self.shell_tool, {"command": command})

    def write(self, path: str, content: str) -> ToolCall:
        raise NotImplementedError

    def compaction(self) -> tuple[list[Step], str]:
        """(steps, prompt) of a session in which the host compacts its context (and so
        runs its pre-compaction hook)."""
        raise NotImplementedError


def base_env(project: Project) -> dict[str, str]:
    """A clean environment: PATH (the venv first, so `continuum` is the one under test),
    a private HOME, and nothing else of the test runner's."""
    path = os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"])
    node = shutil.which("node")
    if node:
        path = os.pathsep.join([path, str(Path(node).parent)])
    return {
        "PATH": path,
        "HOME": str(project.home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(project.tmp),
        "XDG_CONFIG_HOME": str(project.home / ".config"),
        "XDG_DATA_HOME": str(project.home / ".local" / "share"),
        "XDG_CACHE_HOME": str(project.home / ".cache"),
        "XDG_STATE_HOME": str(project.home / ".local" / "state"),
        # Hooks run in their own processes unless a test hands them to a gate it started
        # (a resident gate of the machine's user must not serve these hosts' hooks).
        "CONTINUUM_GATE_SOCKET": "off",
    }


@dataclass
class SessionResult:
    code: int
    killed: bool
    model: Model
    process: HostProcess

    @property
    def stdout(self) -> str:
        return self.process.stdout()

    @property
    def stderr(self) -> str:
        return self.process.stderr()

    def describe(self) -> str:
        """For assertion messages: what the host said and what the model saw."""
        return (
            f"exit {self.code} (killed: {self.killed}); problems: {self.model.problems}\n"
            f"results: {[(r.name, r.text[:300]) for r in self.model.results()]}\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}"
        )


@dataclass
class Project:
    host: Host
    root: Path
    run: str = "proj"
    extra_env: dict[str, str] = field(default_factory=dict)
    sessions: int = 0

    def __post_init__(self) -> None:
        for d in (self.dir, self.home, self.tmp, self.logs):
            d.mkdir(parents=True, exist_ok=True)

    @property
    def dir(self) -> Path:
        return self.root / "proj"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def db(self) -> Path:
        return self.dir / "continuum.db"

    def continuum(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real CLI, in the project, on the project's store."""
        done = subprocess.run(
            [str(CONTINUUM), "--db", str(self.db), *args],
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=120,
            env={**base_env(self), "NO_COLOR": "1"},
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"continuum {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
            )
        return done

    def continuum_json(self, *args: str) -> Any:
        return json.loads(self.continuum("--json", *args, check=False).stdout)

    def install_mcp(self, *extra: str) -> None:
        self.continuum("mcp", "install", "--client", self.host.mcp_client, *extra)

    def log_mcp_server(self) -> Path:
        """Make the installed ``continuum-mcp`` log at debug into a file the test reads
        (the hosts keep a server's stderr to themselves): in every file ``mcp install``
        wrote under the project or its HOME, the server's command is replaced by a wrapper
        that runs that same command with ``--log-level debug`` and the host's arguments,
        its stderr appended to the returned file."""
        from continuum.cli.mcp_install import server_command

        command = server_command()
        assert len(command) == 1, f"expected a console script, got {command}"
        log = self.logs / "continuum-mcp.log"
        wrapper = self.logs / "continuum-mcp-logged"
        wrapper.write_text(
            f'#!/bin/sh\nexec "{command[0]}" --log-level debug "$@" 2>>"{log}"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
        quoted = json.dumps(command[0])  # as JSON and TOML both spell this plain path
        changed = []
        for root in (self.dir, self.home):
            for path in root.rglob("*"):
                if not path.is_file() or path.stat().st_size > 1_000_000:
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
                if quoted in text:
                    path.write_text(text.replace(quoted, json.dumps(str(wrapper))), "utf-8")
                    changed.append(path)
        assert changed, f"no installed MCP config names {command[0]}"
        return log

    def install_hooks(self, *extra: str) -> None:
        assert self.host.hooks_client is not None, f"{self.host.name} has no hooks"
        self.continuum(
            "hooks", "install", "--client", self.host.hooks_client, "--run", self.run, *extra
        )

    def session(
        self,
        steps: Sequence[Step],
        *,
        prompt: str = "Do the task.",
        final: str = "Done.",
        kill_marker: str | None = None,
        subagents: Mapping[str, Sequence[Step]] | None = None,
        bound: float = BOUND,
    ) -> SessionResult:
        """One non-interactive session of the real host.

        ``kill_marker``: a file name in the project; when a tool call creates it, the
        host and everything it started are SIGKILLed (the tool itself blocks after
        creating it, so nothing after it runs)."""
        self.sessions += 1
        model = Model(list(steps), final=final, subagents=dict(subagents or {}))
        wire = self.host.wire()
        with serve(wire, model) as url:
            self.host.prepare(self)
            env = {**self.host.env(self, url), **self.extra_env}
            proc = HostProcess(
                self.host.argv(self, prompt),
                env,
                self.dir,
                self.logs,
                name=f"{self.host.name}-{self.sessions}",
            ).start()
            if kill_marker is not None:
                from tests.hosts.proc import wait_for

                try:
                    wait_for(self.dir / kill_marker, bound=bound, proc=proc.proc)
                except AssertionError as e:
                    proc.kill()
                    failed = SessionResult(-1, True, model, proc)
                    raise AssertionError(f"{e}\n{failed.describe()}") from None
                proc.kill()
                code = proc.proc.returncode if proc.proc else -9
            else:
                code = proc.wait(bound)
        return SessionResult(code, proc.killed, model, proc)

    def outbox(self) -> list[str]:
        path = self.dir / "outbox.txt"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def write_file(self, name: str, text: str, mode: int | None = None) -> Path:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if mode is not None:
            path.chmod(mode)
        return path

    def actions(self, run: str | None = None) -> list[dict[str, Any]]:
        data = self.continuum_json("actions", run or self.run, "--all")
        return list(data.get("actions") or [])


def json_of(mapping: Mapping[str, Any]) -> str:
    return json.dumps(mapping, indent=2)
