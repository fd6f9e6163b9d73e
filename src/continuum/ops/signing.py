"""Signed anchors: an auditor holding a public key checks that a run's history is unchanged.

An anchor (``continuum anchor RUN``) names a run's head as ``SEQ:HASH``; the hash at SEQ
commits to every event before it (each event's hash covers the previous one's), first
event included. Kept by someone else, it catches a log that was cut back (rewound) or
replaced by another history (forked) since. Signed with an Ed25519 key
(``continuum anchor RUN --sign KEY``), it also carries who vouched for it: the auditor
checks it with the public key alone (``continuum verify RUN --expect-head TOKEN
--public-key PUB``), so an anchor re-issued by whoever rewrote the log, signed with any
other key, is refused.

The token is ``continuum-anchor-1.<claims>.<signature>`` (both base64url, no padding);
the claims are the canonical JSON of ``{run_id, sequence, hash, key_id, signed_at}`` and
the signature is over ``DOMAIN`` followed by those bytes. ``key_id`` is the first 16 hex
digits of the SHA-256 of the raw public key. A store has no identity of its own to bind:
the hash at SEQ already tells one run's history from any other.

Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public), as ``continuum keygen``
writes them or ``openssl genpkey -algorithm ed25519`` does. A private key file readable
by anyone but its owner is refused, as ssh refuses one. ``cryptography`` is imported only
here, and only when a key is used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json, parse_json
from continuum.safe_files import written_whole
from continuum.store.base import format_timestamp
from continuum.untrusted import as_typed, quoted

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

PREFIX = "continuum-anchor-1"
DOMAIN = b"continuum signed anchor 1\n"


def is_signed(anchor: str) -> bool:
    return anchor.startswith(PREFIX + ".")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


# -- keys ------------------------------------------------------------------------------------


def generate_keypair(private_path: Path, public_path: Path) -> dict[str, Any]:
    """A new Ed25519 key pair: the private key 0600, the public key 0644; both files new."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

    if private_path.absolute() == public_path.absolute():
        raise UsageError(
            "the private and the public key need two different files",
            code="usage.invalid",
            hint="e.g. --private anchor.key --public anchor.pub",
        )
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    public_pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    with written_whole(public_path, "public key") as (f, temporary):
        f.write(public_pem)
        os.chmod(temporary, 0o644)  # a public key is for others to read
    with written_whole(private_path, "private key") as (f, _):
        f.write(private_pem)
    return {
        "private_key": str(private_path),
        "public_key": str(public_path),
        "key_id": key_id(key.public_key()),
    }


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(64 * 1024)
    except OSError as e:
        raise UsageError(
            f"cannot read the {what} {as_typed(str(path))}: {e.strerror}",
            code="usage.bad_key",
            hint="check the path",
        ) from e


