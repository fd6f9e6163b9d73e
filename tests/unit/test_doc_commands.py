"""Every command in README.md and references/quickstart.md works as printed (issue 31).

The console blocks (the README's tour, the quick start) are run and their output compared
(``doc_console``). Every line of the README's ``bash`` blocks is run too, in a scratch
project, except the few listed in ``RUN_ELSEWHERE`` with where they are proven instead;
the operator page's block is run as a person would, and the page is fetched while it
serves.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.unit.doc_console import ROOT, assert_console_block_true

README = ROOT / "README.md"
QUICKSTART = ROOT / "references" / "quickstart.md"

# Commands of the README not run here, each with the test that runs it.
RUN_ELSEWHERE = {
    "make demo": "tests/cli/test_first_hour.py and CI's own run",
    "make test": "CI (.ci/run runs exactly this)",
    "make check": "the edit loop; its parts are make test's first steps",
    "pip install .": "tests/e2e/test_wheel.py builds and installs the wheel from the tree",
    "pip install '.[postgres]'": "tests/e2e/test_wheel.py (the extra's dependencies: make setup)",
}


def bash_blocks(doc: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)


def commands(block: str) -> list[str]:
    """The block's commands, each without its trailing comment."""
    out = []
    for line in block.splitlines():
        command = re.sub(r"\s+#.*$", "", line).strip()
        if command and not command.startswith("#"):
            out.append(command)
    return out


def shell_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUUM_")}
    env.update(PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1")
    return env


def test_the_quickstart_prints_what_it_shows(tmp_path: Path) -> None:
    assert_console_block_true(QUICKSTART, tmp_path)


def test_the_quickstart_has_a_crash_and_ends_safe_to_resume() -> None:
    text = QUICKSTART.read_text(encoding="utf-8")
    assert "unknown" in text and "exit 20" in text and "verdict: resume" in text
    assert "record-progress" in text and "No such command" not in text


def test_every_readme_command_is_run_here_or_says_where() -> None:
    every = [c for block in bash_blocks(README) for c in commands(block)]
    assert every, "README.md has no bash blocks"
    unknown = [c for c in RUN_ELSEWHERE if c not in every]
    assert not unknown, f"RUN_ELSEWHERE names commands the README no longer has: {unknown}"


def test_the_readme_host_commands_run_as_printed(tmp_path: Path) -> None:
    block = next(b for b in bash_blocks(README) if "continuum mcp install" in b)
    for command in commands(block):
        p = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=shell_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, f"$ {command}\n{p.stdout}{p.stderr}"
    assert (tmp_path / ".mcp.json").is_file()
    assert (tmp_path / ".claude" / "settings.json").is_file()
    assert (tmp_path / ".continuum" / "effects.toml").is_file()


def test_the_readme_operator_page_commands_serve_the_page(tmp_path: Path) -> None:
    block = next(b for b in bash_blocks(README) if "continuum ui" in b)
    lines = commands(block)
    assert lines[-1].startswith("continuum ui --listen 127.0.0.1:8080")
    subprocess.run(["continuum", "init"], cwd=tmp_path, env=shell_env(), check=True, timeout=60)
    # As printed, but on a free port: 8080 may be taken on a shared machine.
    serve = lines[-1].replace("127.0.0.1:8080", "127.0.0.1:0")
    server = subprocess.Popen(
        ["bash", "-c", "\n".join([*lines[:-1], f"exec {serve}"])],
        cwd=tmp_path,
        env=shell_env(),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stderr is not None
        deadline, line = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "serving the operator page" not in line:
            line = server.stderr.readline()
            if not line and server.poll() is not None:
                pytest.fail(f"continuum ui exited {server.returncode}")
        url = re.search(r"at (http://\S+/ui/)", line)
        assert url, line
        assert "read-only" not in line  # the confirm token was exported, as printed
        with urllib.request.urlopen(url.group(1), timeout=30) as page:
            assert page.status == 200
            assert "token" in page.read().decode().lower()  # the login form
        assert (tmp_path / "tokens").stat().st_mode & 0o077 == 0
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()


# Words that point at what a clone does not hold: the specification and the issue
# tracker live outside the repository; references/contract.md is the contract's text here.
OUTSIDE = re.compile(r"\bSPEC\b|SPEC\.md|closing notes?|\.\./shared/")


@pytest.mark.parametrize(
    "doc",
    [
        README,
        ROOT / "STATUS.md",
        ROOT / "CHANGELOG.md",
        ROOT / "e2e-autonomy-test" / "README.md",
        *sorted((ROOT / "references").glob("*.md")),
    ],
    ids=lambda p: p.name,
)
def test_no_document_points_outside_the_repository(doc: Path) -> None:
    found = [
        f"{doc.name}:{n}: {line.strip()[:100]}"
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)
