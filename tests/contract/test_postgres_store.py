"""The PostgreSQL backend's own checks: URLs and errors, durability refusals, schema
versions, tampering, locking, pooling and reads inside a write (contract §2-4).

The shared contract (test_store_contract.py) runs against PostgreSQL too; this file holds
what only PostgreSQL has. Raw SQL goes through psycopg here, never through the store.
"""

from __future__ import annotations

from tests.contract import pg_support

pg_support.require_driver()  # skip, or fail in CI, before anything imports psycopg
# ruff: noqa: E402 - the imports below need the check above

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from continuum.cli.main import run as cli_run
from continuum.errors import (
    ForkRejectedError,
    IntegrityError,
    NotFoundError,
    SchemaError,
    StoreBusyError,
    StoreError,
    UsageError,
)
from continuum.eventlog.canonical import canonical_json
from continuum.eventlog.event_model import Event
from continuum.eventlog.events import EventType
from continuum.mcp.server import main as mcp_main
from continuum.runtime.facade import Continuum
from continuum.store import Run, open_store, probe_store
from continuum.store.pg_connection import check_durability
from continuum.store.pg_schema import PG_MIGRATIONS
from continuum.store.postgres import PostgresStorage
from continuum.store.schema import MIGRATIONS, SCHEMA_VERSION
from continuum.types import Origin
from tests.contract.pg_support import free_port

RUN = "run_pg"
PASSWORD = "s3cret-pw-do-not-print"


def raw(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def with_password(url: str, password: str = PASSWORD) -> str:
    parts = urlsplit(url)
    return parts._replace(
        netloc=f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    ).geturl()


@pytest.fixture
def filled(pg_url: str) -> Iterator[str]:
    """A store whose run has five events (closed again)."""
    with closing(open_store(pg_url)) as store:
        store.create_run(Run(run_id=RUN))
        for i in range(5):
            store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": i})
    yield pg_url


def has_schema(url: str) -> bool:
    return bool(raw(url, "SELECT 1 FROM pg_namespace WHERE nspname = 'continuum'"))


# -- URLs and error messages ----------------------------------------------------------------


def test_postgres_and_postgresql_schemes_open_the_same_store(pg_url: str) -> None:
    short = pg_url.replace("postgresql://", "postgres://", 1)
    with closing(open_store(short)) as a:
        a.create_run(Run(run_id=RUN, goal="g"))
    with closing(open_store(pg_url)) as b:
        assert b.get_run(RUN).goal == "g"


def test_the_store_url_and_cli_output_never_show_the_password(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = with_password(pg_url)  # trust auth: the password is accepted and ignored

    with closing(open_store(url)) as store:
        assert PASSWORD not in store.url
        assert store.url.startswith("postgresql://postgres@")
    assert cli_run(["--db", url, "--json", "init"]) == 0
    init = capsys.readouterr()
    assert cli_run(["--db", url, "start", RUN, "--goal", "g"]) == 0
    start = capsys.readouterr()

    assert json.loads(init.out)["store"] == store.url
    assert store.url in start.out
    assert PASSWORD not in init.out + init.err + start.out + start.err


def unreachable_url(pg_url: str) -> str:
    parts = urlsplit(pg_url)
    return parts._replace(
        netloc=f"postgres:{PASSWORD}@127.0.0.1:{free_port()}", path="/continuum_nowhere"
    ).geturl()


def test_an_unreachable_server_is_named_by_host_port_and_database_never_the_password(
    pg_url: str,
) -> None:
    url = unreachable_url(pg_url)
    port = str(urlsplit(url).port)

    with pytest.raises(StoreError) as e:
        open_store(url)

    assert e.value.code == "store.unreachable"
    text = str(e.value) + json.dumps(e.value.to_dict())
    assert "127.0.0.1" in text and port in text and "continuum_nowhere" in text
    assert PASSWORD not in text


def test_the_cli_and_the_mcp_server_report_an_unreachable_store_without_the_password(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = unreachable_url(pg_url)

    assert cli_run(["--db", url, "--json", "runs"]) == 1
    assert mcp_main(["--db", url]) == 1

    out = capsys.readouterr()
    assert json.loads(out.out)["error"]["code"] == "store.unreachable"
    assert "[store.unreachable]" in out.err and "continuum_nowhere" in out.err
    assert PASSWORD not in out.out + out.err


def test_a_missing_database_is_named_and_not_created(pg_url: str) -> None:
    url = urlsplit(pg_url)._replace(path="/continuum_missing_db").geturl()

    with pytest.raises(StoreError) as e:
        open_store(url)

    assert e.value.code == "store.missing_database"
    assert "continuum_missing_db" in e.value.message
    assert not raw(pg_url, "SELECT 1 FROM pg_database WHERE datname = 'continuum_missing_db'")


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{PASSWORD}@h/db?bogus_option=1",
        f"postgresql://u:{PASSWORD}%zz@h/db",
    ],
)
def test_a_malformed_postgres_url_is_refused_without_the_password(url: str) -> None:
    with pytest.raises(UsageError) as e:
        open_store(url)
    assert e.value.code == "store.bad_url"
    assert PASSWORD not in str(e.value)


def test_without_psycopg_a_postgres_url_names_the_extra_to_install(pg_url: str) -> None:
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from continuum.errors import StoreError\n"
        "from continuum.store import open_store\n"
        "open_store(sys.argv[2] + '.db').close()  # SQLite still works without it\n"
        "try:\n"
        "    open_store(sys.argv[1])\n"
        "except StoreError as e:\n"
        "    print(e.code, e.hint)\n"
    )
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"nopsycopg-{os.getpid()}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, pg_url, str(tmp)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        Path(str(tmp) + ".db").unlink(missing_ok=True)
    assert (
        done.stdout.strip()
        == "store.backend_unavailable pip install 'continuum-recovery[postgres]'"
    )


