"""The backup file: a tar of ``manifest.json`` and the data, and the data's JSONL form.

``pack`` writes the members in that order; ``open_members`` reads them back with every
structural check, naming the kind of a problem (``backup_refused``): cut short
(``integrity.backup_truncated``), a manifest that was edited (``integrity.backup_manifest``,
``check_manifest``: its ``manifest_digest`` is the SHA-256 of the canonical JSON of every
other field but itself and ``signature``, ``seal_manifest``), data that is not what the
manifest recorded (``integrity.backup_data``). ``dump_runs`` and ``load_runs`` are the
``store.jsonl`` form: the export's line format plus the action and approval indexes as
stored.

The digest is a plain SHA-256: it catches a change, not a forger, who recomputes it. A
manifest signed with ``backup --sign KEY`` (``sign_manifest``: a ``signing.BACKUP_PREFIX``
token over the digest, in ``signature``) is what makes a backup trusted: checked with the
signer's public key (``check_signed``), it vouches for the manifest and through it for
the data's SHA-256.

Every read is bounded (``bounded.py``): ``tarfile`` reads through ``_BoundedReads``, which
refuses any single read over ``READ_LIMIT`` (an extended header or a manifest claiming
gigabytes is refused, never allocated), the data is streamed, each data line is at most
``MAX_LINE_BYTES`` and each JSON document at most ``MAX_JSON_DEPTH`` deep; a refusal names
the position.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import continuum.ops.bounded as bounded
from continuum.errors import ContinuumError, IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json, digest
from continuum.eventlog.event_model import Event
from continuum.faults import fault_point
from continuum.ops.bounded import LineTooLong, TooDeep, parse_json_bounded, read_lines
from continuum.safe_files import CHUNK, create_private
from continuum.store import ActionRow, CheckpointRow, RunExport, RunInfo, Storage
from continuum.store.approval_outbox import approval_from_row
from continuum.store.models import ApprovalRow
from continuum.store.rows import action_from_row
from continuum.store.schema import SCHEMA_VERSION
from continuum.untrusted import as_typed

FORMAT = "continuum-backup"
FORMAT_VERSION = 1
DATA_FORMAT = "continuum-backup-data"
MANIFEST = "manifest.json"
DATA_NAMES = {"sqlite": "store.sqlite", "export": "store.jsonl"}
BLOCK = tarfile.BLOCKSIZE

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def backup_refused(path: Path, why: str, kind: str, **fields: Any) -> IntegrityError:
    hints = {
        "truncated": "the file is incomplete (an interrupted backup or copy): use another "
        "backup, or take a new one",
        "manifest": "the manifest was changed after the backup was written: do not trust "
        "this file; use another backup",
        "data": "the data is not what the backup wrote, or does not verify: do not trust "
        "this file; use another backup",
        "schema": "the store in the backup has tables, columns, indexes, triggers or views "
        "a continuum store of its version does not have: it was edited; do not trust this "
        "file; use another backup",
        "signature": "the backup is not what the holder of that key signed (or is not "
        "signed): do not trust it; use a backup signed with `continuum backup --sign KEY`",
    }
    return IntegrityError(
        f"backup {as_typed(str(path))} is refused: {why}",
        code=f"integrity.backup_{kind}",
        hint=hints[kind],
        file=str(path),
        **fields,
    )


def not_a_backup(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{as_typed(str(path))} is not a continuum backup: {why}",
        code="usage.not_a_backup",
        hint="pass a file written by `continuum backup`",
    )


def data_line(kind: str, **fields: Any) -> bytes:
    return (canonical_json({"kind": kind, **fields}) + "\n").encode("utf-8")


def dump_runs(
    store: Storage,
    out: IO[bytes],
    run_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """Write runs (events exactly as sealed from the archive base on, checkpoints, the
    action and approval indexes as stored) to ``out``; call inside ``store.snapshot()``
    for a consistent copy. Returns the number of events written."""
    runs = store.list_runs() if run_ids is None else [store.get_run(r) for r in run_ids]
    out.write(
        data_line(
            "header",
            format=DATA_FORMAT,
            version=FORMAT_VERSION,
            source=store.url,
            runs=[r.run_id for r in runs],
        )
    )
    counts = {"runs": 0, "events": 0, "checkpoints": 0, "actions": 0, "approvals": 0}
    for i, run in enumerate(runs):
        base = store.archive_base(run.run_id)
        out.write(
            data_line(
                "run",
                run=run.model_dump(mode="json"),
                archived_through=base.through if base is not None else 0,
            )
        )
        after = base.through if base is not None else 0
        for raw in store.iter_raw(run.run_id, after):
            out.write(data_line("event", event={**raw._asdict(), "source": raw.source.value}))
            counts["events"] += 1
        for cp in reversed(store.list_checkpoints(run.run_id)):
            out.write(data_line("checkpoint", checkpoint=cp.model_dump(mode="json")))
            counts["checkpoints"] += 1
        for row in store.action_index_rows(run.run_id):
            a = action_from_row(row)
            out.write(
                data_line(
                    "action",
                    action={"run_id": a.run_id, "action_id": a.action_id, "record": a.record},
                )
            )
            counts["actions"] += 1
        for row in store.approval_index_rows(run.run_id):
            ap = approval_from_row(row)
            out.write(data_line("approval", approval=ap.model_dump(mode="json")))
            counts["approvals"] += 1
        counts["runs"] += 1
        if progress is not None:
            progress("copy", i + 1, len(runs))
    out.write(data_line("end", **counts))
    return counts["events"]


def load_runs(path: Path, f: IO[bytes]) -> list[RunExport]:
    """Parse the JSONL data in ``f`` back into runs (structure and counts checked here;
    chains, indexes and checkpoints by the store they are imported into, and by
    ``verify_all``). Lines and nesting are bounded (``bounded.py``)."""
    try:
        return _load_runs(path, read_lines(f))
    except LineTooLong as e:
        raise backup_refused(
            path, f"data {e}: no data line is that long", "data", line=e.line, offset=e.offset
        ) from e


def _load_runs(path: Path, lines: Iterable[bytes]) -> list[RunExport]:
    bundles: list[RunExport] = []
    header: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    counts = {"runs": 0, "events": 0, "checkpoints": 0, "actions": 0, "approvals": 0}
    for number, line in enumerate(lines, start=1):
        if end is not None:
            raise backup_refused(path, f"data line {number} comes after the end record", "data")
        try:
            record = parse_json_bounded(line.decode("utf-8"), line=number)
            kind = record["kind"]
            if header is None:
                if kind != "header" or record.get("format") != DATA_FORMAT:
                    raise ValueError("no data header")
                header = record
            elif kind == "run":
                bundles.append(RunExport(run=RunInfo.model_validate(record["run"]), events=[]))
            elif kind == "end":
                end = record
            elif not bundles:
                raise ValueError(f"a {kind} record before any run")
            elif kind == "event":
                bundles[-1].events.append(Event.model_validate(record["event"]))
            elif kind == "checkpoint":
                cp = CheckpointRow.model_validate(record["checkpoint"])
                bounded_state(cp.state_json, number)
                bundles[-1].checkpoints.append(cp)
            elif kind == "action":
                a = record["action"]
                bundles[-1].actions.append(
                    ActionRow(
                        run_id=a["run_id"],
                        action_id=a["action_id"],
                        record=a["record"],
                        lease_expires=None,
                    )
                )
            elif kind == "approval":
                bundles[-1].approvals.append(ApprovalRow.model_validate(record["approval"]))
            else:
                raise ValueError(f"unexpected kind {kind!r}")
            if kind in ("run", "event", "checkpoint", "action", "approval"):
                counts[kind + "s" if kind != "approval" else "approvals"] += 1
        except TooDeep as e:
            raise backup_refused(
                path, f"data line {number} holds {e}", "data", line=number, offset=e.offset
            ) from e
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise backup_refused(
                path, f"data line {number} is not a valid record ({e})", "data", line=number
            ) from e
    if end is None:
        raise backup_refused(path, "the data's end record is missing", "truncated")
    if {k: end.get(k) for k in counts} != counts:
        raise backup_refused(
            path, f"the data's end record counts {end} but the data holds {counts}", "data"
        )
    return bundles


def bounded_state(state_json: str, line: int) -> None:
    """A checkpoint's state, a JSON text inside a line, nested no deeper than the bound
    (it is parsed again wherever the checkpoint is used)."""
    where = bounded.depth_over(state_json, bounded.MAX_JSON_DEPTH)
    if where is not None:
        raise TooDeep(
            f"a checkpoint state nested more than {bounded.MAX_JSON_DEPTH} levels deep "
            f"(character {where} of the state)",
            line=line,
            offset=where,
        )


UNSIGNED = ("manifest_digest", "signature")  # what the digest does not cover


def seal_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with its ``manifest_digest`` (of every other field but ``signature``);
    an existing signature is dropped (it signed another digest)."""
    body = {k: v for k, v in manifest.items() if k not in UNSIGNED}
    return {**body, "manifest_digest": digest(body)}


