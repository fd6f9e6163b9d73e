"""Long-lived stores: backup, verify-backup, restore, archive, keygen, migrate.

Thin commands over ``continuum.ops.backup``, the facade (``Continuum.backup``,
``Continuum.archive``), ``continuum.ops.signing`` and ``continuum.store.upgrade``. Long work
reports progress on stderr (stdout keeps the one result, or the one JSON document).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from continuum.cli.common import common, common_without_db, require_person, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.errors import UsageError
from continuum.store import resolve_url
from continuum.untrusted import as_typed, quoted


def progress_on_stderr(command: str) -> Callable[[str, int, int], None]:
    """Progress lines on stderr, at most one a second per stage (and the last one)."""
    last: dict[str, float] = {}

    def report(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last.get(stage, 0.0) < 1.0:
            return
        last[stage] = now
        share = f"{100 * done // total}% " if total else ""
        sys.stderr.write(f"{command}: {stage} {share}({done}/{total})\n")
        sys.stderr.flush()

    return report


def _runs_lines(runs: dict[str, dict[str, Any]]) -> list[Line]:
    out: list[Line] = []
    for run_id, r in runs.items():
        archived = f", events 1..{r['archived_through']} archived" if r["archived_through"] else ""
        out.append(
            f"  {quoted(run_id)}  head {r['head_sequence']}:{r['head_hash']}  "
            f"({r['events']} events{archived}, {r['actions']} actions)"
        )
    return out


@click.command("backup")
@click.argument("dest", metavar="DEST")
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="RUN",
    help="Back up only this run (repeat for more; the copy is then in the export format).",
)
@click.option(
    "--sign",
    "sign",
    metavar="KEYFILE",
    default=None,
    help="Sign the manifest with this private key (`continuum keygen`): verify-backup and "
    "restore --public-key then know the backup is the one you took.",
)
@common
def backup_cmd(s: Settings, dest: str, run_ids: tuple[str, ...], sign: str | None) -> None:
    """Write a consistent backup of the store to the new file DEST while agents keep writing.

    One snapshot of the whole store (SQLite: the online backup API inside one read
    transaction; PostgreSQL: one REPEATABLE READ transaction), verified, with a manifest
    (each run's head, counts, digests; with --sign, a signature over them). DEST is
    created 0600 and appears only once complete; an existing DEST is refused. Check it with
    `continuum verify-backup DEST`.
    """
    rt = runtime(s)
    m = rt.backup(
        dest, run_ids=list(run_ids) or None, progress=progress_on_stderr("backup"), sign=sign
    )
    t = m["totals"]
    rate = m["data"]["bytes"] / (1 << 20) / m["seconds"] if m["seconds"] else 0.0
    first: Line = [
        Styled("ok", fg="green"),
        f"  backup {as_typed(m['file'])}: {t['runs']} "
        f"run(s), {t['events']} events, {m['data']['bytes']} bytes ({m['kind']}) in "
        f"{m['seconds']:.2f} s ({rate:.1f} MB/s); manifest {m['manifest_digest'][:16]}"
        + (f", signed with key {m['signed_by']}" if m.get("signed_by") else ", not signed"),
    ]
    emit(s, m, [first, *_runs_lines(m["runs"])])


PUBLIC_KEY_HELP = (
    "The public key of whoever signed the backup (`backup --sign`): refused (exit 3, "
    "integrity.backup_signature) unless its manifest is signed by that key."
)


def _signature_line(r: dict[str, Any]) -> Line:
    if r.get("trusted"):
        return f"  signed by key {r['signed_by']}: verified with the public key you passed"
    why = (
        f"signed by key {r['signed_by']}, not checked (pass --public-key)"
        if r.get("signed_by")
        else "not signed"
    )
    return [
        Styled("  unsigned" if not r.get("signed_by") else "  not checked", fg="yellow"),
        f": the backup is {why}; its manifest digest is unkeyed, so the checks above say "
        "it is consistent, not that it is the backup you took",
    ]


@click.command("verify-backup")
@click.argument("file", metavar="FILE")
@click.option("--public-key", "public_key", metavar="PUBFILE", default=None, help=PUBLIC_KEY_HELP)
@common_without_db
def verify_backup_cmd(s: Settings, file: str, public_key: str | None) -> None:
    """Check a backup file on its own (no store needed): structure, manifest, data digest,
    the store schema of a SQLite copy, every run in it verified and its outbox against its
    log. Exit 3 if it is cut short (integrity.backup_truncated), its manifest was edited
    (integrity.backup_manifest), its data was (integrity.backup_data), its store schema
    was (integrity.backup_schema), or, with --public-key, it is not signed by that key
    (integrity.backup_signature)."""
    from continuum.ops.backup import verify_backup

    r = verify_backup(
        Path(file),
        progress=progress_on_stderr("verify-backup"),
        public_key=Path(public_key) if public_key is not None else None,
    )
    t = r["totals"]
    first: Line = [
        Styled("ok", fg="green"),
        f"  backup {as_typed(file)} ({r['kind']}, taken "
        f"{r['created_at']}): {t['runs']} run(s), {t['events']} events, every chain "
        "verified",
    ]
    emit(s, r, [first, *_runs_lines(r["runs"]), _signature_line(r)])


@click.command("restore")
@click.argument("file", metavar="FILE")
@click.option("--public-key", "public_key", metavar="PUBFILE", default=None, help=PUBLIC_KEY_HELP)
@common
def restore_cmd(s: Settings, file: str, public_key: str | None) -> None:
    """Restore a backup into a NEW store (--db: a SQLite path that does not exist yet, or a
    PostgreSQL database holding no runs). The backup is checked first (as verify-backup
    does), every chain is verified on arrival, and a SQLite store appears only once
    complete."""
    from continuum.ops.backup import restore_backup

    r = restore_backup(
        Path(file),
        resolve_url(s.db),
        progress=progress_on_stderr("restore"),
        public_key=Path(public_key) if public_key is not None else None,
    )
    t = r["totals"]
    first: Line = [
        Styled("ok", fg="green"),
        f"  restored {t['runs']} run(s), {t['events']} "
        f"events into {as_typed(r['store'])}; every chain verified",
    ]
    emit(s, r, [first, *_runs_lines(r["runs"]), _signature_line(r)])


@click.command("archive")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--before",
    type=int,
    required=True,
    metavar="SEQ",
    help="Archive the events before this sequence.",
)
@click.option("--to", "to", required=True, metavar="FILE", help="The new archive file.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask: for a person's own script. Without it, archive needs a "
    "terminal (it removes history from the live log).",
)
@common
def archive_cmd(s: Settings, run_id: str, before: int, to: str, yes: bool) -> None:
    """Move RUN's events before SEQ into the new file FILE, exactly as sealed.

    The run is verified first; the file is written, fsynced and read back; then, in one
    transaction, a sealed history_archived marker (the archived head hash and the file's
    SHA-256) and a checkpoint are appended and the archived events removed from the live
    log. Settled actions stay answerable. `continuum verify RUN --archive FILE` checks the
    whole history.
    """
    # History leaves the store: a person decides that, as for prune (an agent with a
    # shell could otherwise archive a run and delete the file).
    require_person(
        yes, "archiving a run's history", f"continuum archive {run_id} --before {before} --to FILE"
    )
    rt = runtime(s)
    report = progress_on_stderr("archive")
    r = rt.archive(
        run_id, before=before, to=to, progress=lambda done, total: report("write", done, total)
    )
    emit(
        s,
        r.model_dump(mode="json"),
        [
            [
                Styled("ok", fg="green"),
                f"  archived events {r.from_sequence}..{r.through_sequence} "
                f"of {quoted(run_id)} ({r.events} events, {r.checkpoints} checkpoint(s)) to "
                f"{as_typed(r.file)}",
            ],
            f"  sha256 {r.sha256}",
            f"  marker at sequence {r.marker_sequence}, checkpoint at {r.checkpoint_sequence}; "
            f"{r.live_events} events left in the live log (the run's writers waited "
            f"{r.locked_seconds:.2f} s for the final transaction)",
        ],
    )


@click.command("keygen")
@click.argument("keyfile", metavar="KEYFILE")
@common_without_db
def keygen_cmd(s: Settings, keyfile: str) -> None:
    """Make an Ed25519 key pair for signed anchors: KEYFILE (private, mode 0600) and
    KEYFILE.pub (public, for auditors). Both must be new files."""
    from continuum.ops.signing import generate_keypair

    private = Path(keyfile)
    r = generate_keypair(private, private.with_name(private.name + ".pub"))
    emit(
        s,
        r,
        [
            f"private key {as_typed(r['private_key'])} (keep it; mode 0600)",
            f"public key  {as_typed(r['public_key'])} (give it to auditors)",
            f"key id      {r['key_id']}",
        ],
    )


@click.command("migrate")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Only say what would change (versions, statements); change nothing.",
)
@common
def migrate_cmd(s: Settings, dry_run: bool) -> None:
    """Bring the store's schema to this version (opening a store does it too, one
    transaction per version). With --dry-run: the current and target versions and every
    statement that would run, and nothing is changed."""
    from continuum.store.upgrade import describe, migration_plan

    url = resolve_url(s.db)
    plan = migration_plan(url)
    head: Line = (
        f"{plan.store}: schema {plan.current_version}, this continuum {plan.target_version}"
    )
    if plan.up_to_date:
        emit(s, {**describe(plan), "migrated": False}, [head, "up to date: nothing to do"])
        return
    if dry_run:
        lines: list[Line] = [
            head,
            "would run, one transaction per version (dry run: nothing was changed):",
        ]
        for step in plan.steps:
            lines.append(f"  to version {step.version}:")
            lines += [f"    {statement}" for statement in step.statements]
        emit(s, {**describe(plan), "migrated": False}, lines)
        return
    rt = runtime(s)
    now = rt.store.schema_version()
    if now != plan.target_version:  # pragma: no cover - opening migrates or raises
        raise UsageError("the store did not migrate", code="store.schema", hint="report this")
    emit(
        s,
        {**describe(plan), "migrated": True},
        [head, f"migrated to version {now} ({len(plan.steps)} step(s))"],
    )


COMMANDS = [backup_cmd, verify_backup_cmd, restore_cmd, archive_cmd, keygen_cmd, migrate_cmd]
