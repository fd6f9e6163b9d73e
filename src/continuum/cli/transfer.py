"""Moving runs between stores: export and import (any backend to any backend)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import click

from continuum.cli.common import common, private_file, runtime
from continuum.cli.output import Settings, emit
from continuum.errors import UsageError
from continuum.transfer import export_runs, import_checked, read_export
from continuum.untrusted import quoted


@click.command("export")
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("--all", "all_runs", is_flag=True, help="Export every run in the store.")
@click.option("--output", "-o", required=True, metavar="FILE",
              help="The JSONL file to write (refused if it exists, unless --force).")
@click.option("--force", is_flag=True, help="Replace an existing FILE.")
@common
def export_cmd(s: Settings, run_ids: tuple[str, ...], all_runs: bool, output: str,
               force: bool) -> None:
    """Write runs (events exactly as sealed, checkpoints) to a JSONL file for `import`.

    Every event is verified as it is read; a damaged run is not exported (exit 3). The
    file appears only once complete.
    """
    if bool(run_ids) == all_runs:
        raise UsageError("give one or more RUNs or --all (not both)", code="usage.invalid",
                         hint="continuum export RUN -o run.jsonl, or continuum export --all -o store.jsonl")
    target = Path(output)
    if target.exists() and not force:
        raise UsageError(f"{output!r} exists", code="usage.file_exists",
                         hint="choose another file, or pass --force to replace it")
    rt = runtime(s)
    partial = target.with_name(f".{target.name}.partial")
    try:
        with private_file(partial) as f:
            summary = export_runs(rt.store, f, list(run_ids) if run_ids else None)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        rt.close()
    emit(s, {"file": str(target), **summary.model_dump(mode="json")},
         [f"exported {len(summary.runs)} run(s), {summary.events} events, "
          f"{summary.checkpoints} checkpoint(s) to {target}"]
         + [f"  {quoted(run)}  head {head}" for run, head in summary.heads.items()])


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@common
def import_cmd(s: Settings, file: str) -> None:
    """Import a file written by `export` into this store, chains preserved exactly.

    Everything is checked before anything is written; the import is refused as a whole
    (exit 3) if a chain or checkpoint does not verify, and (exit 1) if a run already
    exists here.
    """
    try:
        with open(file, encoding="utf-8") as f:
            bundles = read_export(f)  # all checked before the store is even opened
    except UnicodeDecodeError as e:
        raise UsageError(f"{file!r} is not UTF-8 text", code="usage.bad_export",
                         hint="pass a file written by `continuum export`") from e
    rt = runtime(s, create=True)
    try:
        summary = import_checked(rt.store, bundles)
    finally:
        rt.close()
    emit(s, {"file": file, **summary.model_dump(mode="json")},
         [f"imported {len(summary.runs)} run(s), {summary.events} events, "
          f"{summary.checkpoints} checkpoint(s) from {file}; every chain verified"]
         + [f"  {quoted(run)}  head {head}" for run, head in summary.heads.items()])


COMMANDS = [export_cmd, import_cmd]
