"""Review fix: approvals.toml is re-read atomically and fails closed (review of issue 16).

A rewrite that lands while the file is being read is read again, never acted on half
read; a file that held rules and is gone (or emptied) refuses the calls its rules named
(``approvals.rules_missing``), and a malformed one refuses every call
(``approvals.bad_rules``); nothing is written by a refused call. Real SQLite store, real
files in the working directory the ledger reads them from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import continuum.ledger.approval_rules as approvals_module
from continuum.errors import UsageError
from continuum.runtime.facade import Continuum
from continuum.store import open_store

RUN = "rules_run"
WIRE_RULE = '[[approval]]\naction_type = "wire_money"\n'
DROP_RULE = '\n[[approval]]\naction_type = "delete_db"\n'


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / ".continuum" / "approvals.toml"
    path.parent.mkdir()
    path.write_text(WIRE_RULE, encoding="utf-8")
    return path


@pytest.fixture
def cx(tmp_path: Path, rules: Path) -> Continuum:
    rt = Continuum(open_store(str(tmp_path / "store.db")), cwd=str(tmp_path))
    rt.start_run(RUN, "rules")
    return rt


def head(cx: Continuum) -> int:
    return cx.store.get_run(RUN).head_sequence


def refused(cx: Continuum, action_type: str, code: str, key: str) -> None:
    before = head(cx)
    with pytest.raises(UsageError) as e:
        cx.intercept(RUN, action_type, {"n": 1}, key=key)
    assert e.value.code == code and e.value.hint
    assert head(cx) == before  # nothing written


def test_a_rules_file_that_disappears_refuses_the_calls_its_rules_named(
    cx: Continuum, rules: Path
) -> None:
    assert cx.intercept(RUN, "wire_money", {"n": 1}, key="w1").status == "awaiting_approval"
    rules.unlink()
    refused(cx, "wire_money", "approvals.rules_missing", "w2")
    ok = cx.intercept(RUN, "send_mail", {"n": 1}, key="m1")  # no rule ever named it
    assert ok.proceed
    rules.write_text(WIRE_RULE, encoding="utf-8")  # back: judged by it again
    assert cx.intercept(RUN, "wire_money", {"n": 1}, key="w2").status == "awaiting_approval"


def test_a_rules_file_emptied_in_place_refuses_until_it_is_written_again(
    cx: Continuum, rules: Path
) -> None:
    cx.intercept(RUN, "wire_money", {"n": 1}, key="w1")
    rules.write_bytes(b"")  # what a rewrite in place looks like halfway
    refused(cx, "wire_money", "approvals.rules_missing", "w2")
    rules.write_text("# no approval rules any more\n", encoding="utf-8")  # on purpose
    assert cx.intercept(RUN, "wire_money", {"n": 1}, key="w2").proceed


def test_a_rules_file_that_becomes_unparsable_refuses_every_call(
    cx: Continuum, rules: Path
) -> None:
    cx.intercept(RUN, "wire_money", {"n": 1}, key="w1")
    rules.write_text('[[approval]]\naction_type = "wire_money', encoding="utf-8")
    refused(cx, "wire_money", "approvals.bad_rules", "w2")
    refused(cx, "send_mail", "approvals.bad_rules", "m1")


def test_a_process_started_without_a_rules_file_has_no_rules(tmp_path: Path) -> None:
    """Negative control: absence from the start is not a vanished file."""
    rt = Continuum(open_store(str(tmp_path / "store.db")), cwd=str(tmp_path))
    rt.start_run(RUN, "no rules")
    assert rt.intercept(RUN, "wire_money", {"n": 1}, key="w1").proceed


class _RewrittenWhileRead:
    """The file as a reader sees it while a writer finishes rewriting it in place: the
    read returns what was there (the first rule only), then the rest lands."""

    rest = b""

    def __init__(self, f: Any) -> None:
        self.f = f

    def __enter__(self) -> _RewrittenWhileRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()

    def fileno(self) -> int:
        return int(self.f.fileno())

    def read(self, *size: int) -> bytes:
        data: bytes = self.f.read(*size)
        if _RewrittenWhileRead.rest:
            with open(self.f.name, "ab") as w:
                w.write(_RewrittenWhileRead.rest)
            _RewrittenWhileRead.rest = b""
        return data


def test_a_rewrite_that_lands_during_the_read_is_read_again_not_acted_on_half_read(
    cx: Continuum, rules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cx.intercept(RUN, "wire_money", {"n": 1}, key="w1")  # the first version is loaded
    rules.write_text(WIRE_RULE, encoding="utf-8")  # a writer starts a rewrite in place ...
    _RewrittenWhileRead.rest = DROP_RULE.encode()  # ... and finishes it during our read

    def racing_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raw = open(path, mode, *args, **kwargs)  # noqa: SIM115 (closed by its wrapper or caller)
        if str(path) == str(rules) and _RewrittenWhileRead.rest:
            return _RewrittenWhileRead(raw)
        return raw

    monkeypatch.setattr(approvals_module, "open", racing_open, raising=False)
    # bump the stamp so the file is read again (a rewrite changes mtime and size)
    rules.write_text(WIRE_RULE + "# rewriting\n", encoding="utf-8")
    r = cx.intercept(RUN, "delete_db", {"db": "prod"}, key="d1")
    assert _RewrittenWhileRead.rest == b""  # the race really happened
    assert (r.proceed, r.status) == (False, "awaiting_approval")
