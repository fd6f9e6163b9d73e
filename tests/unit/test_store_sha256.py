"""``digest.sha256``: OpenSSL's sha256 for the store unless a hook process chose the
interpreter's own; the digests are the same either way; a hook process (and only one)
does choose it, and the store hashes nothing on import."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuum import digest
from continuum.eventlog.events import row_hash
from continuum.store import confirm_attempts, open_store, pg_rows


@pytest.fixture
def restored() -> Iterator[None]:
    before = digest.sha256
    try:
        yield
    finally:
        digest.sha256 = before


def _sealed() -> str:
    return row_hash(
        event_id="e1",
        run_id="r1",
        sequence=1,
        type="work_completed",
        timestamp="2026-12-07T10:00:00.000000Z",
        payload_text='{"doc":"é"}',
        causer_event_id=None,
        source="deterministic",
        prev_hash=None,
    )


def test_openssl_by_default_and_the_same_digests_with_the_builtin(restored: None) -> None:
    digest.sha256 = digest._first_sha256
    with_openssl = _sealed()
    assert digest.sha256 is hashlib.sha256  # resolved on first use
    digest.use_builtin_sha256()
    assert digest.store_sha256() is not hashlib.sha256
    assert _sealed() == with_openssl
    for data in (b"", b"x" * 1000, "ü".encode()):
        assert digest.store_sha256()(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert digest.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_the_confirm_attempts_lock_key_is_the_one_pg_rows_computes() -> None:
    assert pg_rows.lock_key("continuum:confirm_attempts") == confirm_attempts._PG_LOCK_KEY


PROBE = """
import json, sys
{entry}
from continuum import digest
from continuum.eventlog.events import row_hash
from continuum.store import open_store
open_store(sys.argv[1]).close()
row_hash(event_id="e", run_id="r", sequence=1, type="t", timestamp="x", payload_text="{{}}",
         causer_event_id=None, source="human", prev_hash=None)
print(json.dumps([digest.store_sha256().__module__, "_hashlib" in sys.modules]))
"""


def _probe(entry: str, db: str) -> tuple[str, bool]:
    code = PROBE.format(entry=entry)
    done = subprocess.run(
        [sys.executable, "-c", code, db], capture_output=True, text=True, timeout=60, check=True
    )
    module, openssl = json.loads(done.stdout.splitlines()[-1])
    return module, openssl


def test_a_hook_process_hashes_with_the_builtin(tmp_path: object) -> None:
    """A process through the hooks' entry point opens a store and seals an event's hash
    without OpenSSL;
    control: the same process without that entry point loads it, so the check sees it."""
    db = f"{tmp_path}/s.db"
    open_store(db).close()  # made here: a new store's schema loads the models (and OpenSSL)
    entry = "from continuum.hooks import entry\nentry.process_main(['pre-tool', '--help'])"
    assert _probe(entry, db) == ("_sha256", False)
    assert _probe("", db) == ("_hashlib", True)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=5000))
def test_the_builtin_and_openssl_agree_on_any_bytes(data: bytes) -> None:
    builtin = digest._sha256  # the interpreter's own, what a hook process hashes with
    assert builtin(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert builtin(data).digest() == hashlib.sha256(data).digest()
