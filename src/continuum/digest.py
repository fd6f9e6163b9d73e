"""sha256 without loading OpenSSL where a process hashes little, and OpenSSL's where it
hashes much.

``hashlib`` loads OpenSSL's ``_hashlib`` on import: about 11 million instructions, a
quarter of a bare interpreter start, paid by every hook process. CPython's own sha256
(``_sha256``; ``_sha2`` from 3.12) gives the same digests; it is about three times slower
per record (1.5 against 0.5 us for 500 bytes here, OpenSSL using the CPU's SHA
instructions), which a verify of 100,000 events would feel and a hook, hashing a handful
of records, does not.

- ``sha256_hex``: the interpreter's own, for the hooks' few kilobytes;
- ``store_sha256()``: the constructor the store and the event log hash with: OpenSSL's
  (loaded on first use, not on import), unless the process said it is a short one
  (``use_builtin_sha256``, which the hook entry calls first).
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

_chosen: Callable[[bytes], Any] | None = None


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of ``data`` (what ``hashlib.sha256(data).hexdigest()`` gives)."""
    hexdigest: str = _sha256(data).hexdigest()
    return hexdigest


def store_sha256() -> Callable[[bytes], Any]:
    """The sha256 constructor for the store's hashes (``hashlib.sha256``'s interface)."""
    global _chosen
    if _chosen is None:
        import hashlib

        _chosen = hashlib.sha256
    return _chosen


def use_builtin_sha256() -> None:
    """From now on in this process, ``store_sha256`` is the interpreter's own: for a short
    process that hashes a few records (a hook), where loading OpenSSL costs more than it
    saves. The digests are the same."""
    global _chosen
    _chosen = _sha256