def sign_manifest(manifest: dict[str, Any], private_key: Path) -> dict[str, Any]:
    """A sealed manifest with its ``signature``: a token over its digest."""
    from continuum.ops.signing import BACKUP_DOMAIN, BACKUP_PREFIX, sign_claims

    token = sign_claims(
        BACKUP_PREFIX,
        BACKUP_DOMAIN,
        {"manifest_digest": manifest["manifest_digest"], "format": FORMAT},
        private_key,
    )
    return {**manifest, "signature": token}


def signer_of(manifest: dict[str, Any]) -> str | None:
    """The key id the manifest's signature claims (unchecked), or None if unsigned."""
    from continuum.ops.signing import BACKUP_PREFIX, claimed_signer

    return claimed_signer(manifest.get("signature"), BACKUP_PREFIX)


def check_signed(path: Path, manifest: dict[str, Any], public_key: Path) -> str:
    """The key id that signed ``manifest``, once its signature verifies with
    ``public_key`` over its digest (which ``check_manifest`` recomputed); else
    ``integrity.backup_signature`` (exit 3)."""
    from continuum.ops.signing import BACKUP_DOMAIN, BACKUP_PREFIX, open_signed

    hint = backup_refused(path, "", "signature").hint or ""
    claims = open_signed(
        manifest.get("signature"),
        BACKUP_PREFIX,
        BACKUP_DOMAIN,
        public_key,
        what=f"backup {as_typed(str(path))}",
        code="integrity.backup_signature",
        hint=hint,
        file=str(path),
    )
    if claims.get("manifest_digest") != manifest["manifest_digest"]:
        raise IntegrityError(
            f"backup {as_typed(str(path))}'s signature is for another manifest",
            code="integrity.backup_signature",
            hint=hint,
            file=str(path),
        )
    return str(claims.get("key_id"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def pack(f: IO[bytes], manifest: dict[str, Any], data: Path, progress: Progress | None) -> None:
    body = canonical_json(manifest).encode("utf-8")
    now = int(time.time())
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(body), 0o600, now
        tar.addfile(info, io.BytesIO(body))
        info = tarfile.TarInfo(manifest["data"]["name"])
        info.size, info.mode, info.mtime = manifest["data"]["bytes"], 0o600, now
        with open(data, "rb") as src:
            tar.addfile(info, _Counting(src, info.size, progress))


class _Counting(io.RawIOBase):
    """A file read through, reporting progress (the pack stage) every 64 MiB."""

    def __init__(self, f: IO[bytes], total: int, progress: Progress | None) -> None:
        self._f, self._total, self._done, self._progress, self._next = f, total, 0, progress, 0

    def read(self, n: int = -1) -> bytes:
        fault_point("backup_packing")
        data = self._f.read(n)
        self._done += len(data)
        if self._progress is not None and (self._done >= self._next or self._done == self._total):
            self._progress("pack", self._done, self._total)
            self._next = self._done + (64 << 20)
        return data


class ReadTooLarge(Exception):
    """A single read of the backup's structure larger than ``READ_LIMIT`` (what a tar
    header claimed)."""

    def __init__(self, size: int, offset: int) -> None:
        super().__init__(size, offset)
        self.size, self.offset = size, offset


READ_LIMIT = 4 * 1024 * 1024
"""No read of a backup's tar structure is larger: headers are 512 bytes, an extended
header at most ``bounded.MAX_MEMBER_HEADER_BYTES``, the data is streamed in ``CHUNK``s."""


class _BoundedReads(io.RawIOBase):
    """The backup file as ``tarfile`` reads it, refusing any single read over the limit:
    ``tarfile`` reads an extended header (and ``read()`` a member) whole, so a header
    claiming 8 GiB would otherwise be allocated before anything could say it is short."""

    def __init__(self, f: IO[bytes], limit: int) -> None:
        self._f, self._limit = f, limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > self._limit:
            raise ReadTooLarge(-1 if size is None else size, self._f.tell())
        return self._f.read(size)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _too_large(path: Path, e: ReadTooLarge, kind: str) -> IntegrityError:
    claim = "an unbounded size" if e.size < 0 else f"{e.size:,} bytes"
    return backup_refused(
        path,
        f"a tar header before byte {e.offset} makes a member claim {claim}, more than any "
        "part of a backup holds",
        kind,
        offset=e.offset,
    )


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.isdir():
        return "a directory"
    return f"a tar member of type {member.type!r}"


def open_members(path: Path, out: Path) -> dict[str, Any]:
    """Check the file's structure, manifest and data digest, extracting the data to the new
    file ``out``. Returns the manifest. Every read is bounded (module docstring)."""
    try:
        size = os.path.getsize(path)
        raw = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as e:
        raise UsageError(
            f"cannot read {as_typed(str(path))}: {e.strerror}",
            code="usage.bad_path",
            hint="check the path",
        ) from e
    with raw:
        if size == 0:
            raise backup_refused(path, "the file is empty", "truncated")
        head = raw.read(BLOCK)
        raw.seek(0)
        try:
            first = tarfile.TarInfo.frombuf(head, tarfile.ENCODING, "surrogateescape")
        except tarfile.HeaderError as e:
            if len(head) < BLOCK:
                raise backup_refused(
                    path, "the file ends inside its first header", "truncated"
                ) from e
            raise not_a_backup(path, "it is not a tar file") from e
        if first.name not in (MANIFEST, "././@PaxHeader") and not first.name.endswith(MANIFEST):
            raise not_a_backup(path, f"its first member is {first.name!r}, not {MANIFEST}")
        guarded = _BoundedReads(raw, READ_LIMIT)
        try:
            tar = tarfile.open(fileobj=guarded, mode="r:")  # noqa: SIM115 - closed with raw
            m = tar.next()
            if m is None or m.name != MANIFEST:
                raise not_a_backup(path, f"its first member is not {MANIFEST}")
            if not m.isfile():
                raise backup_refused(
                    path, f"{MANIFEST} is {_member_kind(m)}, not a regular file", "manifest"
                )
            if m.size > bounded.MAX_MANIFEST_BYTES:
                raise backup_refused(
                    path,
                    f"{MANIFEST} claims {m.size:,} bytes (at byte {m.offset_data}); a "
                    f"manifest is at most {bounded.MAX_MANIFEST_BYTES:,}",
                    "manifest",
                    offset=m.offset_data,
                )
            member = tar.extractfile(m)
            assert member is not None
            parts: list[bytes] = []
            while chunk := member.read(CHUNK):
                parts.append(chunk)
            body = b"".join(parts)
            if len(body) != m.size:
                raise backup_refused(path, "the manifest is cut short", "truncated")
        except tarfile.ReadError as e:
            raise backup_refused(path, f"the manifest is cut short ({e})", "truncated") from e
        except ReadTooLarge as e:
            raise _too_large(path, e, "manifest") from e
        manifest = check_manifest(path, body)
        want = manifest["data"]
        try:
            d = tar.next()
        except tarfile.ReadError as e:
            raise backup_refused(
                path, f"the data member's header is cut short ({e})", "truncated"
            ) from e
        except ReadTooLarge as e:
            raise _too_large(path, e, "data") from e
        if d is None:
            raise backup_refused(path, "the data member is missing", "truncated")
        if d.name != want["name"]:
            raise backup_refused(
                path,
                f"the data member is {d.name!r}, the manifest names {want['name']!r}",
                "manifest",
            )
        if not d.isfile():
            raise backup_refused(
                path,
                f"the data member {d.name!r} is {_member_kind(d)}, not a regular file",
                "data",
            )
        if d.offset_data + d.size > size:
            raise backup_refused(
                path,
                f"the data member holds {d.size} bytes but the file ends "
                f"{d.offset_data + d.size - size} bytes short",
                "truncated",
            )
        h = hashlib.sha256()
        with create_private(out) as dst:
            src = tar.extractfile(d)
            assert src is not None
            try:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
            except tarfile.ReadError as e:
                raise backup_refused(path, f"the data is cut short ({e})", "truncated") from e
            except ReadTooLarge as e:  # pragma: no cover - reads are CHUNK-sized
                raise _too_large(path, e, "data") from e
            dst.flush()
            os.fsync(dst.fileno())
        end = d.offset_data + -(-d.size // BLOCK) * BLOCK
        raw.seek(end)
        trailer = raw.read(2 * BLOCK)
        if len(trailer) < 2 * BLOCK or trailer.strip(b"\0"):
            if len(trailer) < 2 * BLOCK and not trailer.strip(b"\0"):
                raise backup_refused(
                    path, "the tar end marker is missing (the file was cut short)", "truncated"
                )
            raise backup_refused(path, "something follows the data member", "data")
        if d.size != want["bytes"] or h.hexdigest() != want["sha256"]:
            raise backup_refused(
                path,
                f"the data ({d.size} bytes, sha256 {h.hexdigest()[:16]}...) is "
                f"not what the manifest recorded ({want['bytes']} bytes, sha256 "
                f"{str(want['sha256'])[:16]}...)",
                "data",
            )
        return manifest


def _check_schema(path: Path, manifest: dict[str, Any]) -> None:
    """The store schema the backup was taken at, before anything is extracted or created:
    a SQLite copy must name a schema this continuum knows (an unknown or newer one is
    refused); an export (no store file) names none."""
    schema = manifest.get("schema_version")
    sqlite = manifest.get("kind") == "sqlite"
    if schema is None and not sqlite:
        return
    if type(schema) is not int or schema < 1:
        raise UsageError(
            f"backup {as_typed(str(path))} names no store schema version this "
            f"continuum understands ({schema!r}); nothing was restored",
            code="usage.backup_schema_unknown",
            hint="use a backup written by `continuum backup`, or the continuum that wrote it",
            file=str(path),
        )
    if schema > SCHEMA_VERSION:
        raise UsageError(
            f"backup {as_typed(str(path))} holds a store of schema version "
            f"{schema}, newer than this continuum knows ({SCHEMA_VERSION}); "
            "nothing was restored",
            code="store.schema_too_new",
            hint="upgrade continuum, then verify or restore it again",
            file=str(path),
            schema_version=schema,
        )


def check_manifest(path: Path, body: bytes) -> dict[str, Any]:
    try:
        manifest = parse_json_bounded(body.decode("utf-8"))
    except TooDeep as e:
        raise backup_refused(path, f"the manifest holds {e}", "manifest", offset=e.offset) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise backup_refused(path, "the manifest is not JSON", "manifest") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise not_a_backup(path, "its manifest is not a backup manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise UsageError(
            f"backup format version {manifest.get('version')!r} is not supported "
            f"(this continuum reads {FORMAT_VERSION})",
            code="usage.not_a_backup",
            hint="upgrade continuum",
        )
    try:
        sealed = seal_manifest(manifest)["manifest_digest"]
    except ContinuumError as e:
        raise backup_refused(path, "the manifest cannot be digested", "manifest") from e
    if sealed != manifest.get("manifest_digest"):
        raise backup_refused(path, "the manifest does not match its manifest_digest", "manifest")
    _check_schema(path, manifest)
    data, runs = manifest.get("data"), manifest.get("runs")
    if (
        manifest.get("kind") not in DATA_NAMES
        or not isinstance(data, dict)
        or not isinstance(runs, dict)
        or data.get("name") != DATA_NAMES[manifest["kind"]]
        or type(data.get("bytes")) is not int
        or not isinstance(data.get("sha256"), str)
    ):
        raise backup_refused(path, "the manifest lacks its kind, runs or data fields", "manifest")
    return manifest
