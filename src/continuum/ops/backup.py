"""Online backup, its check without a store, and restore into a new store.

A backup is one tar file (uncompressed; ``tar -xf`` opens it), mode 0600, written whole
or not at all (``safe_files``), with two members in this order:

- ``manifest.json``: what the backup holds: per run its head (sequence and hash), status,
  live events, archived prefix, actions, checkpoints; the totals; the data member's name,
  size and SHA-256; and ``manifest_digest``, the SHA-256 of the canonical JSON of every
  other field;
- the data: ``store.sqlite`` (kind ``sqlite``), a page-for-page copy of a SQLite store
  taken by SQLite's online backup API inside one read snapshot while writers go on
  (``store/sqlite_backup.py``); or ``store.jsonl`` (kind ``export``), the runs read inside
  one snapshot transaction (PostgreSQL REPEATABLE READ; on SQLite one read transaction,
  for ``--run``) in the export's line format, with the action and approval indexes as
  stored (so a run whose old history was archived keeps every settled action).

Before the file gets its name the data is verified (every run: chain, indexes,
checkpoints) and described in the manifest. ``verify_backup`` repeats every check from
the file alone, naming the kind of a problem: ``integrity.backup_truncated`` (cut short:
a member or the tar end is missing), ``integrity.backup_manifest`` (the manifest was
edited, or does not describe the data), ``integrity.backup_data`` (the data is not what
the manifest recorded, or does not verify), ``integrity.backup_schema`` (the SQLite copy's
tables, columns, indexes, triggers or views are not exactly those of a store of its
version: compared before the copy is ever opened as a store), ``integrity.backup_signature``
(with a public key: the manifest is not signed by it). Every derived table is checked
against the log: the action and approval indexes (``verify_run``), and the notification
outbox (``check_outbox``). ``restore_backup`` does the same checks, then builds the new
store (a new SQLite file, published only once verified; or an empty PostgreSQL store,
filled in one transaction) and verifies every chain on arrival.

The manifest's digest is unkeyed: whoever rewrites the data can recompute it. A backup
taken with ``sign`` (a private key) carries a signature over it; checked with the
signer's public key (``public_key``), that is what makes a backup trusted.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from continuum.errors import ContinuumError, IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json_parsed
from continuum.eventlog.reports import VerifyReport
from continuum.faults import fault_point
from continuum.ops.archive import verify_archived
from continuum.ops.backup_checks import check_layout, check_outbox, outbox_rows
from continuum.ops.backup_file import (
    DATA_NAMES,
    FORMAT,
    FORMAT_VERSION,
    Progress,
    backup_refused,
    check_signed,
    dump_runs,
    load_runs,
    open_members,
    pack,
    seal_manifest,
    sha256_of,
    sign_manifest,
    signer_of,
)
from continuum.recovery.verification import verify_run
from continuum.safe_files import (
    create_private,
    discard,
    fsync_file,
    partial_name,
    publish,
    refuse_existing,
    written_whole,
)
from continuum.store import (
    RunExport,
    SQLiteStorage,
    Storage,
    is_postgres_url,
    open_store,
    redact_url,
)
from continuum.store.base import format_timestamp
from continuum.store.sqlite_backup import snapshot_copy
from continuum.untrusted import as_typed
from continuum.version import __version__

# -- describing and verifying a store ----------------------------------------------------------


def verify_all(
    store: Storage, run_ids: Iterable[str] | None = None, progress: Progress | None = None
) -> dict[str, dict[str, Any]]:
    """Verify every run (chain, indexes, checkpoints; a run with archived history from its
    marker on) and describe it as a manifest does; ``IntegrityError`` on any damage."""
    runs = store.list_runs() if run_ids is None else [store.get_run(r) for r in run_ids]
    out: dict[str, dict[str, Any]] = {}
    for i, run in enumerate(runs):
        base = store.archive_base(run.run_id)
        report: VerifyReport = (
            verify_run(store, run.run_id)
            if base is None
            else verify_archived(store, run.run_id, base)
        )
        if not report.ok:
            v = report.violations[0]
            raise IntegrityError(
                f"run {run.run_id!r} does not verify at sequence {v.sequence} "
                f"({v.kind}: {v.detail})",
                code=f"integrity.{v.kind}",
                hint=f"run `continuum verify {run.run_id}`",
                run_id=run.run_id,
                sequence=v.sequence,
            )
        out[run.run_id] = {
            "head_sequence": run.head_sequence,
            "head_hash": run.head_hash,
            "status": str(run.status),
            "events": store.count_events(run.run_id),
            "archived_through": base.through if base is not None else 0,
            "actions": len(store.action_index_rows(run.run_id)),
            "checkpoints": len(store.list_checkpoints(run.run_id)),
        }
        if progress is not None:
            progress("verify", i + 1, len(runs))
    return out


def _totals(runs: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {
        "runs": len(runs),
        "events": sum(r["events"] for r in runs.values()),
        "actions": sum(r["actions"] for r in runs.values()),
        "checkpoints": sum(r["checkpoints"] for r in runs.values()),
    }


# -- taking a backup ----------------------------------------------------------------------------


def backup_store(
    store: Storage,
    dest: Path,
    *,
    run_ids: list[str] | None = None,
    progress: Progress | None = None,
    sign: Path | None = None,
) -> dict[str, Any]:
    """Write a backup of ``store`` (or of ``run_ids`` only) to the new file ``dest``; returns
    its manifest. Writers may go on meanwhile: the copy is of one moment. ``sign``: a
    private key; the manifest then carries a signature over its digest."""
    refuse_existing(dest, "backup")
    if sign is not None:
        from continuum.ops.signing import load_private_key

        load_private_key(sign)  # a bad key is refused before the copy is taken
    started = time.monotonic()
    data = partial_name(dest, "data")
    kind = "sqlite" if isinstance(store, SQLiteStorage) and run_ids is None else "export"
    try:
        create_private(data).close()
        if kind == "sqlite":
            assert isinstance(store, SQLiteStorage)
            snapshot_copy(
                store.path,
                data,
                progress=None
                if progress is None
                else (lambda done, total: progress("copy", done, total)),
            )
            fsync_file(data)
            version = check_layout(dest, data, store.schema_version())
            outbox = outbox_rows(dest, data, version)
            copy = SQLiteStorage(data, create=False)
            try:
                runs = verify_all(copy, progress=progress)
                check_outbox(copy, outbox, dest)
                schema = copy.schema_version()
            finally:
                copy.close()
            discard_wal(data)
        else:
            with open(data, "wb") as f, store.snapshot():
                dump_runs(store, f, run_ids, progress)
                f.flush()
                os.fsync(f.fileno())
            runs = _verify_jsonl(data, dest, progress)
            schema = None
        fault_point("backup_data_written")
        size, sha = os.path.getsize(data), sha256_of(data)
        manifest = seal_manifest(
            {
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "kind": kind,
                "created_at": format_timestamp(datetime.now(UTC)),
                "source": redact_url(store.url),
                "continuum": __version__,
                "schema_version": schema,
                "runs": runs,
                "totals": _totals(runs),
                "data": {"name": DATA_NAMES[kind], "bytes": size, "sha256": sha},
            }
        )
        if sign is not None:
            manifest = sign_manifest(manifest, sign)
        with written_whole(dest, "backup") as (f, _):
            pack(f, manifest, data, progress)
    finally:
        discard(data)
    return {
        **manifest,
        "file": str(dest),
        "seconds": round(time.monotonic() - started, 3),
        "signed_by": signer_of(manifest),
    }


def discard_wal(path: Path) -> None:
    """A closed SQLite copy keeps no -wal (checkpointed on close); a leftover is an error."""
    for suffix in ("-wal", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists() and side.stat().st_size > 0:
            raise IntegrityError(
                f"the copy {as_typed(str(path))} still has a {suffix} file",
                code="integrity.backup_data",
                hint="take the backup again",
            )
        with contextlib.suppress(OSError):
            side.unlink()
    with contextlib.suppress(OSError):
        path.with_name(path.name + "-shm").unlink()


# -- checking a backup ------------------------------------------------------------------------


def _verify_jsonl(data: Path, path: Path, progress: Progress | None) -> dict[str, dict[str, Any]]:
    """Import the JSONL data into a scratch SQLite store (chains verified inside the
    import's transaction) and verify every run there; describe them."""
    scratch = Path(tempfile.mkdtemp(prefix="continuum-verify-"))
    try:
        store = SQLiteStorage(scratch / "check.db")
        try:
            with open(data, "rb") as f:
                bundles = load_runs(path, f)
            try:
                store.import_runs(bundles)
            except IntegrityError as e:
                raise backup_refused(path, f"a run does not verify: {e.message}", "data") from e
            return _verified(store, path, progress)
        finally:
            store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _verified(store: Storage, path: Path, progress: Progress | None) -> dict[str, dict[str, Any]]:
    try:
        return verify_all(store, progress=progress)
    except IntegrityError as e:
        raise backup_refused(path, f"a run does not verify: {e.message}", "data") from e


def _check_runs(path: Path, manifest: dict[str, Any], found: dict[str, dict[str, Any]]) -> None:
    claimed = manifest["runs"]
    if canonical_json_parsed(claimed) != canonical_json_parsed(found):
        differ = sorted(r for r in {*claimed, *found} if claimed.get(r) != found.get(r))
        raise backup_refused(
            path,
            f"the manifest does not describe the data (runs differ: {', '.join(differ[:5])})",
            "manifest",
        )
    if manifest.get("totals") != _totals(found):
        raise backup_refused(path, "the manifest's totals do not match its runs", "manifest")


@contextlib.contextmanager
def _checked(
    path: Path, data: Path, check: Path, progress: Progress | None, public_key: Path | None
) -> Iterator[tuple[dict[str, Any], Path]]:
    """Every check of a backup; yields (manifest, the verified data as a SQLite store file:
    ``data`` itself for kind sqlite, else ``check``, a store the JSONL data was imported
    into). Both files are removed afterwards unless the caller moved them away. With
    ``public_key`` the manifest's signature must verify with it (``trusted`` in the
    manifest yielded)."""
    store: Storage | None = None
    outbox: list[tuple[Any, ...]] | None = None
    try:
        manifest = open_members(path, data)
        if public_key is not None:
            manifest = {**manifest, "trusted_key": check_signed(path, manifest, public_key)}
        if manifest["kind"] == "sqlite":
            # Before the copy is opened as a store: its schema, then its outbox as written.
            version = check_layout(path, data, manifest.get("schema_version"))
            outbox = outbox_rows(path, data, version)
            try:
                store = SQLiteStorage(data, create=False)
            except ContinuumError as e:
                raise backup_refused(
                    path, f"the data is not a usable store ({e.message})", "data"
                ) from e
        else:
            store = SQLiteStorage(check)
            try:
                with open(data, "rb") as f:
                    store.import_runs(load_runs(path, f))
            except IntegrityError as e:
                if e.code.startswith("integrity.backup_"):
                    raise
                raise backup_refused(path, f"a run does not verify: {e.message}", "data") from e
        _check_runs(path, manifest, _verified(store, path, progress))
        if outbox is not None:
            check_outbox(store, outbox, path)
        store.close()
        store = None
        yield manifest, data if manifest["kind"] == "sqlite" else check
    finally:
        if store is not None:
            store.close()
        discard(data, check)


def _signature(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a result says of the manifest's signature."""
    trusted = manifest.get("trusted_key")
    return {
        "signed_by": signer_of(manifest),
        "signature": "verified" if trusted else "not checked" if signer_of(manifest) else None,
        "trusted": trusted is not None,
    }


def verify_backup(
    path: Path, *, progress: Progress | None = None, public_key: Path | None = None
) -> dict[str, Any]:
    """Check a backup file without a store of its own; refuses it by kind (module doc).
    ``public_key``: the manifest must be signed by its private key."""
    scratch = Path(tempfile.mkdtemp(prefix="continuum-verify-"))
    try:
        with _checked(path, scratch / "data", scratch / "check.db", progress, public_key) as (
            manifest,
            _,
        ):
            return {
                "file": str(path),
                "ok": True,
                "kind": manifest["kind"],
                "created_at": manifest.get("created_at"),
                "source": manifest.get("source"),
                "runs": manifest["runs"],
                "totals": manifest["totals"],
                "data": manifest["data"],
                "manifest_digest": manifest["manifest_digest"],
                **_signature(manifest),
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- restoring ---------------------------------------------------------------------------------


def restore_backup(
    path: Path,
    target: str,
    *,
    progress: Progress | None = None,
    public_key: Path | None = None,
) -> dict[str, Any]:
    """Restore a backup into a new store at ``target`` (a SQLite path that does not exist,
    or a PostgreSQL database without a store or without runs); every chain verified.
    ``public_key``: the manifest must be signed by its private key."""
    from continuum.store import sqlite_path_from_url

    if is_postgres_url(target):
        return _restore_postgres(path, target, progress, public_key)
    final = sqlite_path_from_url(target)
    refuse_existing(final, "restore")
    staged = partial_name(final, "restore")
    with _checked(
        path, partial_name(final, "extract"), partial_name(final, "check"), progress, public_key
    ) as (manifest, verified):
        try:
            discard_wal(verified)
            os.replace(verified, staged)
            fault_point("restore_staged")
            again = SQLiteStorage(staged, create=False)
            try:
                runs = _verified(again, path, progress)  # on arrival, where it will live
            finally:
                again.close()
            discard_wal(staged)
            fsync_file(staged)
            fault_point("restore_before_publish")
            publish(staged, final)
        except BaseException:
            discard(staged)
            raise
    return {
        "file": str(path),
        "store": str(final),
        "kind": manifest["kind"],
        "runs": runs,
        "totals": _totals(runs),
        **_signature(manifest),
    }


def _restore_postgres(
    path: Path, target: str, progress: Progress | None, public_key: Path | None
) -> dict[str, Any]:
    existing = None
    with contextlib.suppress(ContinuumError):
        existing = open_store(target, create=False)
    if existing is not None:
        try:
            if existing.list_runs():
                raise UsageError(
                    f"{redact_url(target)} already holds a store with runs; a "
                    "backup is restored into a new store only",
                    code="usage.store_exists",
                    hint="restore into an empty database; nothing was written",
                )
        finally:
            existing.close()
    scratch = Path(tempfile.mkdtemp(prefix="continuum-restore-"))
    try:
        with _checked(path, scratch / "data", scratch / "check.db", progress, public_key) as (
            manifest,
            verified,
        ):
            checked = SQLiteStorage(verified, create=False)
            try:
                bundles = list(_bundles(checked))
            finally:
                checked.close()
            fault_point("restore_staged")
            new = open_store(target)
            try:
                if new.list_runs():
                    raise UsageError(
                        f"{redact_url(target)} got runs meanwhile; nothing was restored",
                        code="usage.store_exists",
                        hint="restore into an empty database",
                    )
                new.import_runs(bundles)  # one transaction, chains re-verified inside it
                runs = _verified(new, path, progress)
            finally:
                new.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "file": str(path),
        "store": redact_url(target),
        "kind": manifest["kind"],
        "runs": runs,
        "totals": _totals(runs),
        **_signature(manifest),
    }


def _bundles(store: Storage) -> Iterator[RunExport]:
    """Every run of a (verified) store as ``import_runs`` takes it, indexes as stored."""
    buffer = io.BytesIO()
    with store.snapshot():
        dump_runs(store, buffer)
    buffer.seek(0)
    yield from load_runs(Path(store.url), buffer)
