"""F9-F11 on PostgreSQL: hosts racing on one database, server crashes, commits cut mid-flight.

- F9: four processes ("hosts") append to one run and intercept the same keys on one
  database of the shared server. Negative control: the same race with the advisory lock
  disabled must be caught by the (run, sequence) primary key, never become a fork.
- F10: a private cluster (initdb into a temp dir, unix socket, own port; never the shared
  server) is SIGKILLed (postmaster and backends at once) and restarted while a writer
  process appends and logs each acknowledgement: no acknowledged event may be lost.
  Negative control: ``synchronous_commit=off`` (which the store refuses, so the writer
  opens it with the test-only bypass) must lose acknowledged events.
- F11: a TCP proxy cuts the connection at COMMIT, either before forwarding it (the server
  never commits) or after the server committed (the reply is lost). The store must
  resolve each by reading back; an agent routing effects through the ledger must perform
  each effect exactly once. Negative control: a store that assumes a lost reply means
  "committed" must let the same harness count double effects.
"""

from __future__ import annotations

from tests.contract import pg_support

pg_support.require_driver()  # skip, or fail in CI, before anything imports psycopg
# ruff: noqa: E402 - the imports below need the check above

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from continuum.errors import NotFoundError, StoreError
from continuum.ledger.core import ActionLedger
from continuum.runtime.facade import Continuum
from continuum.store import Run, open_store
from continuum.store.postgres import PostgresStorage
from continuum.types import ActionStatus
from tests.contract.pg_support import PostgresUnavailable, PrivateCluster
from tests.crash.workers import release_together

RUN = "run_shared"
DEADLINE_S = 120


@pytest.fixture
def database() -> Iterator[str]:
    with pg_support.fresh_database("continuum_crash") as url:
        yield url


def make_run(url: str, run_id: str = RUN) -> None:
    with closing(open_store(url)) as store:
        store.create_run(Run(run_id=run_id))


# -- F9: several hosts on one database --------------------------------------------------------

WORKERS = 4
APPENDS = 100
KEYS = 100

HOST_WORKER = r"""
import json, os, random, sys
from continuum.errors import ContinuumError
from continuum.ledger.core import ActionLedger
from continuum.store import open_store
import continuum.store.postgres as pg

mode, url, run_id, count, worker = sys.argv[1:6]
count, worker = int(count), int(worker)
if os.environ.get("F9_NO_ADVISORY_LOCK"):
    pg.run_lock_key = lambda run_id: random.getrandbits(63)  # every writer its own lock
store = open_store(url, create=False)
ledger = ActionLedger(store)
print("ready", flush=True)
sys.stdin.readline()  # the go signal: every worker starts together
out = {"pid": os.getpid(), "worker": worker, "proceeded": [], "answers": {}, "errors": [],
       "rejected": 0}
order = list(range(count))
random.Random(worker).shuffle(order)
for i in (range(count) if mode == "append" else order):
    while True:
        try:
            if mode == "append":
                store.append_event(run_id, "work_completed", {"worker": worker, "n": i})
            else:
                key = f"invoice:{i}"
                r = ledger.intercept(run_id, "send_invoice", {"invoice": i}, key=key)
                out["answers"][key] = r.status
                if r.proceed:
                    out["proceeded"].append(key)
                    ledger.complete(run_id, r.action_key, external_id=f"{os.getpid()}:{key}")
            break
        except ContinuumError as e:
            if e.code == "integrity.fork_rejected":
                out["rejected"] += 1  # the primary key caught a stale head: try again
                continue
            out["errors"].append(e.code)
            break
store.close()
print(json.dumps(out), flush=True)
"""


def run_hosts(
    mode: str, url: str, count: int, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Start WORKERS processes on one database, release them together, collect their reports."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOST_WORKER, mode, url, RUN, str(count), str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        for w in range(WORKERS)
    ]
    return release_together(procs, DEADLINE_S)


