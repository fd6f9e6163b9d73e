"""What a newcomer runs into in the first hour, each found by hand (issue 12): bare
`continuum`, Ctrl-C, paths in messages, log levels, `where`, `show-contract`, `benchmark
--help`, `status` and `actions` agreeing, a mistyped run id, `make demo`, `make clean`,
shell completion."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from continuum import Continuum
from continuum.cli.main import run
from continuum.mcp.server import main as mcp_main
from tests.cli.conftest import Result
from tests.cli.pty_support import DEADLINE, Terminal, cli_env

CLI = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
LEVELS = "debug, info, warning, error, critical"


@pytest.fixture
def sigint_reaches_children() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


# -- bare `continuum` -----------------------------------------------------------------------


def test_bare_continuum_prints_the_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Usage: continuum [OPTIONS] COMMAND") and "Commands:" in out
    assert err == ""
    assert run(["mcp"]) == 0
    out, _ = capsys.readouterr()
    assert "install" in out and "uninstall" in out
    done = subprocess.run(
        [sys.executable, "-m", "continuum"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=DEADLINE,
    )
    assert done.returncode == 0 and "Usage: continuum" in done.stdout


# -- Ctrl-C ---------------------------------------------------------------------------------


def test_ctrl_c_in_a_command_exits_130_with_one_line(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("start", "r1", "--goal", "g")

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Continuum, "runs", interrupted)
    r = cli("runs")
    assert r.code == 130
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: interrupted (Ctrl-C)"), r.err
    assert "Traceback" not in r.err and "aborted" not in r.err
    r = cli("--json", "runs")
    assert r.code == 130 and r.json()["error"]["code"] == "interrupted"


def test_ctrl_c_at_a_prompt_exits_130(
    cli: CLI, db: str, tmp_path: Path, sigint_reaches_children: None
) -> None:
    cli("start", "r1", "--goal", "g")
    term = Terminal(db, "confirm", "r1", cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130
    assert "error: interrupted (Ctrl-C)" in term.text() and "Traceback" not in term.text()
    assert cli("--json", "status", "r1").json()["head_sequence"] == 1  # nothing confirmed


def test_an_eof_at_a_prompt_is_still_aborted_exit_1(cli: CLI, db: str, tmp_path: Path) -> None:
    cli("start", "r1", "--goal", "g")
    term = Terminal(db, "confirm", "r1", cwd=tmp_path)
    term.wait_for("Confirm this as true?")
    term.send("\x04")  # Ctrl-D
    assert term.finish() == 1


# -- paths as typed ---------------------------------------------------------------------------


def test_paths_in_messages_are_shown_as_typed(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("verify-contract", "back\\slash.json")
    assert r.code == 1
    assert "error: cannot read back\\slash.json: No such file or directory" in r.err, r.err
    where = cli("where", "--db", "back\\slash.db", with_db=False)
    assert where.out.strip() == str(tmp_path / "back\\slash.db")
    installed = cli("mcp", "install", "--client", "claude-code", "--config", "back\\slash.json")
    assert installed.code == 0 and "wrote back\\slash.json" in installed.out


def _shown_as_typed(r: Result, fragment: str, code: int) -> None:
    """The error line shows ``fragment`` (a path with one backslash) as typed: no doubled
    backslash anywhere, and the same message in the JSON error."""
    assert r.code == code, (r.code, r.err)
    line = r.err.strip()
    assert line.startswith("error: ") and fragment in line, line
    assert "\\\\" not in line, line


def test_store_and_file_errors_show_paths_as_typed(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each message that names a path a person typed shows it as typed (shell quoting,
    one backslash), not as ``repr()`` (two): store URLs, store paths, foreign databases,
    PostgreSQL URLs, export and import files, file and git dependencies, host settings."""
    import sqlite3

    monkeypatch.chdir(tmp_path)
    odd = "back\\slash"
    on = lambda *a: cli(*a, with_db=False)  # noqa: E731
    _shown_as_typed(on("--db", f"sqlite://{odd}.db", "runs"), f"store URL 'sqlite://{odd}.db'", 1)
    _shown_as_typed(
        on("--db", f"{odd}.db", "status", "r1"),
        f"no store at '{tmp_path / odd}.db' (from --db '{odd}.db')",
        2,
    )
    _shown_as_typed(
        on("--db", f"no{odd}/x.db", "init"),
        f"directory 'no{odd}' for store 'no{odd}/x.db' does not exist",
        1,
    )
    (tmp_path / f"{odd}.d").mkdir()
    _shown_as_typed(on("--db", f"{odd}.d", "runs"), f"store path '{odd}.d' is a directory", 1)
    (tmp_path / f"{odd}.txt").write_text("notes\n")
    _shown_as_typed(on("--db", f"{odd}.txt", "runs"), f"'{odd}.txt' is not a SQLite database", 1)
    foreign = sqlite3.connect(tmp_path / f"{odd}.sqlite")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    foreign.close()
    _shown_as_typed(
        on("--db", f"{odd}.sqlite", "runs"),
        f"'{odd}.sqlite' is a SQLite database but not a continuum store",
        1,
    )
    _shown_as_typed(
        on("--db", f"postgresql://h/db?{odd}=1", "runs"),
        f"store URL 'postgresql://h/db?{odd}=1' is not a valid postgresql:// URL",
        1,
    )
    # export, import, declare against a real store
    assert cli("start", "r1", "--goal", "g").code == 0
    (tmp_path / f"{odd}.jsonl").write_text("{}\n")
    _shown_as_typed(cli("export", "r1", "-o", f"{odd}.jsonl"), f"'{odd}.jsonl' exists", 1)
    (tmp_path / f"{odd}.bin").write_bytes(b"\xff\xfe\x00")
    _shown_as_typed(cli("import", f"{odd}.bin"), f"'{odd}.bin' is not UTF-8 text", 1)
    _shown_as_typed(
        cli("declare", "r1", "--file", f"{odd}.missing"),
        f"file dependency '{odd}.missing' is not a readable regular file",
        1,
    )
    _shown_as_typed(
        cli("declare", "r1", "--git", f"{odd}.d"),
        f"git dependency '{odd}.d' is not a git work tree with a commit",
        1,
    )
    # host settings that cannot be read (a directory), or written (a dangling link where
    # the settings directory should be)
    project = tmp_path / odd
    (project / ".claude" / "settings.json").mkdir(parents=True)
    r = cli("hooks", "install", "--client", "claude-code", "--dir", str(project))
    _shown_as_typed(r, f"{odd}/.claude/settings.json' cannot be read", 1)
    other = tmp_path / f"{odd}2"
    other.mkdir()
    (other / ".claude").symlink_to("nowhere")
    r = cli("hooks", "install", "--client", "claude-code", "--dir", str(other))
    _shown_as_typed(r, f"could not write '{other}/.claude/settings.json'", 1)
    # Still escaped for a terminal: a control character in a path is shown as an escape.
    r = on("--db", "esc\x1b[2J.d/x.db", "init")
    assert "\x1b" not in r.err and "esc\\x1b[2J.d" in r.err, r.err
    # Untouched: nothing was created by any refusal.
    assert not (tmp_path / f"{odd}.db").exists()


