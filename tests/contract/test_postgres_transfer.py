"""Moving runs SQLite -> PostgreSQL -> SQLite with `continuum export` / `continuum import`:
the chain arrives byte-identical and verified; a tampered or damaged one never moves."""

from __future__ import annotations

from tests.contract import pg_support

pg_support.require_driver()  # skip, or fail in CI, before anything imports psycopg
# ruff: noqa: E402 - the imports below need the check above

import json
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from continuum.cli.main import run as cli_run
from continuum.store import open_store
from tests.contract.transfer_support import fill, snapshot


def event_lines(path: Path) -> list[str]:
    return [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["kind"] in ("event", "checkpoint")
    ]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = cli_run([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_store_moved_sqlite_to_postgres_and_back_keeps_every_hash_and_verifies(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, last = str(tmp_path / "first.db"), str(tmp_path / "last.db")
    with closing(open_store(first)) as store:
        fill(store)
    a, b, c = (tmp_path / f"{n}.jsonl" for n in "abc")
    key = str(tmp_path / "move.key")
    assert cli(capsys, "keygen", key)[0] == 0
    # Signed and trusted on the way (unsigned, each run would get an import marker).
    sign, trust = ("--sign", key), ("--public-key", key + ".pub", "--yes")

    assert cli(capsys, "--db", first, "export", "--all", "-o", str(a), *sign)[0] == 0
    code, imported = cli(capsys, "--db", pg_url, "import", str(a), *trust)
    assert code == 0 and imported["runs"] == ["run_rich", "run_done"]
    assert imported["trusted"] is True
    code, verified = cli(capsys, "--db", pg_url, "verify", "--all")
    assert code == 0 and verified["verified"] is True
    assert cli(capsys, "--db", pg_url, "export", "--all", "-o", str(b), *sign)[0] == 0
    assert cli(capsys, "--db", last, "import", str(b), *trust)[0] == 0
    assert cli(capsys, "--db", last, "verify", "--all")[0] == 0
    assert cli(capsys, "--db", last, "export", "--all", "-o", str(c))[0] == 0

    assert event_lines(a) == event_lines(b) == event_lines(c)  # byte-identical, hashes included
    with (
        closing(open_store(first)) as one,
        closing(open_store(pg_url)) as two,
        closing(open_store(last)) as three,
    ):
        for run_id in ("run_rich", "run_done"):
            assert snapshot(one, run_id) == snapshot(two, run_id) == snapshot(three, run_id)


def test_a_tampered_export_is_refused_by_postgres_with_exit_3_and_nothing_written(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(tmp_path / "source.db")
    with closing(open_store(source)) as store:
        fill(store)
    exported = tmp_path / "export.jsonl"
    assert cli(capsys, "--db", source, "export", "run_rich", "-o", str(exported))[0] == 0
    text = exported.read_text(encoding="utf-8")
    exported.write_text(text.replace('"completed":1', '"completed":3', 1), encoding="utf-8")

    code, out = cli(capsys, "--db", pg_url, "import", str(exported))

    assert code == 3
    assert out["error"]["code"] == "integrity.import_refused"  # type: ignore[index]
    with psycopg.connect(pg_url) as conn:  # the store was not even created
        assert conn.execute("SELECT to_regclass('continuum.runs')").fetchone() == (None,)


def test_a_damaged_postgres_run_is_not_exported(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with closing(open_store(pg_url)) as store:
        fill(store)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE continuum.events SET payload = '{}' WHERE sequence = 2 AND run_id = 'run_rich'"
        )
    target = tmp_path / "damaged.jsonl"

    code, out = cli(capsys, "--db", pg_url, "export", "run_rich", "-o", str(target))

    assert code == 3
    assert out["error"]["code"] == "integrity.hash_mismatch"  # type: ignore[index]
    assert list(tmp_path.iterdir()) == []  # neither the file nor a partial one
