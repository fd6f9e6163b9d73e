"""Issue 30 item 10: every reader of an export, an archive or a backup is bounded.

JSON nested 100,000 deep in a backup manifest, its data, an archive line or an export line
ended in ``RecursionError [internal] ... this is a bug`` (exit 1); a backup whose tar header
claims 8 GiB ended in ``MemoryError``; a symlinked data member was reported as a name
mismatch. Now each is refused with the integrity exit 3, naming the position. No test
writes a large file: a header claims the size (and the process gets 1 GiB of address
space), or a bound is lowered.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from continuum.cli.main import run as cli_run
from continuum.ops.transfer import export_runs
from continuum.runtime.facade import Continuum
from continuum.store import SQLiteStorage
from tests.contract.conftest import StoreFactory
from tests.contract.test_backup import _members, _repack, fill

DEEP = "[" * 100_000 + "]" * 100_000
BIG = 64 << 20  # bounded.MAX_LINE_BYTES
RUN = "run_one"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli_run([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def rt(tmp_path: Path) -> Continuum:
    rt = Continuum(SQLiteStorage(tmp_path / "live.db"))
    fill(rt)
    return rt


def _put(path: Path, manifest_body: bytes, data: bytes, name: str) -> None:
    path.unlink()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, body in (("manifest.json", manifest_body), (name, data)):
            info = tarfile.TarInfo(member)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))


def test_a_manifest_nested_100000_deep_is_refused_with_exit_3(
    rt: Continuum, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "b.backup"
    rt.backup(dest)
    _, data, name = _members(dest)
    _put(dest, b'{"format":"continuum-backup","x":' + DEEP.encode() + b"}", data, name)

    code, out = cli(capsys, "verify-backup", str(dest))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.backup_manifest"
    assert "character" in out["error"]["message"]  # where it went too deep


def test_a_data_line_nested_100000_deep_is_refused_with_exit_3(
    rt: Continuum, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "b.backup"
    rt.backup(dest, run_ids=[RUN])  # the export form: JSONL data
    manifest, data, name = _members(dest)
    lines = data.splitlines(keepends=True)
    lines[3] = b'{"kind":"event","event":' + DEEP.encode() + b"}\n"
    forged = b"".join(lines)
    manifest["data"].update(sha256=hashlib.sha256(forged).hexdigest(), bytes=len(forged))
    from continuum.ops.backup import seal_manifest

    _repack(dest, seal_manifest(manifest), forged, name)

    code, out = cli(capsys, "verify-backup", str(dest))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.backup_data"
    assert out["error"]["details"]["line"] == 4


def test_an_archive_line_nested_100000_deep_is_refused_with_exit_3(
    rt: Continuum, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "old.jsonl"
    rt.archive(RUN, before=4, to=archive)
    lines = archive.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"kind":"event","event":{"payload":' + DEEP.encode() + b"}}\n"
    archive.write_bytes(b"".join(lines))
    db = str(rt.store.url)

    code, out = cli(capsys, "--db", db, "verify", RUN, "--archive", str(archive))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.archive_tampered"
    assert out["error"]["details"]["line"] == 3


def _exported(rt: Continuum) -> list[str]:
    out = io.StringIO()
    export_runs(rt.store, out, [RUN])
    return out.getvalue().splitlines(keepends=True)


def test_an_export_line_nested_100000_deep_is_refused_with_exit_3_and_nothing_written(
    rt: Continuum,
    tmp_path: Path,
    store_factory: StoreFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = _exported(rt)
    lines[2] = '{"kind":"event","event":' + DEEP + "}\n"
    path = tmp_path / "deep.jsonl"
    path.write_text("".join(lines), encoding="utf-8")

    code, out = cli(capsys, "--db", store_factory.url, "import", str(path))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.import_refused"
    assert out["error"]["details"]["line"] == 3
    assert store_factory.open().list_runs() == []


def test_a_checkpoint_state_nested_100000_deep_in_an_export_is_refused_with_exit_3(
    rt: Continuum, tmp_path: Path, store_factory: StoreFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _exported(rt)
    at = next(i for i, line in enumerate(lines) if '"kind":"checkpoint"' in line)
    record = json.loads(lines[at])
    record["checkpoint"]["state_json"] = DEEP
    lines[at] = json.dumps(record) + "\n"
    path = tmp_path / "deep-state.jsonl"
    path.write_text("".join(lines), encoding="utf-8")

    code, out = cli(capsys, "--db", store_factory.url, "import", str(path))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.import_refused"
    assert store_factory.open().list_runs() == []


# -- sizes ---------------------------------------------------------------------------------------


class Endless(io.RawIOBase):
    """A stream of bytes without a newline that never ends (a 3 GiB line, and more)."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        buffer[:] = b"x" * len(buffer)
        self.given += len(buffer)
        return len(buffer)


def test_a_line_without_end_is_refused_after_the_bound_never_read_whole() -> None:
    import continuum.ops.bounded as bounded
    from continuum.ops.bounded import LineTooLong, read_lines

    raw = Endless()
    with pytest.raises(LineTooLong) as e:
        list(read_lines(io.BufferedReader(raw)))
    assert (e.value.line, e.value.offset) == (1, 0)
    assert raw.given <= bounded.MAX_LINE_BYTES + 2 * io.DEFAULT_BUFFER_SIZE


