"""sha256 without loading OpenSSL where a process hashes little, and OpenSSL's where it
hashes much.

``hashlib`` loads OpenSSL's ``_hashlib`` on import: about 11 million instructions, a
quarter of a bare interpreter start, paid by every hook process. CPython's own sha256
(``_sha256``; ``_sha2`` from 3.12) gives the same digests; it is about three times slower
per record (1.5 against 0.5 us for 500 bytes here, OpenSSL using the CPU's SHA
instructions), which a verify of 100,000 events would feel and a hook, hashing a handful
of records, does not.

- ``sha256_hex``: the interpreter's own, for the hooks' few kilobytes;
- ``sha256`` (``store_sha256()`` to bind it before a loop): the constructor the store and
  the event log hash with: OpenSSL's (loaded on first use, not on import), unless the
  process said it is a short one (``use_builtin_sha256``, which a hook process's entry
  point calls first).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time (it imports `re`)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]  # CPython 3.11
except ImportError:  # pragma: no cover - the interpreter decides
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]  # 3.12+
    except ImportError:
        from hashlib import sha256 as _sha256


def _first_sha256(data: bytes = b"") -> Any:
    """``sha256`` until the first call: OpenSSL's, loaded now (not on import)."""
    return store_sha256()(data)


sha256: Callable[[bytes], Any] = _first_sha256
"""The store's and the event log's sha256 constructor (``hashlib.sha256``'s interface):
OpenSSL's, unless the process chose the interpreter's own (``use_builtin_sha256``). Call
it as ``digest.sha256(...)`` (a module attribute, rebound once), or bind
``store_sha256()`` before a loop."""


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of ``data`` by the interpreter's own (for the hooks' few kilobytes)."""
    hexdigest: str = _sha256(data).hexdigest()
    return hexdigest


def store_sha256() -> Callable[[bytes], Any]:
    """``sha256``, resolved: the constructor itself, to bind before a loop."""
    global sha256
    if sha256 is _first_sha256:
        import hashlib

        sha256 = hashlib.sha256
    return sha256


def use_builtin_sha256() -> None:
    """From now on in this process, ``sha256`` is the interpreter's own: for a short
    process that hashes a few records (a hook process, from its entry point), where
    loading OpenSSL costs more than it saves. The digests are the same."""
    global sha256
    sha256 = _sha256