# -- log levels -------------------------------------------------------------------------------


def test_a_bogus_log_level_is_refused_naming_the_levels(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = cli("--json", "--log-level", "bogus", "runs")
    assert r.code == 1
    error = r.json()["error"]
    assert error["code"] == "usage.bad_log_level" and LEVELS in error["message"]
    assert "--log-level" in error["message"]
    monkeypatch.setenv("CONTINUUM_LOG_LEVEL", "bogus")
    r = cli("--json", "runs")
    assert r.code == 1 and r.json()["error"]["code"] == "usage.bad_log_level"
    assert "CONTINUUM_LOG_LEVEL" in r.json()["error"]["message"]


def test_a_real_log_level_is_taken_in_any_case(cli_proc: CLI) -> None:
    r = cli_proc("--log-level", "DEBUG", "init")
    assert r.code == 0, r.err
    r = cli_proc("init", env={"CONTINUUM_LOG_LEVEL": "error"})
    assert r.code == 0, r.err


def test_the_mcp_server_refuses_a_bogus_log_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mcp_main(["--log-level", "bogus", "--doctor"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("continuum-mcp: --log-level 'bogus' is not a log level") and LEVELS in err
    monkeypatch.setenv("CONTINUUM_LOG_LEVEL", "loud")
    assert mcp_main(["--doctor"]) == 1
    assert "CONTINUUM_LOG_LEVEL 'loud'" in capsys.readouterr().err


# -- where --------------------------------------------------------------------------------------


def test_where_prints_the_store_absolute_and_a_postgres_url_without_its_password(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        cli("where", "--db", "sub/agent.db", with_db=False).out == f"{tmp_path / 'sub/agent.db'}\n"
    )
    assert cli("--json", "where", with_db=False).json()["store"] == str(tmp_path / "continuum.db")
    monkeypatch.setenv("CONTINUUM_DB", "sqlite://" + str(tmp_path / "x.db"))  # sqlite:///abs
    assert cli("where", with_db=False).out.strip() == str(tmp_path / "x.db")
    pg = cli("where", "--db", "postgresql://app:s3cret@db.example/agents", with_db=False)
    assert pg.out.strip() == "postgresql://app@db.example/agents" and "s3cret" not in pg.out


# -- show-contract --------------------------------------------------------------------------


def test_show_contract_is_labelled_lines_and_json_stays_exact(cli: CLI, tmp_path: Path) -> None:
    cli("start", "r1", "--goal", "g")
    cli("declare", "r1", "--env", "dataset=v1")
    r = cli("show-contract", "r1")
    assert r.code == 20
    lines = r.out.splitlines()
    labels = [line.split(":")[0] for line in lines if not line.startswith(" ")]
    for label in (
        "verdict",
        "safe",
        "next allowed action",
        "required actions",
        "head",
        "checkpoint",
        "invalidated components",
        "integrity hash",
    ):
        assert label in labels, r.out
    assert '  dependency "dataset": unknown' in r.out
    assert not any(line.lstrip().startswith("{") for line in lines)
    doc = cli("--json", "show-contract", "r1").json()["contract"]
    assert f"integrity hash: {doc['integrity_hash']}" in lines
    f = tmp_path / "c.json"
    written = cli("show-contract", "r1", "-o", str(f))
    assert f"contract JSON written to {f}" in written.out
    assert json.loads(f.read_text()) == doc
    assert cli("verify-contract", str(f)).code == 0


# -- benchmark --help -----------------------------------------------------------------------


def test_benchmark_does_not_offer_db(cli: CLI) -> None:
    r = cli("benchmark", "--help", with_db=False)
    assert r.code == 0
    options = r.out.split("Options:", 1)[1]
    assert "--db" not in options and "--json" in options
    assert "--db" not in r.out


# -- status and actions agree ------------------------------------------------------------------


def test_status_exits_20_like_actions_when_an_action_needs_a_person(cli_proc: CLI) -> None:
    cli_proc("start", "r1", "--goal", "g")
    assert cli_proc("status", "r1").code == 0
    cli_proc("intercept", "r1", "send", "--key", "k1")  # its process exits: interrupted
    status, actions = cli_proc("--json", "status", "r1"), cli_proc("actions", "r1")
    assert (status.code, actions.code) == (20, 20)
    assert status.json()["unresolved_actions"] == ["send:k1"]
    cli_proc("reconcile", "r1", "send:k1", "--occurred", "--yes")
    assert (cli_proc("status", "r1").code, cli_proc("actions", "r1").code) == (0, 0)


# -- a mistyped run id ---------------------------------------------------------------------------


def test_a_mistyped_run_id_gets_did_you_mean(cli: CLI) -> None:
    cli("start", "invoice-batch", "--goal", "g")
    cli("start", "reports", "--goal", "g")
    r = cli("status", "invoice-bacth")
    assert r.code == 2
    assert 'hint: did you mean "invoice-batch"?' in r.err
    r = cli("--json", "resume", "Reports")
    assert r.code == 2
    error = r.json()["error"]
    assert error["code"] == "not_found.run" and error["details"]["did_you_mean"] == "reports"
    r = cli("--json", "events", "zzzzzzzz")
    assert r.code == 2 and "did_you_mean" not in r.json()["error"].get("details", {})
    assert "did you mean" not in r.json()["error"]["hint"]


# -- make demo, make clean ---------------------------------------------------------------------


def test_make_demo_says_where_it_left_its_files(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        capture_output=True,
        text=True,
        env={**cli_env(), "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"^the demo's files are kept in (\S+):", done.stdout, flags=re.M)
    assert found, done.stdout
    work = Path(found.group(1))
    assert (
        work.parent == tmp_path and (work / "continuum.db").exists() and (work / "outbox").is_dir()
    )
    tail = done.stdout[found.start() :]
    assert f"--db {work / 'continuum.db'} events invoice-batch" in tail
    assert f"rm -rf {work}" in tail


def test_make_clean_removes_what_the_e2e_kit_wrote(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    kit = tmp_path / "e2e-autonomy-test"
    (kit / "work" / "logs").mkdir(parents=True)
    (kit / "work" / "continuum.db").write_text("x")
    (kit / "lib" / "__pycache__").mkdir(parents=True)
    (kit / "lib" / "__pycache__" / "agent.cpython-311.pyc").write_text("x")
    (kit / "lib" / "agent.py").write_text("# kept\n")
    done = subprocess.run(
        ["make", "--no-print-directory", "clean"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    assert not (kit / "work").exists() and not (kit / "lib" / "__pycache__").exists()
    assert (kit / "lib" / "agent.py").read_text() == "# kept\n"


# -- shell completion ---------------------------------------------------------------------------


def complete(words: str) -> list[str]:
    env = {
        **cli_env(),
        "_CONTINUUM_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = subprocess.run(
        [sys.executable, "-m", "continuum"],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_shell_completion_completes_commands_and_options() -> None:
    env = {**cli_env(), "_CONTINUUM_COMPLETE": "bash_source"}
    script = subprocess.run(
        [sys.executable, "-m", "continuum"],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE,
    )
    assert script.returncode == 0 and "_continuum_completion" in script.stdout
    assert complete("continuum wat") == ["watch"]
    assert complete("continuum mcp un") == ["uninstall"]
    assert "--follow" in complete("continuum events r1 --f")
    assert complete("continuum mcp uninstall --client g") == ["gemini"]
    assert os.environ.get("_CONTINUUM_COMPLETE") is None
