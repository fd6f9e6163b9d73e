"""sha256 for the hooks' per-call path, without loading OpenSSL.

``hashlib`` loads OpenSSL's ``_hashlib`` on import: about 11 million instructions, a
quarter of a bare interpreter start, paid by every hook process that hashes the effect
registry. CPython's own sha256 (``_sha256``; ``_sha2`` from 3.12) gives the same digest
for the few kilobytes a hook hashes; ``hashlib`` is the fallback where neither is built.
"""

from __future__ import annotations

try:
    from _sha256 import sha256 as _sha256  # type: ignore[import-not-found]  # CPython 3.11
except ImportError:  # pragma: no cover - the interpreter decides
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]  # 3.12+
    except ImportError:
        from hashlib import sha256 as _sha256


def sha256_hex(data: bytes) -> str:
    """The hex sha256 of ``data`` (what ``hashlib.sha256(data).hexdigest()`` gives)."""
    hexdigest: str = _sha256(data).hexdigest()
    return hexdigest