# -- opening, probing, durability -------------------------------------------------------------


def test_probe_store_on_an_empty_database_creates_nothing(pg_url: str) -> None:
    assert probe_store(pg_url) is False
    assert not has_schema(pg_url)

    open_store(pg_url).close()
    assert probe_store(pg_url) is True


def test_open_without_create_on_an_empty_database_is_not_found_and_creates_nothing(
    pg_url: str,
) -> None:
    with pytest.raises(NotFoundError) as e:
        open_store(pg_url, create=False)
    assert e.value.code == "not_found.store"
    assert not has_schema(pg_url)


def test_a_session_with_synchronous_commit_off_is_refused(pg_url: str) -> None:
    url = pg_url + "?options=-c%20synchronous_commit%3Doff"

    with pytest.raises(StoreError) as e:
        open_store(url)

    assert e.value.code == "store.unsafe_postgres"
    assert e.value.fields["settings"] == ["synchronous_commit = off"]
    assert not has_schema(pg_url)


@pytest.mark.parametrize(
    ("fsync", "sync_commit", "refused"),
    [
        ("on", "on", []),
        ("on", "remote_apply", []),
        ("on", "local", []),
        ("off", "on", ["fsync = off"]),
        ("on", "off", ["synchronous_commit = off"]),
        ("off", "off", ["fsync = off", "synchronous_commit = off"]),
    ],
)
def test_durability_settings_that_can_lose_a_commit_are_refused(
    fsync: str, sync_commit: str, refused: list[str]
) -> None:
    if not refused:
        check_durability(fsync, sync_commit, "here")
        return
    with pytest.raises(StoreError) as e:
        check_durability(fsync, sync_commit, "here")
    assert e.value.code == "store.unsafe_postgres"
    assert e.value.fields["settings"] == refused


# -- schema versions ------------------------------------------------------------------------


def test_both_backends_know_the_same_schema_versions() -> None:
    assert sorted(PG_MIGRATIONS) == sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))


def test_a_store_with_a_newer_schema_is_refused_and_left_unchanged(filled: str) -> None:
    raw(filled, "UPDATE continuum.meta SET value = %s", (str(SCHEMA_VERSION + 1),))

    with pytest.raises(SchemaError) as e:
        open_store(filled)

    assert e.value.code == "store.schema_too_new"
    assert raw(filled, "SELECT value FROM continuum.meta") == [(str(SCHEMA_VERSION + 1),)]


