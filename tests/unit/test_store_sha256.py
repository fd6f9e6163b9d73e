"""``digest.store_sha256``: OpenSSL's sha256 for the store unless a short process (a hook)
chose the interpreter's own; the digests are the same either way, and a hook process
does choose it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from continuum import digest
from continuum.eventlog.events import row_hash


@pytest.fixture
def restored() -> Iterator[None]:
    before = digest._chosen
    try:
        yield
    finally:
        digest._chosen = before


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
    digest._chosen = None
    assert digest.store_sha256() is hashlib.sha256
    with_openssl = _sealed()
    digest.use_builtin_sha256()
    assert digest.store_sha256() is not hashlib.sha256
    assert _sealed() == with_openssl
    for data in (b"", b"x" * 1000, "ü".encode()):
        assert digest.store_sha256()(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert digest.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_hook_process_hashes_with_the_builtin() -> None:
    """Control for the lean-import test: after the hook entry's start, ``store_sha256`` is
    not OpenSSL's (and importing the event log did not load it)."""
    probe = (
        "import sys, json\n"
        "from continuum.hooks import entry\n"
        "from continuum import digest\n"
        "entry.main(['pre-tool', '--help'])\n"
        "print(json.dumps([digest.store_sha256().__module__, '_hashlib' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    module, openssl = json.loads(done.stdout.splitlines()[-1])
    assert module != "_hashlib" and not openssl
