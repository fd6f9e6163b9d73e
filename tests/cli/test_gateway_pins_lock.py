"""The pins file has one writer at a time (``gateway/pins.py``, ``locked_pins``).

A person's ``continuum gateway accept`` reads the pins, shows the pending changes, asks,
then writes; a gateway's ``tools/list`` meanwhile pins a new tool. Before the lock, the
accept wrote its stale copy over the gateway's pin (or the gateway over the acceptance).
Now the accept re-reads under the lock: both survive, and a pending definition that
changed while it was shown is not accepted. A real second process holds the lock in one
test, so the lock is shown to be a lock between processes, not only a convention.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import continuum.cli.gateway_mcp as gateway_cli
from continuum.gateway.pins import Pins, locked_pins
from tests.cli.conftest import Result

SCHEMA = {"type": "object"}


def _pending_change(pins_file: Path) -> None:
    pins = Pins.load(pins_file)
    pins.judge("inv", [("send", "Send an invoice.", SCHEMA)])  # first sight
    pins.judge("inv", [("send", "Send an invoice, and more.", SCHEMA)])  # changed: pending
    pins.save()


def _gateway_lists(pins_file: Path, tools: list[tuple[str, str | None, Any]]) -> None:
    """What a gateway's tools/list does with the pins (mcp_gateway.refresh)."""
    with locked_pins(pins_file) as pins:
        pins.judge("inv", tools)
        pins.save()


def _while_the_person_reads(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """Run ``meanwhile`` after accept has read and shown the pins, before it writes."""
    real = gateway_cli.require_person

    def reading(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        meanwhile()

    monkeypatch.setattr(gateway_cli, "require_person", reading)


def test_a_tool_pinned_by_a_gateway_while_a_person_accepts_is_kept(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    pins_file = tmp_path / "gateway-pins.json"
    _pending_change(pins_file)
    _while_the_person_reads(
        monkeypatch,
        lambda: _gateway_lists(
            pins_file,
            [("send", "Send an invoice, and more.", SCHEMA), ("refund", "Refund.", SCHEMA)],
        ),
    )
    r = cli("gateway", "accept", "--pins", str(pins_file), "--yes")
    assert r.code == 0, r.out + r.err
    data = json.loads(pins_file.read_text(encoding="utf-8"))
    tools = data["servers"]["inv"]["tools"]
    assert "refund" in tools  # the gateway's pin survived the accept
    assert "accepted_at" in tools["send"] and data["servers"]["inv"]["pending"] == {}
    assert [a["tool"] for a in data["accepted"]] == ["send"]


def test_a_pending_definition_that_changed_while_shown_is_not_accepted(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    pins_file = tmp_path / "gateway-pins.json"
    _pending_change(pins_file)
    before = json.loads(pins_file.read_text(encoding="utf-8"))
    shown = before["servers"]["inv"]["pending"]["send"]["sha256"]
    # The server changes the tool again while the person reads the first change.
    _while_the_person_reads(
        monkeypatch, lambda: _gateway_lists(pins_file, [("send", "Send it elsewhere.", SCHEMA)])
    )
    r = cli("--json", "gateway", "accept", "--pins", str(pins_file), "--yes")
    assert r.code != 0 and json.loads(r.out)["error"]["code"] == "gateway.pins_changed", r.out
    data = json.loads(pins_file.read_text(encoding="utf-8"))
    assert data.get("accepted", []) == []  # nothing accepted
    pending = data["servers"]["inv"]["pending"]["send"]
    assert pending["sha256"] != shown  # the newer change waits for its own review
    assert data["servers"]["inv"]["tools"]["send"] == before["servers"]["inv"]["tools"]["send"]


def test_control_without_the_reread_the_accept_writes_over_the_gateways_pin(
    tmp_path: Path,
) -> None:
    # The old sequence (load, someone else writes, accept, save) loses the other write:
    # what the lock and the re-read exist for.
    pins_file = tmp_path / "gateway-pins.json"
    _pending_change(pins_file)
    stale = Pins.load(pins_file)
    _gateway_lists(
        pins_file, [("send", "Send an invoice, and more.", SCHEMA), ("refund", "Refund.", SCHEMA)]
    )
    stale.accept("inv", "send")
    stale.save()
    tools = json.loads(pins_file.read_text(encoding="utf-8"))["servers"]["inv"]["tools"]
    assert "refund" not in tools


HOLDER = textwrap.dedent(
    """
    import sys, time
    from continuum.gateway.pins import locked_pins
    with locked_pins(sys.argv[1]) as pins:
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
        pins.judge("inv", [("slow", "Pinned by the holder.", {"type": "object"})])
        pins.save()
    """
)


def test_another_process_holding_the_lock_makes_a_writer_wait_and_read_its_change(
    tmp_path: Path,
) -> None:
    pins_file = tmp_path / "gateway-pins.json"
    hold = 0.5
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(pins_file), str(hold)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # The holder writes its pin only after its sleep, with the lock held: reading it
        # here means this writer waited for the lock (a mere convention would read the
        # file at once, without the pin).
        with locked_pins(pins_file) as pins:
            assert "slow" in pins.server("inv")["tools"]
    finally:
        assert holder.wait(timeout=30) == 0
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_lock_held_too_long_is_refused_with_a_clear_error_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import continuum.gateway.pins as pins_module
    from continuum.errors import UsageError

    pins_file = tmp_path / "gateway-pins.json"
    _pending_change(pins_file)
    before = pins_file.read_bytes()
    monkeypatch.setattr(pins_module, "LOCK_WAIT_SECONDS", 0.3)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(pins_file), "30"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError) as refused, locked_pins(pins_file):
            pass
        assert refused.value.code == "gateway.pins_locked"
        assert str(pins_file) in refused.value.message
    finally:
        holder.kill()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
    assert pins_file.read_bytes() == before


def test_a_listing_that_changes_nothing_is_not_a_modification() -> None:
    pins = Pins(Path("unused.json"))
    first = pins.judge("inv", [("send", "Send.", SCHEMA)])
    again = pins.judge("inv", [("send", "Send.", SCHEMA)])
    changed = pins.judge("inv", [("send", "Send more.", SCHEMA)])
    same_change = pins.judge("inv", [("send", "Send more.", SCHEMA)])
    back = pins.judge("inv", [("send", "Send.", SCHEMA)])  # the pending change is dropped
    assert [first.modified, again.modified, changed.modified] == [True, False, True]
    assert [same_change.modified, back.modified] == [False, True]