def test_f9_hosts_racing_on_one_database_make_one_chain_and_proceed_once_per_key(
    database: str,
) -> None:
    make_run(database)

    appends = run_hosts("append", database, APPENDS)
    intercepts = run_hosts("intercept", database, KEYS)

    assert [r["errors"] for r in appends + intercepts] == [[]] * (2 * WORKERS)
    assert sum(r["rejected"] for r in appends + intercepts) == 0  # the lock serialized them
    proceeded = Counter(key for r in intercepts for key in r["proceeded"])
    assert sorted(proceeded) == sorted(f"invoice:{i}" for i in range(KEYS))
    doubles = {k: n for k, n in proceeded.items() if n > 1}
    assert doubles == {}
    owner = {key: r["pid"] for r in intercepts for key in r["proceeded"]}
    with closing(open_store(database)) as store:
        events = store.read_events(RUN)
        total = WORKERS * APPENDS + 2 * KEYS
        assert [e.sequence for e in events] == list(range(1, total + 1))
        for w in range(WORKERS):
            mine = [
                e.payload["n"]
                for e in events
                if e.type == "work_completed" and e.payload["worker"] == w
            ]
            assert mine == list(range(APPENDS))  # nothing lost, each writer's order kept
        rt = Continuum(store)
        for action in rt.actions(RUN):
            assert (action.status, action.attempt) == (ActionStatus.COMPLETED, 1)
            assert action.external_id == f"{owner[action.key or '']}:{action.key}"
        assert rt.verify(RUN).ok
    print(
        f"\nF9: {WORKERS} procs x {APPENDS} appends + {KEYS} shared keys on one PostgreSQL "
        f"database: 0 forks, 0 gaps, 0 lost, {len(doubles)} double proceeds"
    )


def test_f9_neg_without_the_advisory_lock_the_primary_key_rejects_every_fork(database: str) -> None:
    make_run(database)

    reports = run_hosts("append", database, APPENDS, env={"F9_NO_ADVISORY_LOCK": "1"})

    assert [r["errors"] for r in reports] == [[]] * WORKERS
    rejected = sum(r["rejected"] for r in reports)
    with closing(open_store(database)) as store:
        events = store.read_events(RUN)
        assert [e.sequence for e in events] == list(range(1, WORKERS * APPENDS + 1))
        assert store.verify_events(RUN).ok
    assert rejected > 0, "without the lock, concurrent writers must collide on (run, sequence)"
    print(
        f"\nF9-neg: advisory lock disabled: {rejected} fork attempts rejected by the "
        f"(run, sequence) key, 0 forks, chain verifies"
    )


# -- F10: server crash on a private cluster -------------------------------------------------

F10_KILLS = 8
ACKS_BETWEEN_KILLS = 25

WRITER = r"""
import json, os, sys, time
from continuum.errors import ContinuumError
from continuum.store.postgres import PostgresStorage

url, run_id, stop_file, unsafe = sys.argv[1:5]
store = PostgresStorage(url, create=False, resolve_timeout_s=60,
                        _skip_durability_check=unsafe == "1")
print(json.dumps({"ready": True}), flush=True)
i = 0
while not os.path.exists(stop_file):
    try:
        e = store.append_event(run_id, "work_completed", {"n": i})
    except ContinuumError as err:
        if err.code == "store.commit_unknown":
            print(json.dumps({"unknown": i}), flush=True)
            i += 1
        else:  # certainly not recorded (server down, connection lost before COMMIT)
            print(json.dumps({"retry": err.code}), flush=True)
            time.sleep(0.02)  # back off while the server restarts
        continue
    print(json.dumps({"ack": i, "event_id": e.event_id, "sequence": e.sequence,
                      "hash": e.hash}), flush=True)
    i += 1
store.close()
print(json.dumps({"done": i}), flush=True)
"""


