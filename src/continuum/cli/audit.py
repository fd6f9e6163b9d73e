"""`continuum audit` and `continuum verify-audit`: who decided what, and how, in one file.

A thin shell over ``continuum.ops.audit`` (the format, what is derived, how it verifies).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from continuum.cli.common import common, private_file, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.errors import UsageError
from continuum.gateway.pins import PINS_PATH, Pins
from continuum.ops.audit import GatewayHistory, export_audit, parse_since
from continuum.ops.audit_verify import verify_audit
from continuum.ops.bounded import read_lines
from continuum.untrusted import as_typed, quoted


@click.command("audit")
@click.argument("run_id", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Every run, and the store-wide records.")
@click.option(
    "--since",
    default=None,
    metavar="ISO_DATE",
    help="Only decisions at or after this date or date-time (UTC unless it says).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl"]),
    default="jsonl",
    help="The file's format (one JSON record per line).",
)
@click.option(
    "--out",
    "-o",
    "out",
    default=None,
    metavar="FILE",
    help="Write the file here (0600, complete or not at all); default: stdout.",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option(
    "--pins",
    "pins_path",
    default=None,
    metavar="FILE",
    help=f"With --all: the gateway pins file whose acceptances to include (default: {PINS_PATH} "
    "when it exists).",
)
@click.option(
    "--sign",
    default=None,
    metavar="KEYFILE",
    help="Sign each run's head and the file with this Ed25519 private key (`continuum keygen`).",
)
@common
def audit_cmd(
    s: Settings,
    run_id: str | None,
    all_runs: bool,
    since: str | None,
    fmt: str,
    out: str | None,
    force: bool,
    pins_path: str | None,
    sign: str | None,
) -> None:
    """Export one JSON line per human decision in RUN (or --all): what was decided, who
    (origin and what else the event records), how, what was shown, and its place in the
    chain (sequence, event hash, the event as sealed).

    Every event from the first one a decision cites up to the head is in the file, so an
    auditor recomputes each hash and follows the chain to the head; with --sign that head
    is a signed anchor and the file's digest is signed too. Check it with `continuum
    verify-audit FILE --public-key PUBFILE`. Agent text is JSON with control and bidi
    characters escaped. --all adds the store-wide records: the last confirm-token unlock
    and each `continuum gateway accept` in the gateway's pins file.
    """
    if bool(run_id) == all_runs:
        raise UsageError(
            "give a RUN or --all (not both)",
            code="usage.invalid",
            hint="continuum audit RUN --out audit.jsonl, or continuum audit --all --out audit.jsonl",
        )
    if out is None and s.json:
        raise UsageError(
            "--json prints a summary document, so the file needs --out FILE",
            code="usage.invalid",
            hint="continuum --json audit RUN --out audit.jsonl",
        )
    if pins_path is not None and not all_runs:
        raise UsageError(
            "--pins goes with --all (gateway acceptances are store-wide records)",
            code="usage.invalid",
            hint="continuum audit --all --pins FILE --out audit.jsonl",
        )
    moment = parse_since(since)
    key = Path(sign) if sign is not None else None
    gateway = _gateway_history(pins_path) if all_runs else None
    rt = runtime(s)
    ids = None if all_runs else [run_id or ""]
    if out is None:
        export_audit(rt.store, sys.stdout, ids, since=moment, sign=key, gateway=gateway)
        sys.stdout.flush()
        return
    target = Path(out)
    if target.exists() and not force:
        raise UsageError(
            f"{as_typed(out)} exists",
            code="usage.file_exists",
            hint="choose another file, or pass --force to replace it",
        )
    partial = target.with_name(f".{target.name}.partial")
    try:
        with private_file(partial) as f:
            summary = export_audit(rt.store, f, ids, since=moment, sign=key, gateway=gateway)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    lines: list[Line] = [
        f"wrote {summary.decisions} decision(s) of {len(summary.runs)} run(s) to "
        f"{quoted(out)} ({summary.links} linking events"
        + (f", {summary.store_decisions} store-wide" if summary.store_decisions else "")
        + ")"
    ]
    if summary.signed_by:
        lines.append(f"signed with key {summary.signed_by}")
    emit(
        s,
        {
            "out": out,
            "format": fmt,
            "runs": summary.runs,
            "decisions": summary.decisions,
            "links": summary.links,
            "store_decisions": summary.store_decisions,
            "signed_by": summary.signed_by,
        },
        lines,
    )


def _gateway_history(pins_path: str | None) -> GatewayHistory | None:
    """The pins file's acceptances: the one named (it must exist), else the default one
    if there is one."""
    path = Path(pins_path if pins_path is not None else PINS_PATH)
    if not path.exists():
        if pins_path is None:
            return None
        raise UsageError(
            f"no pins file at {as_typed(pins_path)}",
            code="usage.bad_pins",
            hint="pass the file `continuum gateway mcp --pins` uses",
        )
    pins = Pins.load(path)
    return GatewayHistory(str(pins.path), list(pins.history()))


@click.command("verify-audit")
@click.argument("file")
@click.option(
    "--public-key",
    default=None,
    metavar="PUBFILE",
    help="Check the file's signature and each run's signed anchor with this public key.",
)
@click.option(
    "--store",
    "against_store",
    is_flag=True,
    help="Also check that each run's head and every decision are in the store's chain "
    "(--db, else $CONTINUUM_DB).",
)
@click.option(
    "--pins",
    "pins_path",
    default=None,
    metavar="FILE",
    help="Also check that each gateway acceptance is in this pins file's history.",
)
@common
def verify_audit_cmd(
    s: Settings, file: str, public_key: str | None, against_store: bool, pins_path: str | None
) -> None:
    """Check an audit file offline: every event's hash, every link up to each run's head,
    every derived field, the lines' digest; with --public-key the signatures. Exit 3 if
    anything does not verify."""
    try:
        with open(file, "rb") as f:
            rows = list(read_lines(f))
    except OSError as e:
        raise UsageError(
            f"cannot read {as_typed(file)}: {e.strerror}",
            code="usage.bad_audit",
            hint="pass a file written by `continuum audit`",
        ) from e
    store = runtime(s).store if against_store else None
    gateway = _gateway_history(pins_path) if pins_path is not None else None
    check = verify_audit(
        rows,
        public_key=Path(public_key) if public_key is not None else None,
        store=store,
        gateway=gateway,
    )
    lines: list[Line] = [
        [
            Styled("ok", fg="green"),
            f"  {check.decisions} decision(s) of {len(check.runs)} run(s): every hash and "
            "link checked up to each head",
        ]
    ]
    if check.signed_by:
        lines.append(f"signed by key {check.signed_by}; each run's signed anchor verifies")
    else:
        lines.append("signatures not checked (pass --public-key PUBFILE)")
    if check.store_checked:
        lines.append("each head and decision is in the store's chain")
    if gateway is not None:
        lines.append(f"each gateway acceptance is in {quoted(gateway.path)}")
    emit(s, {"verified": True, **check.as_json()}, lines)


COMMANDS = [audit_cmd, verify_audit_cmd]
