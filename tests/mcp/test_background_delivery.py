"""The outbox delivered from inside the long-running servers (issue 26, item 1).

Two real ``continuum-mcp`` processes (stdio, their stdin held open) on one store, with a
webhook configured: notifications an agent's calls write reach a real receiver process
(which answers 500 at first) without anyone running ``continuum outbox deliver``; one of
the two servers is the store's deliverer at a time. SIGKILLed, the other takes the role
over and delivers what comes next; the deliverer's verdict watch announces each run that
needs a person once, though both servers look on every pass. Negative control: the same servers without a webhook
configured deliver nothing (the notifications stay pending), so it is the servers that
delivered. Both backends. ``continuum ui`` and ``continuum-mcp`` over HTTP deliver too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from continuum.types import Origin
from tests.cli.test_outbox_delivery import (
    NOTIFY,
    Receiver,
    counts,
    db,  # noqa: F401 (the fixture: SQLite and PostgreSQL)
    make_notifications,
    never_accepted,
    wait_until,
)

MCP = str(Path(sys.executable).with_name("continuum-mcp"))


def server(url: str, work: Path, log: Path) -> subprocess.Popen[str]:
    with open(log, "w", encoding="utf-8") as err:
        return subprocess.Popen(
            [MCP, "--db", url],
            cwd=work,
            stdin=subprocess.PIPE,  # held open: the server waits for a client
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**os.environ, "CONTINUUM_LOG_LEVEL": "info"},
        )


def took_the_role(log: Path) -> int:
    return log.read_text(encoding="utf-8").count("outbox.delivering")


def stop(p: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if p.poll() is None:
        p.send_signal(sig)
    p.communicate(timeout=60)


def listed(url: str) -> list[Any]:
    store = open_store(url, create=False)
    try:
        return store.list_outbox()
    finally:
        store.close()


def kinds(url: str) -> Counter[tuple[str, str]]:
    return Counter((row.run_id, row.kind) for row in listed(url))


def delivered_ids(url: str) -> list[str]:
    return sorted(row.delivery_id for row in listed(url) if row.status == "delivered")


def settled(url: str) -> bool:
    c = counts(url)
    return c["pending"] == 0 and c["failed"] == 0 and c["delivered"] > 0


def more_notifications(url: str) -> list[str]:
    cx = Continuum(open_store(url), origin=Origin.EXTERNAL_AGENT)
    try:
        cx.start_run("r2", "mail again")
        for i in range(3):
            r = cx.intercept("r2", "send_mail", {"to": f"d{i}"}, key=f"n{i}")
            cx.fail("r2", r.action_key, error="timeout", certain=False)  # unknown: a notice
        return sorted(row.delivery_id for row in cx.outbox())
    finally:
        cx.close()


def test_the_servers_deliver_the_outbox_one_at_a_time_and_take_over_when_one_dies(
    db: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    ids = make_notifications(db)
    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0, "--fail", "2")
    (work / ".continuum" / "notify.toml").write_text(NOTIFY.format(port=port), encoding="utf-8")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    servers = [server(db, work, logs[0]), server(db, work, logs[1])]
    try:
        wait_until(
            "every notification delivered, and r1's verdict announced",
            lambda: settled(db) and ("r1", "run_needs_human") in kinds(db),
        )
        assert never_accepted(receiver.entries(), ids) == []
        roles = [took_the_role(log) for log in logs]
        assert sorted(roles) == [0, 1], roles  # one deliverer per store
        holder = roles.index(1)
        stop(servers[holder], signal.SIGKILL)  # the deliverer dies; the other takes over
        more_notifications(db)
        wait_until(
            "the new ones delivered too, and r2's verdict",
            lambda: settled(db) and ("r2", "run_needs_human") in kinds(db),
        )
        every = delivered_ids(db)  # what the store says was delivered: the receiver has it
        assert set(ids) <= set(every)
        assert took_the_role(logs[1 - holder]) == 1
        # looked at on every pass by two servers: r1 (whose causes did not change) is
        # announced once; r2 once per set of causes it went through as its calls came in
        assert kinds(db)[("r1", "run_needs_human")] == 1
        assert 1 <= kinds(db)[("r2", "run_needs_human")] <= 3
    finally:
        receiver.kill()
        for p in servers:
            if p.poll() is None:
                stop(p)
    assert never_accepted(receiver.entries(), every) == []
    verdict = next(
        row.body for row in listed(db) if row.kind == "run_needs_human" and row.run_id == "r2"
    )
    assert verdict["command"] == "continuum resume r2" and "may have happened" in str(
        verdict["details"]["reason"]
    ), verdict
    print(
        f"outbox [servers]: {len(every)} notifications delivered by two continuum-mcp "
        f"servers (the deliverer SIGKILLed, the other took over)"
    )


def test_negative_control_without_a_webhook_the_servers_deliver_nothing(
    db: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    ids = make_notifications(db)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "a.log"
    a = server(db, work, log)
    try:
        time.sleep(3)  # several of the deliverer's polls (2 s): none of them delivers
        assert counts(db)["pending"] == len(ids) and counts(db)["delivered"] == 0
        assert ("r1", "run_needs_human") not in kinds(db)  # nor watches verdicts
    finally:
        stop(a)
    assert took_the_role(log) == 0


@pytest.mark.parametrize("command", ["ui", "mcp-http"])
def test_continuum_ui_and_the_http_server_deliver_too(tmp_path: Path, command: str) -> None:
    """The same deliverer runs in ``continuum ui`` and ``continuum-mcp`` over HTTP (with
    the page): a notification an agent's call writes reaches the receiver, and the run's
    verdict is announced."""
    from tests.e2e.operator_site import mcp_command, serving, ui_command, write_tokens

    work = tmp_path / "work"
    (work / ".continuum").mkdir(parents=True)
    store = str(work / "store.db")
    ids = make_notifications(store)
    receiver = Receiver(tmp_path / "received.jsonl")
    port = receiver.start(0)
    (work / ".continuum" / "notify.toml").write_text(NOTIFY.format(port=port), encoding="utf-8")
    tokens = write_tokens(work / "tokens")
    at = Path(store)
    argv = ui_command(at, tokens) if command == "ui" else mcp_command(at, tokens)
    try:
        with serving(argv, work) as running:
            wait_until(
                "delivered by the server, the verdict too",
                lambda: settled(store) and ("r1", "run_needs_human") in kinds(store),
            )
            assert "outbox.delivering" in running.log()
    finally:
        receiver.kill()
    assert never_accepted(receiver.entries(), ids) == []