class Writer:
    """A writer process whose acknowledgements are collected as they are printed."""

    def __init__(self, url: str, stop_file: Path, *, unsafe: bool = False) -> None:
        self.stop_file = stop_file
        self.acks: list[dict[str, Any]] = []
        self.unknown: list[int] = []
        self.retries: Counter[str] = Counter()
        self.read_back: Counter[str] = Counter()  # lost COMMIT replies, by resolved outcome
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, RUN, str(stop_file), "1" if unsafe else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        assert json.loads(first or "{}").get("ready"), self.process.communicate(timeout=DEADLINE_S)
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        self.stderr.extend(self.process.stderr)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            record = json.loads(line)
            if "ack" in record:
                self.acks.append(record)
            elif "unknown" in record:
                self.unknown.append(record["unknown"])
            elif "retry" in record:
                self.retries[record["retry"]] += 1

    def close(self) -> None:
        """Kill the writer if it still runs and release its pipes (also after a failure)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=DEADLINE_S)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def wait_for_acks(self, count: int) -> None:
        """Bounded polling until at least ``count`` appends have been acknowledged."""
        deadline = time.monotonic() + DEADLINE_S
        while len(self.acks) < count:
            assert self.process.poll() is None, "".join(self.stderr)
            assert time.monotonic() < deadline, f"only {len(self.acks)} acknowledgements"
            time.sleep(0.01)

    def finish(self) -> None:
        self.stop_file.touch()
        self.process.wait(timeout=DEADLINE_S)
        self._reader.join(timeout=DEADLINE_S)  # every acknowledgement read, up to EOF
        self._err_reader.join(timeout=DEADLINE_S)
        self.close()
        assert self.process.returncode == 0, "".join(self.stderr)
        for line in self.stderr:  # the store's own log of each lost COMMIT reply
            if '"store.commit_reply_lost"' in line:
                self.read_back[json.loads(line)["resolved"]] += 1


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    try:
        c = PrivateCluster()
    except PostgresUnavailable as e:
        pg_support.unavailable(str(e))
    try:
        yield c
    finally:
        c.destroy()


def lost_acks(url: str, acks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Acknowledged events that are not in the store (by id, sequence and hash)."""
    with PostgresStorage(url, _skip_durability_check=True) as store:
        stored = {e.event_id: (e.sequence, e.hash) for e in store.read_events(RUN)}
        assert store.verify_events(RUN).ok
    return [a for a in acks if stored.get(a["event_id"]) != (a["sequence"], a["hash"])]


def crash_loop(
    cluster: PrivateCluster,
    writer: Writer,
    kills: int,
    stop_when: Callable[[], bool] = lambda: False,
) -> int:
    done = 0
    for _ in range(kills):
        writer.wait_for_acks(len(writer.acks) + ACKS_BETWEEN_KILLS)
        cluster.kill()
        cluster.start()
        done += 1
        if stop_when():
            break
    writer.wait_for_acks(len(writer.acks) + ACKS_BETWEEN_KILLS)  # it carries on after the last one
    return done