def load_private_key(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise UsageError(
            f"cannot read the private key {as_typed(str(path))}: {e.strerror}",
            code="usage.bad_key",
            hint="check the path",
        ) from e
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(
            f"the private key {as_typed(str(path))} is readable by others "
            f"(mode {stat.S_IMODE(mode):o}); it was not used",
            code="usage.key_too_open",
            hint=f"chmod 600 {as_typed(str(path))}",
        )
    data = _read_key_file(path, "private key")
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise UsageError(
            f"{as_typed(str(path))} is not an unencrypted PEM private key",
            code="usage.bad_key",
            hint="make one with `continuum keygen` (or openssl genpkey -algorithm ed25519)",
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(
            f"{as_typed(str(path))} is not an Ed25519 key",
            code="usage.bad_key",
            hint="make one with `continuum keygen`",
        )
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    data = _read_key_file(path, "public key")
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise UsageError(
            f"{as_typed(str(path))} is not a PEM public key",
            code="usage.bad_key",
            hint="pass the .pub file `continuum keygen` wrote",
        ) from e
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(
            f"{as_typed(str(path))} is not an Ed25519 public key",
            code="usage.bad_key",
            hint="pass the .pub file `continuum keygen` wrote",
        )
    return key


# -- anchors ---------------------------------------------------------------------------------


def sign_anchor(run_id: str, sequence: int, hash_: str, private_path: Path) -> dict[str, Any]:
    """A signed anchor token for (run, sequence, hash)."""
    key = load_private_key(private_path)
    claims = {
        "run_id": run_id,
        "sequence": sequence,
        "hash": hash_,
        "key_id": key_id(key.public_key()),
        "signed_at": format_timestamp(datetime.now(UTC)),
    }
    body = canonical_json(claims).encode("utf-8")
    signature = key.sign(DOMAIN + body)
    return {"signed_anchor": f"{PREFIX}.{_b64(body)}.{_b64(signature)}", **claims}


def _malformed(why: str) -> UsageError:
    return UsageError(
        f"the signed anchor is malformed: {why}",
        code="usage.bad_anchor",
        hint="pass the signed_anchor printed by `continuum anchor RUN --sign KEY`, whole",
    )


def check_signed_anchor(token: str, public_path: Path, run_id: str) -> tuple[int, str]:
    """(sequence, hash) of a signed anchor whose signature verifies with the public key and
    which names ``run_id``. A bad signature is ``integrity.anchor_signature`` (exit 3)."""
    from cryptography.exceptions import InvalidSignature

    public = load_public_key(public_path)
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise _malformed(f"it does not start with {PREFIX}. or has not three parts")
    try:
        body, signature = _unb64(parts[1]), _unb64(parts[2])
    except (binascii.Error, ValueError) as e:
        raise _malformed("its parts are not base64url") from e
    try:
        claims = parse_json(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise _malformed("its claims are not JSON") from e
    if not isinstance(claims, dict):
        raise _malformed("its claims are not an object")
    mine = key_id(public)
    try:
        public.verify(signature, DOMAIN + body)
    except InvalidSignature:
        signer = claims.get("key_id")
        raise IntegrityError(
            "the anchor's signature does not verify with this public key (key "
            f"{mine}): it was signed with another key ({quoted(str(signer))}) or edited; it is "
            "not evidence of this run's history",
            code="integrity.anchor_signature",
            hint="get the anchor from whoever holds the signing key, or check that you "
            "passed their public key",
            run_id=run_id,
            key_id=mine,
        ) from None
    seq, hash_, named = claims.get("sequence"), claims.get("hash"), claims.get("run_id")
    if type(seq) is not int or seq < 1 or not isinstance(hash_, str) or len(hash_) != 64:
        raise _malformed("its claims lack a sequence and hash")
    if named != run_id:
        raise UsageError(
            f"the signed anchor is for run {quoted(str(named))}, not {quoted(run_id)}",
            code="usage.anchor_other_run",
            hint="verify the run the anchor names, or pass its anchor",
        )
    return seq, hash_


# -- signed files: exports and backup manifests ----------------------------------------------
#
# The same construction as an anchor, for a file: the writer signs a digest of the file's
# content (an export's lines, a backup's manifest, which holds the data's SHA-256) with
# claims saying what it is; the reader recomputes the digest and checks the signature with
# the public key a person passes. The domain strings keep a signature made for one kind of
# thing from passing for another.

EXPORT_PREFIX, EXPORT_DOMAIN = "continuum-export-1", b"continuum signed export 1\n"
BACKUP_PREFIX, BACKUP_DOMAIN = "continuum-backup-1", b"continuum signed backup 1\n"


def sign_claims(prefix: str, domain: bytes, claims: dict[str, Any], private_path: Path) -> str:
    """A token ``PREFIX.<claims>.<signature>`` over ``claims`` plus the signer's
    ``key_id`` and ``signed_at``."""
    key = load_private_key(private_path)
    full = {
        **claims,
        "key_id": key_id(key.public_key()),
        "signed_at": format_timestamp(datetime.now(UTC)),
    }
    body = canonical_json(full).encode("utf-8")
    return f"{prefix}.{_b64(body)}.{_b64(key.sign(domain + body))}"


def _token_claims(token: Any, prefix: str) -> tuple[dict[str, Any], bytes, bytes] | None:
    """(claims, body, signature) of a well-formed token, else None. Nothing verified."""
    if not isinstance(token, str) or len(token) > 64 * 1024:
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != prefix:
        return None
    try:
        body, signature = _unb64(parts[1]), _unb64(parts[2])
        claims = parse_json(body.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return (claims, body, signature) if isinstance(claims, dict) else None


def claimed_signer(token: Any, prefix: str) -> str | None:
    """The ``key_id`` a token claims, unchecked (to tell a person which key to ask for)."""
    found = _token_claims(token, prefix)
    signer = found[0].get("key_id") if found is not None else None
    return signer if isinstance(signer, str) else None


def open_signed(
    token: Any,
    prefix: str,
    domain: bytes,
    public_path: Path,
    *,
    what: str,
    code: str,
    hint: str,
    **fields: Any,
) -> dict[str, Any]:
    """The claims of ``token`` once its signature verifies with the public key; anything
    else (no token, a malformed one, another key's, an edited one) is ``IntegrityError``
    ``code``: the file is not what the key's holder signed."""
    from cryptography.exceptions import InvalidSignature

    public = load_public_key(public_path)
    mine = key_id(public)
    found = _token_claims(token, prefix)
    if found is None:
        why = f"{what} is not signed" if token is None else f"{what}'s signature is malformed"
        raise IntegrityError(
            f"{why}, so the public key (key {mine}) cannot vouch for it",
            code=code,
            hint=hint,
            key_id=mine,
            **fields,
        )
    claims, body, signature = found
    try:
        public.verify(signature, domain + body)
    except InvalidSignature:
        raise IntegrityError(
            f"{what}'s signature does not verify with this public key (key {mine}): it was "
            f"signed with another key ({quoted(str(claims.get('key_id')))}) or edited",
            code=code,
            hint=hint,
            key_id=mine,
            **fields,
        ) from None
    return claims


def raw_public_key_hex(public_path: Path) -> str:
    """The raw public key in hex (for a person to compare out of band)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return load_public_key(public_path).public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