@pytest.fixture
def next_version(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """Pretend the code knows one more schema version, with the given migration."""

    def install(statements: list[str]) -> int:
        target = SCHEMA_VERSION + 1
        monkeypatch.setattr("continuum.store.postgres.SCHEMA_VERSION", target)
        monkeypatch.setitem(PG_MIGRATIONS, target, statements)
        return target

    return install


def test_an_older_schema_migrates_forward_and_keeps_its_data(
    filled: str, next_version: Callable[[list[str]], int]
) -> None:
    target = next_version(
        [
            "CREATE TABLE continuum.annotations (run_id TEXT, note TEXT)",
            "INSERT INTO continuum.annotations VALUES ('x', 'migrated')",
        ]
    )

    with closing(open_store(filled)) as store:
        assert store.schema_version() == target
        assert store.verify_events(RUN).ok
    assert raw(filled, "SELECT note FROM continuum.annotations") == [("migrated",)]


def test_a_failing_migration_is_rolled_back_as_a_whole(
    filled: str, next_version: Callable[[list[str]], int]
) -> None:
    next_version(["CREATE TABLE continuum.annotations (run_id TEXT, note TEXT)", "THIS IS NOT SQL"])

    with pytest.raises(StoreError):
        open_store(filled)

    assert raw(filled, "SELECT to_regclass('continuum.annotations')") == [(None,)]
    assert raw(filled, "SELECT value FROM continuum.meta") == [(str(SCHEMA_VERSION),)]


def test_a_foreign_continuum_schema_is_refused_and_left_unchanged(pg_url: str) -> None:
    raw(pg_url, "CREATE SCHEMA continuum")
    raw(pg_url, "CREATE TABLE continuum.theirs (x int)")

    with pytest.raises(StoreError) as e:
        open_store(pg_url)

    assert e.value.code == "store.foreign_database"
    assert raw(pg_url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'continuum'") == [(1,)]


def test_hosts_opening_a_new_database_at_once_migrate_it_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def first_open() -> None:
        try:
            barrier.wait(timeout=30)
            open_store(pg_url).close()
        except BaseException as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=first_open) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == []
    assert raw(pg_url, "SELECT value FROM continuum.meta") == [(str(SCHEMA_VERSION),)]


# -- what is stored -------------------------------------------------------------------------


def test_payloads_are_stored_as_canonical_json_text(pg_url: str) -> None:
    payload = {
        "z": 1,
        "a": [1.5, 10**20, None, True],
        "text": 'naïve ☃ \u0000 "q"',
        "nested": {"b": {}, "a": []},
    }
    with closing(open_store(pg_url)) as store:
        store.create_run(Run(run_id=RUN))
        event = store.append_event(RUN, EventType.WORK_COMPLETED, payload)
        assert store.read_events(RUN) == [event]
        assert event.hash == event.computed_hash()
    stored = raw(pg_url, "SELECT payload, pg_typeof(payload)::text FROM continuum.events")
    assert stored == [(canonical_json(payload), "text")]


def test_list_runs_orders_ties_bytewise_like_sqlite(pg_url: str) -> None:
    with closing(PostgresStorage(pg_url, clock=lambda: "2026-01-01T00:00:00.000000Z")) as store:
        for run_id in ("b", "B", "a", "_x"):
            store.create_run(Run(run_id=run_id))
        assert [r.run_id for r in store.list_runs()] == ["B", "_x", "a", "b"]


def test_text_postgresql_cannot_hold_is_refused_as_a_usage_error(pg_url: str) -> None:
    with closing(open_store(pg_url)) as store, pytest.raises(UsageError) as e:
        store.create_run(Run(run_id=RUN, goal="nul \x00 inside"))
    assert e.value.code == "usage.not_storable"


# -- tampering and damage (F13 on PostgreSQL) -------------------------------------------------

TAMPERS: dict[str, tuple[list[str], int, str]] = {
    "edited payload": (
        ["UPDATE continuum.events SET payload = '{\"doc\":999}' WHERE sequence = 3"],
        3,
        "hash_mismatch",
    ),
    "forged origin": (
        ["UPDATE continuum.events SET source = 'human' WHERE sequence = 2"],
        2,
        "hash_mismatch",
    ),
    "cut link": (
        ["UPDATE continuum.events SET prev_hash = NULL WHERE sequence = 4"],
        4,
        "hash_mismatch",
    ),
    "undecodable payload": (
        ["UPDATE continuum.events SET payload = 'not json' WHERE sequence = 3"],
        3,
        "malformed",
    ),
    "deleted middle row": (
        ["DELETE FROM continuum.events WHERE sequence = 3"],
        3,
        "sequence_gap",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_reading_a_tampered_row_raises_an_integrity_error_naming_run_and_sequence(
    filled: str, tamper: str
) -> None:
    statements, sequence, kind = TAMPERS[tamper]
    for statement in statements:
        raw(filled, statement)

    with closing(open_store(filled)) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert e.value.code == f"integrity.{kind}"
        assert (e.value.fields["run_id"], e.value.fields["sequence"]) == (RUN, sequence)
        report = store.verify_events(RUN)
        assert (report.violations[0].sequence, str(report.violations[0].kind)) == (sequence, kind)
        assert report.trusted_through == sequence - 1


def test_a_truncated_tail_is_detected_against_the_head(filled: str) -> None:
    raw(filled, "DELETE FROM continuum.events WHERE sequence = 5")

    with closing(open_store(filled)) as store:
        with pytest.raises(IntegrityError) as e:
            store.read_events(RUN)
        assert (e.value.code, e.value.fields["sequence"]) == ("integrity.truncated", 5)
        assert [(v.sequence, str(v.kind)) for v in store.verify_events(RUN).violations] == [
            (5, "truncated")
        ]


def test_a_writer_with_a_stale_head_is_rejected_by_the_primary_key(filled: str) -> None:
    with closing(open_store(filled)) as store:
        before = store.read_events(RUN)
        with pytest.raises(ForkRejectedError), store.write(RUN) as tx:
            tx._head = tx.head._replace(  # type: ignore[attr-defined]
                head_sequence=2, head_hash=before[1].hash
            )
            tx.append(EventType.WORK_COMPLETED, {"doc": "fork"}, source=Origin.DETERMINISTIC)
        assert store.read_events(RUN) == before
        assert store.verify_events(RUN).ok


# -- transactions, locks, pooling --------------------------------------------------------------


def test_reads_inside_a_write_see_its_appends_and_other_threads_do_not(filled: str) -> None:
    seen_elsewhere: list[int] = []
    with closing(open_store(filled)) as store, store.write(RUN) as tx:
        tx.append(EventType.WORK_COMPLETED, {"doc": 5}, source=Origin.DETERMINISTIC)
        assert [e.sequence for e in store.read_events(RUN)] == [1, 2, 3, 4, 5, 6]
        assert store.get_run(RUN).head_sequence == 6
        assert store.verify_events(RUN).ok
        reader = threading.Thread(target=lambda: seen_elsewhere.append(len(store.read_events(RUN))))
        reader.start()
        reader.join(timeout=30)
    assert seen_elsewhere == [5]  # not blocked by the write, and not shown its uncommitted event


def test_a_checkpoint_folds_the_events_of_its_own_transaction(filled: str) -> None:
    with closing(open_store(filled)) as store:
        info = Continuum(store).checkpoint(RUN, env={"dataset": "v1"})
        assert (info.sequence, info.event_sequence) == (6, 7)
        assert Continuum(store).verify(RUN).ok


def test_a_nested_write_on_one_thread_is_refused(filled: str) -> None:
    with (
        closing(open_store(filled)) as store,
        store.write(RUN),
        pytest.raises(StoreError) as e,
        store.write(RUN),
    ):
        pass
    assert e.value.code == "store.nested_write"


def test_a_writer_of_the_same_run_waits_for_the_lock_and_others_do_not(filled: str) -> None:
    with (
        closing(open_store(filled)) as holder,
        closing(PostgresStorage(filled, lock_timeout_ms=300)) as other,
    ):
        other.create_run(Run(run_id="other_run"))
        with holder.write(RUN) as tx:
            tx.append(EventType.WORK_COMPLETED, {"doc": "held"}, source=Origin.DETERMINISTIC)
            with pytest.raises(StoreBusyError) as e:
                other.append_event(RUN, EventType.WORK_COMPLETED, {"doc": "blocked"})
            assert e.value.code == "store.busy"
            assert other.append_event("other_run", EventType.WORK_COMPLETED, {}).sequence == 1
        assert other.append_event(RUN, EventType.WORK_COMPLETED, {"doc": "after"}).sequence == 7


def backends_of(url: str, application: str = "continuum") -> int:
    rows = raw(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = %s",
        (application,),
    )
    return int(rows[0][0])


def test_threads_share_a_bounded_pool_of_connections(pg_url: str) -> None:
    errors: list[BaseException] = []
    url = pg_url + "?application_name=pool_test"
    with closing(PostgresStorage(url, pool_size=3)) as store:
        for t in range(8):
            store.create_run(Run(run_id=f"run_{t}"))

        def work(t: int) -> None:
            try:
                for i in range(15):
                    store.append_event(f"run_{t}", EventType.WORK_COMPLETED, {"i": i})
                    store.read_events(f"run_{t}")
            except BaseException as e:  # collected and asserted below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        assert errors == []
        assert 1 <= backends_of(pg_url, "pool_test") <= 3
        assert all(store.verify_events(f"run_{t}").head_sequence == 15 for t in range(8))
    assert backends_of(pg_url, "pool_test") == 0  # close() returns every connection


def test_connections_the_server_ended_are_replaced_without_an_error(filled: str) -> None:
    with closing(open_store(filled)) as store:
        store.read_events(RUN)
        raw(
            filled,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'continuum'",
        )

        event = store.append_event(RUN, EventType.WORK_COMPLETED, {"doc": "after restart"})

        assert event.sequence == 6
        assert store.verify_events(RUN).ok


def test_an_event_read_back_equals_the_event_sealed(filled: str) -> None:
    with closing(open_store(filled)) as store:
        sealed = store.append_event(
            RUN,
            "some_future_event_type",
            {"x": [1, {"y": None}]},
            source=Origin.LLM,
            causer_event_id="evt_x",
        )
        back = store.read_events(RUN, after=5)
    assert back == [sealed]
    assert isinstance(back[0], Event)
