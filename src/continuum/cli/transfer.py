"""Moving runs between stores: export and import (any backend to any backend)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import click

from continuum.cli.common import common, private_file, require_person, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.errors import NotFoundError, UsageError
from continuum.ops.bounded import read_lines
from continuum.ops.migrate_original import MigrationReport, import_original
from continuum.ops.transfer import TransferSummary, export_runs, import_export, parse_export
from continuum.runtime.facade import Continuum
from continuum.store import Storage
from continuum.untrusted import as_typed, quoted


@click.command("export")
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("--all", "all_runs", is_flag=True, help="Export every run in the store.")
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="FILE",
    help="The JSONL file to write (refused if it exists, unless --force).",
)
@click.option("--force", is_flag=True, help="Replace an existing FILE.")
@click.option(
    "--sign",
    "sign",
    metavar="KEYFILE",
    default=None,
    help="Sign the file with this private key (`continuum keygen`): an import that "
    "trusts the key (--public-key) keeps what a person decided in these runs.",
)
@common
def export_cmd(
    s: Settings,
    run_ids: tuple[str, ...],
    all_runs: bool,
    output: str,
    force: bool,
    sign: str | None,
) -> None:
    """Write runs (events exactly as sealed, checkpoints) to a JSONL file for `import`.

    Every event is verified as it is read; a damaged run is not exported (exit 3). The
    file appears only once complete. Its end record holds the SHA-256 of its lines and,
    with --sign, a signature over that digest and each run's head.
    """
    if bool(run_ids) == all_runs:
        raise UsageError(
            "give one or more RUNs or --all (not both)",
            code="usage.invalid",
            hint="continuum export RUN -o run.jsonl, or continuum export --all -o store.jsonl",
        )
    target = Path(output)
    if target.exists() and not force:
        raise UsageError(
            f"{as_typed(output)} exists",
            code="usage.file_exists",
            hint="choose another file, or pass --force to replace it",
        )
    rt = runtime(s)
    partial = target.with_name(f".{target.name}.partial")
    try:
        with private_file(partial) as f:
            summary = export_runs(
                rt.store,
                f,
                list(run_ids) if run_ids else None,
                sign=Path(sign) if sign is not None else None,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        rt.close()
    emit(
        s,
        {"file": str(target), **summary.model_dump(mode="json")},
        [
            f"exported {len(summary.runs)} run(s), {summary.events} events, "
            f"{summary.checkpoints} checkpoint(s) to {target}"
            + (f"; signed with key {summary.signed_by}" if summary.signed_by else "")
        ]
        + [f"  {quoted(run)}  head {head}" for run, head in summary.heads.items()],
    )


@click.command("import")
@click.argument("file", required=False, metavar="[FILE]")
@click.option(
    "--from-original",
    "original",
    metavar="FILE.db",
    default=None,
    help="Import a store of the original project (Cyrax321/CONTINUUM) instead.",
)
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="RUN",
    help="With --from-original: only this original run (repeat for more).",
)
@click.option(
    "--as",
    "new_id",
    default=None,
    metavar="NEW_RUN",
    help="With --from-original and one --run: import it under this run id.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --from-original: verify and map everything, write nothing.",
)
@click.option(
    "--unverified",
    is_flag=True,
    help="With --from-original: also import runs that have no hash chain at all "
    "(written before the original had one), marked unverified.",
)
@click.option(
    "--public-key",
    "public_key",
    metavar="PUBFILE",
    default=None,
    help="Trust the file's signer: its signature must verify with this public key, and "
    "then what a person decided in its runs counts here (a person's decision: a terminal, "
    "or --yes).",
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="With --public-key, do not ask for a terminal: for a person's own script.",
)
@common
def import_cmd(
    s: Settings,
    file: str | None,
    original: str | None,
    run_ids: tuple[str, ...],
    new_id: str | None,
    dry_run: bool,
    unverified: bool,
    public_key: str | None,
    yes: bool,
) -> None:
    """Import a file written by `export` into this store, chains preserved exactly; or,
    with --from-original FILE.db, the runs of a store of the original project.

    Everything is checked before anything is written; the import is refused as a whole
    (exit 3) if a chain or checkpoint does not verify, and (exit 1) if a run already
    exists here. A human decision counts only if a person made it here or the file is
    signed by a key a person trusts (--public-key): otherwise each run that holds events
    of a trusted origin ends with a history_imported marker, from which on what those
    events decided counts as imported (a person must confirm the run; an imported "did
    not occur" does not allow a repeat), and the import says what it did not trust.
    From the original, each event is mapped to a continuum event or kept as an opaque
    event of its original type, with origin imported (a person must confirm before a
    resume is safe) and the whole original event in its payload.
    """
    if original is not None:
        if public_key is not None:
            raise UsageError(
                "--public-key checks a signed export; a store of the original project is "
                "not signed (its runs are imported with origin imported)",
                code="usage.invalid",
                hint="leave out --public-key",
            )
        if file is not None:
            raise UsageError(
                "give an export FILE or --from-original FILE.db, not both",
                code="usage.invalid",
                hint="continuum import --from-original ./continuum.db",
            )
        _import_original(s, original, run_ids, new_id, dry_run, unverified)
        return
    if file is None:
        raise UsageError(
            "give the export FILE to import (or --from-original FILE.db)",
            code="usage.invalid",
            hint="continuum import runs.jsonl",
        )
    if public_key is not None:
        # Trusting a signer makes the file's human decisions count here: a person's call.
        require_person(
            yes, "trusting the signer of an export", f"continuum import {file} --public-key KEY"
        )
    if run_ids or new_id is not None or dry_run or unverified:
        raise UsageError(
            "--run, --as, --dry-run and --unverified go with --from-original",
            code="usage.invalid",
            hint="an export FILE is imported whole: export only the runs you want",
        )
    if not os.path.isfile(file):
        raise UsageError(
            f"{as_typed(file)} is not a file",
            code="usage.bad_export",
            hint="pass a file written by `continuum export`",
        )
    try:
        with open(file, "rb") as f:
            # all checked before the store is even opened
            export = parse_export(read_lines(f), name=as_typed(file))
    except OSError as e:
        raise UsageError(
            f"cannot read {as_typed(file)}: {e.strerror}",
            code="usage.bad_export",
            hint="check the path and its permissions",
        ) from e
    key = Path(public_key) if public_key is not None else None
    if key is not None:
        from continuum.ops.transfer import check_signature

        check_signature(export, key)  # before the store is opened or created
    rt = runtime(s, create=True)
    try:
        summary = import_export(rt.store, export, public_key=key)
    finally:
        rt.close()
    emit(
        s,
        {"file": file, **summary.model_dump(mode="json")},
        [
            f"imported {len(summary.runs)} run(s), {summary.events} events, "
            f"{summary.checkpoints} checkpoint(s) from {file}; every chain verified"
        ]
        + [f"  {quoted(run)}  head {head}" for run, head in summary.heads.items()]
        + _trust_lines(summary),
    )


def _trust_lines(summary: TransferSummary) -> list[Line]:
    """What the import trusted, and what it did not (run by run)."""
    if summary.trusted:
        return [
            f"signed by key {summary.signed_by}, which you trusted: what a person decided "
            "in these runs counts here"
        ]
    why = (
        f"signed by key {summary.signed_by}, not checked (pass --public-key to trust it)"
        if summary.signed_by
        else "not signed"
    )
    if not summary.not_trusted:
        return [f"the file is {why}; none of its runs holds a human or deterministic decision"]
    lines: list[Line] = [
        [
            Styled("NOT TRUSTED", fg="yellow", bold=True),
            f" the file is {why}: a human decision counts only if a person made it here, "
            "so what its human and deterministic events decided counts as imported",
        ]
    ]
    for run, n in summary.not_trusted.items():
        parts = []
        if n.confirmations:
            parts.append(f"{len(n.confirmations)} confirmation(s) not counted")
        if n.needs_person:
            parts.append(
                "a person must reconcile " + ", ".join(quoted(k, limit=80) for k in n.needs_person)
            )
        if n.approvals:
            parts.append(f"{len(n.approvals)} approval decision(s) no longer stand")
        if n.review:
            parts.append("a person must confirm " + ", ".join(n.review))
        lines.append(
            f"  {quoted(run)}: marker at sequence {n.marker_sequence}"
            + (f"; {'; '.join(parts)}" if parts else "")
        )
    lines.append("a person must confirm each run before a resume is safe: `continuum confirm RUN`")
    return lines


def _import_original(
    s: Settings,
    path: str,
    run_ids: tuple[str, ...],
    new_id: str | None,
    dry_run: bool,
    unverified: bool,
) -> None:
    opened: list[Continuum] = []

    def target() -> Storage | None:
        # Opened only once the original is read, verified and mapped: a refused original
        # leaves this store untouched (not even created).
        try:
            opened.append(runtime(s, create=not dry_run))
        except NotFoundError:
            if not dry_run:
                raise
            return None  # a dry run into a store that does not exist yet: nothing is taken
        return opened[0].store

    try:
        report = import_original(
            path, target, run_ids=run_ids, new_id=new_id, dry_run=dry_run, unverified=unverified
        )
    finally:
        for rt in opened:
            rt.close()
    refused = [str(r.refused["code"]) for r in report.runs if r.refused is not None]
    code = (
        3
        if any(c.startswith("integrity.") for c in refused)
        else 1
        if refused
        else 1
        if dry_run and any(r.exists for r in report.runs)
        else 0
    )
    emit(s, report.model_dump(mode="json"), _original_lines(report), code=code)


def _original_lines(report: MigrationReport) -> list[Line]:
    t = report.totals
    verb = "would import" if report.dry_run else "imported"
    lines: list[Line] = [
        f"original store {as_typed(report.source)} ({report.format}, schema v"
        f"{report.schema_version}): {len(report.runs)} run(s) read, every hash chain verified"
        + (
            ""
            if all(r.verified for r in report.runs if r.refused is None)
            else " (except runs marked unverified: they have no chain)"
        )
    ]
    for r in report.runs:
        name = quoted(r.original_run_id) + (
            "" if r.run_id == r.original_run_id else f" as {quoted(r.run_id)}"
        )
        if r.refused is not None:
            lines.append(
                [
                    Styled("REFUSED", fg="red", bold=True),
                    f" {name}: {r.refused['message']} [{r.refused['code']}]",
                ]
            )
            continue
        state = f"original status {quoted(r.original_status)}, here {r.status}" + (
            "" if r.verified else "; UNVERIFIED (no chain in the original)"
        )
        lines.append(
            f"{name}: {r.original_events} original event(s) -> {r.events} event(s), "
            f"head {r.head or '-'}; {state}"
            + ("; EXISTS here, would be refused" if r.exists else "")
        )
        if r.mapped:
            lines.append(
                "  mapped: "
                + ", ".join(f"{m.original_type} -> {m.type} {m.events}" for m in r.mapped)
            )
        for k in r.kept:
            lines.append(
                f"  kept as {k.original_type} (opaque, counted by the fold): {k.events}; {k.why}"
            )
        if r.missing_blobs:
            lines.append(
                f"  {r.missing_blobs} offloaded payload(s) whose blob is missing: "
                "kept with the descriptor the chain covers"
            )
    lines.append(
        f"{verb} {t['runs']} run(s): {t['original_events']} original event(s), "
        f"{t['mapped']} mapped, {t['kept']} kept as opaque events; {t['events']} "
        f"event(s) with origin imported"
        + (f"; {t['refused']} run(s) refused" if t["refused"] else "")
    )
    if report.dry_run:
        lines.append("dry run: nothing was written")
    elif t["runs"]:
        lines.append(
            "a person must confirm an imported run before a resume is safe: `continuum confirm RUN`"
        )
    lines.append("not imported: " + "; ".join(report.not_imported))
    return lines


COMMANDS = [export_cmd, import_cmd]