@pytest.fixture
def small_lines(monkeypatch: pytest.MonkeyPatch) -> int:
    # Written under the usual bound (BIG), read under this one.
    monkeypatch.setattr("continuum.ops.bounded.MAX_LINE_BYTES", 4096, raising=False)
    return 4096


def test_an_archive_line_over_the_bound_is_refused_naming_it(
    rt: Continuum, tmp_path: Path, small_lines: int
) -> None:
    rt.append(RUN, "finding_added", {"finding_id": "f", "text": "x" * (2 * small_lines)})
    rt.append(RUN, "progress_recorded", {"completed": 6})
    archive = tmp_path / "old.jsonl"
    with pytest.MonkeyPatch.context() as m:
        m.setattr("continuum.ops.bounded.MAX_LINE_BYTES", BIG, raising=False)
        rt.archive(RUN, before=rt.store.get_run(RUN).head_sequence, to=archive)
    from continuum.errors import IntegrityError

    with pytest.raises(IntegrityError) as e:
        rt.verify(RUN, archives=[str(archive)])
    assert e.value.code == "integrity.archive_tampered"
    assert e.value.fields["line"] > 1 and e.value.fields["offset"] > 0


def test_an_export_and_a_backup_data_line_over_the_bound_are_refused_naming_them(
    rt: Continuum, tmp_path: Path, small_lines: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rt.append(RUN, "finding_added", {"finding_id": "f", "text": "x" * (2 * small_lines)})
    path = tmp_path / "long.jsonl"
    with pytest.MonkeyPatch.context() as m:
        m.setattr("continuum.ops.bounded.MAX_LINE_BYTES", BIG, raising=False)
        path.write_text("".join(_exported(rt)), encoding="utf-8")
        rt.backup(tmp_path / "b.backup", run_ids=[RUN])

    code, out = cli(capsys, "--db", str(tmp_path / "new.db"), "import", str(path))
    assert (code, out["error"]["code"]) == (3, "integrity.import_refused")
    assert "line" in out["error"]["details"]
    code, out = cli(capsys, "verify-backup", str(tmp_path / "b.backup"))
    assert (code, out["error"]["code"]) == (3, "integrity.backup_data")
    assert out["error"]["details"]["offset"] > 0


def _claiming(path: Path, where: str) -> None:
    """A backup whose tar structure claims 8 GiB (the file stays a few KiB)."""
    manifest, data, name = _members(path)
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    huge = (8 << 30) - 1
    out = bytearray()

    def pax(size: int) -> None:
        info = tarfile.TarInfo("././@PaxHeader")
        info.type, info.size = tarfile.XHDTYPE, size
        out.extend(info.tobuf(format=tarfile.GNU_FORMAT))

    def member(member: str, content: bytes, claimed: int | None = None) -> None:
        info = tarfile.TarInfo(member)
        info.size = claimed if claimed is not None else len(content)
        out.extend(info.tobuf(format=tarfile.GNU_FORMAT))
        out.extend(content + b"\0" * (-len(content) % 512))

    if where == "pax before the manifest":
        pax(huge)
        out.extend(b"0" * 4096)
    else:
        member("manifest.json", body, huge if where == "the manifest" else None)
        if where == "pax before the data":
            pax(huge)
            out.extend(b"0" * 4096)
        member(name, data)
    out.extend(b"\0" * 1024)
    path.write_bytes(bytes(out))


def _one_gib() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("the manifest", "integrity.backup_manifest"),
        ("pax before the manifest", "integrity.backup_manifest"),
        ("pax before the data", "integrity.backup_data"),
    ],
)
def test_a_tar_header_claiming_8_gib_is_refused_not_allocated(
    rt: Continuum, tmp_path: Path, where: str, code: str
) -> None:
    dest = tmp_path / "b.backup"
    rt.backup(dest)
    _claiming(dest, where)
    assert dest.stat().st_size < 1 << 20

    for command in (
        ["verify-backup", str(dest)],
        ["--db", str(tmp_path / "r.db"), "restore", str(dest)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "continuum", *command, "--json"],
            capture_output=True,
            text=True,
            preexec_fn=_one_gib,  # an 8 GiB allocation fails here, as on a small machine
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            timeout=120,
        )
        out = json.loads(done.stdout)
        assert done.returncode == 3, done.stdout + done.stderr
        assert out["error"]["code"] == code
        assert "offset" in out["error"]["details"]
    assert not (tmp_path / "r.db").exists()


def test_a_symlinked_data_member_is_refused_as_not_a_regular_file(
    rt: Continuum, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "b.backup"
    rt.backup(dest)
    manifest, data, name = _members(dest)
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    dest.unlink()
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo(name)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)

    code, out = cli(capsys, "verify-backup", str(dest))

    assert code == 3, out
    assert out["error"]["code"] == "integrity.backup_data"
    assert "not a regular file" in out["error"]["message"]
