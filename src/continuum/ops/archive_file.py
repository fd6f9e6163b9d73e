"""The archive file format (``continuum archive``): written once, read back and checked.

Canonical JSON, one document per line::

    {"kind":"header","format":"continuum-archive","version":1,"run_id":...,
     "from_sequence":A,"through_sequence":B,"prev_hash":...,"through_hash":...,...}
    {"kind":"event","event":{...}}            events A..B exactly as sealed
    {"kind":"checkpoint","checkpoint":{...}}  checkpoints sealed by those events
    {"kind":"end","events":N,"checkpoints":K,"digest":SHA-256 of every line before it}

``write_archive`` writes one from a store (a new private file, whole or not at all);
``ArchiveFile`` reads one in a single streaming pass, checking every line: the digest,
each event's hash, link and sequence from the header's ``prev_hash``, the checkpoints
against their sealing events, the counts and the last hash the header promises. A
problem is an ``IntegrityError`` by kind: ``integrity.archive_truncated`` (cut short),
``integrity.archive_tampered`` (changed), ``integrity.archive_mismatch`` (not the file
asked for: ``archive.py`` checks that). Reading is bounded (``bounded.py``): a line longer
than ``MAX_LINE_BYTES`` or JSON nested deeper than ``MAX_JSON_DEPTH`` is refused as
tampered, naming the line and position, before it could exhaust memory or the stack.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import continuum.ops.bounded as bounded
from continuum.errors import IntegrityError, UsageError
from continuum.eventlog.canonical import canonical_json, canonical_json_parsed
from continuum.eventlog.chain import ChainVerifier
from continuum.eventlog.events import EventType, RawEvent
from continuum.ops.bounded import LineTooLong, TooDeep, parse_json_bounded, read_lines
from continuum.recovery.verification import state_digest
from continuum.safe_files import written_whole
from continuum.store import CheckpointRow, Storage
from continuum.store.base import format_timestamp
from continuum.types import Origin
from continuum.untrusted import as_typed

FORMAT = "continuum-archive"
FORMAT_VERSION = 1
READ_BATCH = 20_000  # events read from the store per query while writing an archive

Progress = Callable[[int, int], None]  # (done, total)


# -- errors --------------------------------------------------------------------------------


def archive_error(path: Path, why: str, kind: str, **fields: Any) -> IntegrityError:
    hints = {
        "truncated": "the file was cut short (an interrupted copy?): use a complete copy",
        "tampered": "the file is not the one that was archived: use an unchanged copy",
        "mismatch": "pass the archive files of this run, every one, from event 1 on",
    }
    return IntegrityError(
        f"archive {as_typed(str(path))} is refused: {why}",
        code=f"integrity.archive_{kind}",
        hint=hints[kind],
        file=str(path),
        **fields,
    )


def _not_an_archive(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{as_typed(str(path))} is not a continuum archive: {why}",
        code="usage.not_an_archive",
        hint="pass a file written by `continuum archive`",
    )


# -- reading an archive file ----------------------------------------------------------------


@dataclass
class ArchiveFile:
    """One archive file, read in one streaming pass (``events`` checks as it yields)."""

    path: Path
    header: dict[str, Any]
    run_id: str = ""
    from_sequence: int = 0
    through: int = 0
    prev_hash: str | None = None
    through_hash: str = ""
    sha256: str = ""  # of the whole file, known once ``events`` was read to the end
    events_read: int = 0
    checkpoints: list[CheckpointRow] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path) -> ArchiveFile:
        """Read and check the header only."""
        try:
            with open(path, "rb") as f:
                first = f.readline(bounded.MAX_LINE_BYTES + 1)
        except OSError as e:
            raise UsageError(
                f"cannot read {as_typed(str(path))}: {e.strerror}",
                code="usage.bad_path",
                hint="check the path",
            ) from e
        if not first:
            raise archive_error(path, "the file is empty", "truncated")
        if len(first) > bounded.MAX_LINE_BYTES:
            raise archive_error(
                path,
                f"its first line is longer than {bounded.MAX_LINE_BYTES:,} bytes",
                "tampered",
                line=1,
                offset=0,
            )
        if not first.endswith(b"\n"):
            raise archive_error(path, "the file ends inside its first line", "truncated")
        try:
            header = parse_json_bounded(first.decode("utf-8"), line=1)
        except TooDeep as e:
            raise archive_error(path, f"its header holds {e}", "tampered", line=1) from e
        except (ValueError, UnicodeDecodeError) as e:
            raise _not_an_archive(path, "its first line is not JSON") from e
        if (
            not isinstance(header, dict)
            or header.get("kind") != "header"
            or header.get("format") != FORMAT
        ):
            raise _not_an_archive(path, "no archive header")
        if header.get("version") != FORMAT_VERSION:
            raise UsageError(
                f"archive format version {header.get('version')!r} is not "
                f"supported (this continuum reads {FORMAT_VERSION})",
                code="usage.not_an_archive",
                hint="upgrade continuum",
            )
        a = cls(path=path, header=header)
        try:
            a.run_id = _str(header["run_id"])
            a.from_sequence, a.through = (
                _int(header["from_sequence"]),
                _int(header["through_sequence"]),
            )
            a.prev_hash = None if header["prev_hash"] is None else _str(header["prev_hash"])
            a.through_hash = _str(header["through_hash"])
        except (KeyError, TypeError) as e:
            raise archive_error(path, f"its header is malformed ({e})", "tampered") from e
        if not 1 <= a.from_sequence <= a.through or (a.from_sequence == 1) != (a.prev_hash is None):
            raise archive_error(path, "its header names an impossible range", "tampered")
        return a

    def events(self) -> Iterator[RawEvent]:
        """Every archived event in order, each checked as it is read (sequence, link,
        hash, run); at the end the line digest, the counts, the checkpoints and the last
        hash. Raises ``IntegrityError`` (``integrity.archive_*``) on the first problem."""
        path = self.path
        whole, body = hashlib.sha256(), hashlib.sha256()
        verifier = ChainVerifier(
            self.run_id, after=self.from_sequence - 1, prev_hash=self.prev_hash
        )
        sealed: dict[int, dict[str, Any]] = {}  # checkpointed events: sequence -> payload
        end: dict[str, Any] | None = None
        self.checkpoints = []
        with open(path, "rb") as f:
            for number, line in enumerate(_lines(f, path), start=1):
                whole.update(line)
                if end is not None:
                    raise archive_error(
                        path, f"line {number} comes after the end record", "tampered", line=number
                    )
                if not line.endswith(b"\n"):
                    raise archive_error(
                        path, f"the file ends inside line {number}", "truncated", line=number
                    )
                record = _record(path, line, number)
                kind = record.get("kind")
                if number == 1:
                    body.update(line)
                    continue  # the header, read by ``open``
                if kind == "end":
                    end = record
                    if record.get("digest") != body.hexdigest():
                        raise archive_error(
                            path, "its lines do not match the digest in its end record", "tampered"
                        )
                    continue
                body.update(line)
                if kind == "event":
                    raw = _raw_event(path, record.get("event"), number)
                    try:  # the hash over the payload's canonical text (as stores hash it)
                        payload_text = canonical_json_parsed(raw.payload)
                    except ValueError as e:
                        raise archive_error(
                            path,
                            f"line {number} holds a number JSON cannot",
                            "tampered",
                            line=number,
                        ) from e
                    violation = verifier.feed(raw, payload_text)
                    if violation is not None:
                        raise archive_error(
                            path,
                            f"event {violation.sequence} does not verify "
                            f"({violation.kind}: {violation.detail})",
                            "tampered",
                            sequence=violation.sequence,
                            damage=str(violation.kind),
                        )
                    if raw.sequence > self.through:
                        raise archive_error(
                            path,
                            f"event {raw.sequence} is past the header's "
                            f"range (through {self.through})",
                            "tampered",
                        )
                    if raw.type == EventType.CHECKPOINTED:
                        sealed[raw.sequence] = raw.payload
                    self.events_read += 1
                    yield raw
                elif kind == "checkpoint":
                    self.checkpoints.append(_checkpoint(path, record, number, sealed, self.run_id))
                else:
                    raise archive_error(
                        path, f"line {number} has unexpected kind {kind!r}", "tampered", line=number
                    )
        if end is None:
            raise archive_error(
                path, "the end record is missing (the file was cut short)", "truncated"
            )
        if (end.get("events"), end.get("checkpoints")) != (self.events_read, len(self.checkpoints)):
            raise archive_error(
                path,
                f"the end record counts {end.get('events')} events and "
                f"{end.get('checkpoints')} checkpoints; the file holds "
                f"{self.events_read} and {len(self.checkpoints)}",
                "tampered",
            )
        if (
            verifier.expected_sequence - 1 != self.through
            or verifier.prev_hash != self.through_hash
        ):
            raise archive_error(
                path,
                f"its events end at {verifier.expected_sequence - 1}, not "
                f"at the header's {self.through} with its hash",
                "tampered",
            )
        self.sha256 = whole.hexdigest()

    def scan(self) -> ArchiveFile:
        """Read the whole file, checking everything (``events``), keeping nothing."""
        for _ in self.events():
            pass
        return self


def _lines(f: BinaryIO, path: Path) -> Iterator[bytes]:
    """Lines of a file of any size, the last one as it is (maybe without its newline),
    none longer than ``MAX_LINE_BYTES`` (at most that much of one is ever read)."""
    try:
        yield from read_lines(f)
    except LineTooLong as e:
        raise archive_error(
            path, f"{e}: no archive line is that long", "tampered", line=e.line, offset=e.offset
        ) from e


def _record(path: Path, line: bytes, number: int) -> dict[str, Any]:
    try:
        record = parse_json_bounded(line.decode("utf-8"), line=number)
    except TooDeep as e:
        raise archive_error(
            path, f"line {number} holds {e}", "tampered", line=number, offset=e.offset
        ) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise archive_error(path, f"line {number} is not JSON", "tampered", line=number) from e
    if not isinstance(record, dict):
        raise archive_error(path, f"line {number} is not a record", "tampered", line=number)
    return record


_ORIGINS = {o.value: o for o in Origin}


def _raw_event(path: Path, data: Any, number: int) -> RawEvent:
    try:
        if not isinstance(data, dict) or set(data) != set(RawEvent._fields):
            raise TypeError("not an event")
        payload, source = data["payload"], _ORIGINS[data["source"]]
        seq = data["sequence"]
        if not isinstance(payload, dict) or type(seq) is not int:
            raise TypeError("bad payload or sequence")
        texts = [data[k] for k in ("event_id", "run_id", "type", "timestamp", "hash")]
        if not all(isinstance(t, str) for t in texts) or not all(
            v is None or isinstance(v, str) for v in (data["causer_event_id"], data["prev_hash"])
        ):
            raise TypeError("a text field holds something else")
    except (KeyError, TypeError) as e:
        raise archive_error(
            path, f"line {number} is not a valid event ({e})", "tampered", line=number
        ) from e
    return RawEvent(
        data["event_id"],
        data["run_id"],
        seq,
        data["type"],
        data["timestamp"],
        payload,
        data["causer_event_id"],
        source,
        data["prev_hash"],
        data["hash"],
    )


def _checkpoint(
    path: Path, record: dict[str, Any], number: int, sealed: dict[int, dict[str, Any]], run_id: str
) -> CheckpointRow:
    try:
        cp = CheckpointRow.model_validate(record["checkpoint"])
    except (KeyError, ValueError) as e:
        raise archive_error(
            path, f"line {number} is not a valid checkpoint", "tampered", line=number
        ) from e
    payload = sealed.get(cp.event_sequence, {})
    where = bounded.depth_over(cp.state_json, bounded.MAX_JSON_DEPTH)
    if where is not None:
        raise archive_error(
            path,
            f"line {number} holds a checkpoint state nested more than "
            f"{bounded.MAX_JSON_DEPTH} levels deep (character {where} of the state)",
            "tampered",
            line=number,
        )
    if (
        cp.run_id != run_id
        or state_digest(cp) != cp.state_hash
        or payload.get("state_hash") != cp.state_hash
        or payload.get("through_sequence") != cp.sequence
    ):
        raise archive_error(
            path,
            f"checkpoint {cp.sequence} does not match its hash or its sealing event",
            "tampered",
            sequence=cp.event_sequence,
        )
    return cp


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError("expected a whole number")
    return v


# -- writing an archive ----------------------------------------------------------------------


def _event_line(e: RawEvent) -> bytes:
    # Every value here was read from the store as JSON (or is a checked column): the key
    # checks of ``canonical_json`` cannot fail, and cost more than the encoding.
    return (
        canonical_json_parsed(
            {
                "kind": "event",
                "event": {
                    "event_id": e.event_id,
                    "run_id": e.run_id,
                    "sequence": e.sequence,
                    "type": e.type,
                    "timestamp": e.timestamp,
                    "payload": e.payload,
                    "causer_event_id": e.causer_event_id,
                    "source": e.source.value,
                    "prev_hash": e.prev_hash,
                    "hash": e.hash,
                },
            }
        )
        + "\n"
    ).encode()


def write_archive(
    store: Storage,
    run_id: str,
    dest: Path,
    *,
    start: int,
    prev: str | None,
    through: int,
    through_hash: str,
    progress: Progress | None,
) -> tuple[int, int]:
    """Write events start+1..through and the checkpoints they sealed; (events, checkpoints)."""
    header = (
        canonical_json(
            {
                "kind": "header",
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "run_id": run_id,
                "from_sequence": start + 1,
                "through_sequence": through,
                "prev_hash": prev,
                "through_hash": through_hash,
                "source": store.url,
                "created_at": format_timestamp(datetime.now(UTC)),
            }
        )
        + "\n"
    )
    body = hashlib.sha256()
    count = 0
    with written_whole(dest, "archive") as (f, _):

        def put(data: bytes) -> None:
            f.write(data)
            body.update(data)

        put(header.encode())
        after, link = start, prev
        while after < through:
            upto = min(after + READ_BATCH, through)
            for raw in store.iter_raw(run_id, after, prev_hash=link, upto=upto):
                put(_event_line(raw))
                count += 1
                link = raw.hash
            if count != upto - start:
                raise IntegrityError(
                    f"run {run_id!r} ended at {start + count} while it was "
                    f"archived through {through}",
                    code="integrity.truncated",
                    hint=f"run `continuum verify {run_id}`; nothing changed",
                )
            after = upto
            if progress is not None:
                progress(count, through - start)
        moved = sorted(
            (cp for cp in store.list_checkpoints(run_id) if cp.event_sequence <= through),
            key=lambda cp: cp.sequence,
        )
        for cp in moved:
            put(
                (
                    canonical_json({"kind": "checkpoint", "checkpoint": cp.model_dump(mode="json")})
                    + "\n"
                ).encode()
            )
        f.write(
            (
                canonical_json(
                    {
                        "kind": "end",
                        "events": count,
                        "checkpoints": len(moved),
                        "digest": body.hexdigest(),
                    }
                )
                + "\n"
            ).encode()
        )
    return count, len(moved)
