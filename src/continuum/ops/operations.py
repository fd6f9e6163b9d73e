"""What the facade does for long-lived stores: verify with archives and signed anchors,
issue signed anchors. (Backup, archive and restore are in ``backup.py``/``archive.py``;
the facade calls them.) Heavier modules (``cryptography``, ``tarfile``) are imported only
when these are used, so a resume or an MCP server start never pays for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from continuum.errors import UsageError
from continuum.eventlog.reports import VerifyReport
from continuum.recovery.verification import bulk_reading, issue_anchor, parse_anchor, verify_run
from continuum.store import Storage


def verify_history(
    store: Storage,
    run_id: str,
    *,
    expect_head: str | None = None,
    archives: Sequence[str | Path] = (),
    public_key: str | Path | None = None,
) -> VerifyReport:
    """``Continuum.verify``: the run's chain, head, indexes and checkpoints; an anchor
    (``SEQ:HASH``, or a signed anchor checked with ``public_key`` first); for a run whose
    old history was archived, the live log from its marker and, given the archive files,
    the whole history from event 1."""
    anchor: tuple[int, str] | None = None
    if expect_head is not None:
        from continuum.ops.signing import check_signed_anchor, is_signed

        if is_signed(expect_head):
            if public_key is None:
                raise UsageError(
                    "a signed anchor is checked with the signer's public key",
                    code="usage.public_key_needed",
                    hint="pass --public-key PUBFILE (the .pub of the signing key)",
                )
            anchor = check_signed_anchor(expect_head, Path(public_key), run_id)
        else:
            if public_key is not None:
                raise UsageError(
                    "--public-key checks a signed anchor; this anchor is not signed",
                    code="usage.invalid",
                    hint="pass the signed_anchor of `continuum anchor RUN --sign "
                    "KEY`, or leave out --public-key",
                )
            anchor = parse_anchor(expect_head)
    elif public_key is not None:
        raise UsageError(
            "--public-key needs a signed anchor to check",
            code="usage.invalid",
            hint="pass --expect-head SIGNED_ANCHOR",
        )
    base = store.archive_base(run_id)
    if base is None:
        if archives:
            raise UsageError(
                f"run {run_id!r} has no archived history; --archive is not needed",
                code="usage.not_archived",
                hint=f"continuum verify {run_id}",
            )
        return verify_run(
            store, run_id, expect_head=None if anchor is None else f"{anchor[0]}:{anchor[1]}"
        )
    from continuum.ops.archive import verify_archived

    with bulk_reading():
        return verify_archived(store, run_id, base, [Path(a) for a in archives], anchor=anchor)


def anchor_of(store: Storage, run_id: str, *, sign: str | Path | None = None) -> dict[str, Any]:
    """``Continuum.anchor``: the head as ``SEQ:HASH``; with ``sign`` (a private key file)
    also a signed anchor token binding run, sequence and hash."""
    anchor = issue_anchor(store, run_id)
    if sign is None:
        return anchor
    if anchor["hash"] is None:
        raise UsageError(
            f"run {run_id!r} has no events yet; there is nothing to sign",
            code="usage.empty_run",
            hint="sign an anchor once the run has events",
        )
    from continuum.ops.signing import sign_anchor

    signed = sign_anchor(run_id, anchor["sequence"], anchor["hash"], Path(sign))
    return {
        **anchor,
        "signed_anchor": signed["signed_anchor"],
        "key_id": signed["key_id"],
        "signed_at": signed["signed_at"],
    }