def test_f10_server_killed_and_restarted_loses_no_acknowledged_event(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    cluster.start()
    url = cluster.url()
    make_run(url)
    writer = Writer(url, tmp_path / "stop")
    try:
        kills = crash_loop(cluster, writer, F10_KILLS)
        writer.finish()
    finally:
        writer.close()

    lost = lost_acks(url, writer.acks)
    assert lost == []
    with closing(open_store(url)) as store:
        report = Continuum(store).verify(RUN)
        assert report.ok
        landed = {e.payload["n"] for e in store.read_events(RUN)}
    settled = sum(1 for n in writer.unknown if n in landed)
    print(
        f"\nF10: {kills} server kills (SIGKILL postmaster + backends, restart, crash recovery), "
        f"{len(writer.acks)} acknowledged appends: 0 lost; chain verifies "
        f"(head {report.head_sequence}); {sum(writer.retries.values())} appends refused while "
        f"the server was down and retried; {sum(writer.read_back.values())} COMMIT replies "
        f"lost in a kill, resolved by reading back ({writer.read_back['committed']} committed, "
        f"{writer.read_back['not_committed']} not); {len(writer.unknown)} left unknown "
        f"({settled} of them landed)"
    )


def test_f10_neg_synchronous_commit_off_loses_acknowledged_events(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    # The walwriter writes async commits out every wal_writer_delay; widen that window so
    # a kill lands in it. The store refuses this server, so the writer bypasses the check.
    cluster.settings.update(synchronous_commit="off", wal_writer_delay="10s")
    cluster.start()
    url = cluster.url()
    with PostgresStorage(url, _skip_durability_check=True) as store:
        store.create_run(Run(run_id=RUN))
    writer = Writer(url, tmp_path / "stop", unsafe=True)
    lost: list[dict[str, Any]] = []

    def check() -> bool:
        lost[:] = lost_acks(url, writer.acks)
        return bool(lost)

    try:
        kills = crash_loop(cluster, writer, F10_KILLS, stop_when=check)
        writer.finish()
    finally:
        writer.close()
    check()

    assert lost, "synchronous_commit=off must be able to lose acknowledged commits"
    print(
        f"\nF10-neg: synchronous_commit=off: {len(lost)} of {len(writer.acks)} acknowledged "
        f"appends lost after {kills} server kill(s); chain still verifies"
    )


def test_startup_refuses_a_server_with_fsync_or_synchronous_commit_off(
    cluster: PrivateCluster,
) -> None:
    refused = []
    for setting in ({"fsync": "off"}, {"synchronous_commit": "off"}):
        cluster.start(**setting)
        with pytest.raises(StoreError) as e:
            open_store(cluster.url())
        assert e.value.code == "store.unsafe_postgres"
        refused.append(e.value.fields["settings"])
        cluster.stop()
    cluster.start()
    open_store(cluster.url()).close()  # the same cluster with both on is accepted
    assert refused == [["fsync = off"], ["synchronous_commit = off"]]


# -- F11: commits cut mid-flight ----------------------------------------------------------

COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # the simple-protocol COMMIT psycopg sends
COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"  # CommandComplete of a COMMIT that committed
F11_KEYS = 24


class CommitCuttingProxy:
    """A TCP proxy to the shared server that can cut a connection at its next COMMIT.

    ``before``: the COMMIT is dropped and both sides closed (the server rolls back).
    ``after``: the COMMIT is forwarded, the server's reply awaited and swallowed, then the
    connection is closed (committed, reply lost).
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._armed: str | None = None
        self._lock = threading.Lock()
        self.cuts: Counter[str] = Counter()
        self.refusing = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str) -> None:
        with self._lock:
            self._armed = mode

    def _take(self) -> str | None:
        with self._lock:
            mode, self._armed = self._armed, None
            return mode

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                _close(client)  # the database is unreachable for new connections
                continue
            server = socket.create_connection(self.upstream)
            state: dict[str, bool] = {"swallow": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := client.recv(65536):
                if COMMIT in data and (mode := self._take()) is not None:
                    self.cuts[mode] += 1
                    if mode == "before":
                        _close(client, server)
                        return
                    state["swallow"] = True
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := server.recv(65536):
                if state["swallow"]:
                    if COMMIT_DONE in data:
                        break  # committed; the client never hears it
                    continue
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def close(self) -> None:
        self._closed = True
        self.listener.close()


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


@pytest.fixture
def proxied(database: str) -> Iterator[tuple[str, CommitCuttingProxy]]:
    parts = urlsplit(database)
    proxy = CommitCuttingProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"
    url = parts._replace(netloc=netloc, query="sslmode=disable&gssencmode=disable").geturl()
    make_run(database)
    try:
        yield url, proxy
    finally:
        proxy.close()


def agent_sends_invoices(url: str, proxy: CommitCuttingProxy) -> tuple[Counter[str], Counter[str]]:
    """Route one effect per key through intercept / perform / complete, cutting commits.

    Keys alternate which commit is cut (the intercept's or the completion's) and how
    (before or after the server committed). An outcome reported as not committed is
    retried (it certainly did not happen); an action the ledger does not know is
    intercepted again. Returns the effects performed per key and the outcomes seen.
    """
    store = PostgresStorage(url)
    ledger = ActionLedger(store)
    effects: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()

    def settle(op: Callable[[], Any]) -> Any:
        while True:
            try:
                result = op()
                outcomes["returned"] += 1
                return result
            except StoreError as e:
                assert e.code == "store.commit_not_applied", e
                outcomes["not_applied"] += 1

    try:
        for i in range(F11_KEYS):
            key = f"invoice:{i}"
            mode = ("before", "after")[i % 2]
            cut_intercept = (i // 2) % 2 == 0
            while True:
                if cut_intercept:
                    proxy.arm(mode)
                r = settle(partial(ledger.intercept, RUN, "send_invoice", {"n": key}, key=key))
                if not r.proceed:
                    break
                effects[key] += 1  # the side effect
                if not cut_intercept:
                    proxy.arm(mode)
                try:
                    settle(partial(ledger.complete, RUN, r.action_key, external_id=key))
                    break
                except NotFoundError:
                    outcomes["intercept_vanished"] += 1  # the ledger never had it: again
                    cut_intercept = False
    finally:
        store.close()
    return effects, outcomes


def test_f11_commits_cut_mid_flight_are_read_back_and_never_doubled(
    proxied: tuple[str, CommitCuttingProxy], database: str
) -> None:
    url, proxy = proxied

    effects, outcomes = agent_sends_invoices(url, proxy)

    assert sum(proxy.cuts.values()) == F11_KEYS
    assert proxy.cuts["before"] > 0 and proxy.cuts["after"] > 0
    assert outcomes["intercept_vanished"] == 0
    assert outcomes["not_applied"] == proxy.cuts["before"]  # each said so, then retried
    doubles = {k: n for k, n in effects.items() if n != 1}
    assert doubles == {}
    assert sorted(effects) == sorted(f"invoice:{i}" for i in range(F11_KEYS))
    with closing(open_store(database)) as store:
        rt = Continuum(store)
        assert rt.verify(RUN).ok
        actions = rt.actions(RUN)
        assert len(actions) == F11_KEYS
        assert all((a.status, a.attempt) == (ActionStatus.COMPLETED, 1) for a in actions)
        kinds = Counter(e.type for e in store.read_events(RUN))
        assert kinds == {"action_intercepted": F11_KEYS, "action_completed": F11_KEYS}
    print(
        f"\nF11: {sum(proxy.cuts.values())} cut commits ({proxy.cuts['after']} committed with "
        f"the reply lost, {proxy.cuts['before']} never committed): all resolved by reading "
        f"back, 0 double effects, chain verifies"
    )


def test_a_lost_commit_that_cannot_be_read_back_is_reported_unknown_and_never_retried(
    proxied: tuple[str, CommitCuttingProxy], database: str
) -> None:
    url, proxy = proxied
    store = PostgresStorage(url, resolve_timeout_s=0.5)
    try:
        proxy.arm("after")  # committed, reply lost ...
        proxy.refusing = True  # ... and the server unreachable while the store reads back
        with pytest.raises(StoreError) as e:
            store.append_event(RUN, "work_completed", {"doc": "once"})
    finally:
        store.close()

    assert e.value.code == "store.commit_unknown"
    with closing(open_store(database)) as direct:  # reachable again: it is there, once
        assert [ev.payload for ev in direct.read_events(RUN)] == [{"doc": "once"}]


def test_f11_neg_assuming_a_lost_reply_means_committed_doubles_effects(
    proxied: tuple[str, CommitCuttingProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, proxy = proxied
    monkeypatch.setattr(PostgresStorage, "_resolve_lost_commit", lambda *args, **kwargs: None)

    effects, outcomes = agent_sends_invoices(url, proxy)

    doubles = {k: n for k, n in effects.items() if n > 1}
    assert doubles, "a store that assumes 'committed' must let effects run twice"
    print(
        f"\nF11-neg: lost reply assumed committed: {len(doubles)} keys performed twice "
        f"({outcomes['intercept_vanished']} intercepts silently lost)"
    )
