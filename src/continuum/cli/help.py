"""What `continuum --help` and every `continuum COMMAND --help` say beyond the options.

One table, ``HELP``: for every command path (``"start"``, ``"mcp install"``) a one-line
summary, shown uncut in its group's command list, and one or two examples of real use,
appended to the command's own help as its epilog. ``SECTIONS`` groups the top-level
commands by task for `continuum --help`; ``ALIASES`` gives a command the name a user
guesses from the MCP tool that does the same (``list-actions`` for
``continuum_list_actions``): the same command object under a second name, so it behaves
identically. references/cli.md shows the same examples and aliases; tests/cli/test_help.py
keeps the table, every command's help and that page in agreement, and that every command
is in exactly one section.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import click
from click.formatting import HelpFormatter


@dataclass(frozen=True)
class Entry:
    summary: str
    examples: tuple[str, ...]


def _e(summary: str, *examples: str) -> Entry:
    return Entry(summary, examples)


RUN = "invoice-batch"

# Top-level commands by task, in the order a newcomer meets them.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Run lifecycle",
        (
            "start",
            "record-progress",
            "handoff",
            "append",
            "finish",
            "abort",
            "runs",
            "status",
            "inspect",
        ),
    ),
    ("The log", ("events", "watch", "history", "diff", "replay", "event-types")),
    (
        "Side effects and the ledger",
        ("intercept", "complete", "fail", "actions", "compensate", "usage"),
    ),
    (
        "Recovery",
        (
            "resume",
            "validate",
            "checkpoint",
            "declare",
            "observe",
            "observations",
            "show-contract",
            "verify-contract",
        ),
    ),
    (
        "People",
        (
            "confirm",
            "reconcile",
            "decide",
            "resolve-branch",
            "budget",
            "approvals",
            "outbox",
            "confirm-token",
            "audit",
        ),
    ),
    (
        "Store operations",
        (
            "init",
            "where",
            "verify",
            "anchor",
            "keygen",
            "backup",
            "verify-backup",
            "verify-audit",
            "restore",
            "archive",
            "prune",
            "fork",
            "export",
            "import",
            "migrate",
        ),
    ),
    ("Hosts and servers", ("mcp", "hooks", "hook", "ui", "gateway")),
    ("Proof", ("benchmark",)),
)

# alias -> command: the MCP tool's name without `continuum_`, `_` as `-`, where the
# command's own name differs (tests/cli/test_help.py checks every tool has one or the other).
ALIASES: Mapping[str, str] = {
    "list-actions": "actions",
    "intercept-action": "intercept",
    "complete-action": "complete",
    "fail-action": "fail",
    "reconcile-action": "reconcile",
}

HELP: Mapping[str, Entry] = {
    # run lifecycle
    "start": _e(
        "Start a run with a goal (creates the store if needed)",
        f'continuum start {RUN} --goal "Send the March invoices" --total 3',
    ),
    "record-progress": _e(
        "Record progress in absolute numbers",
        f"continuum record-progress {RUN} --completed 1",
    ),
    "handoff": _e(
        "Leave a note the next session reads first",
        f'continuum handoff {RUN} --note "INV-2 bounced: fix the address before resending"',
    ),
    "append": _e(
        "Append one event of a known type (trusted local origin)",
        f'continuum append {RUN} work_completed --payload \'{{"item_id": "INV-1"}}\'',
    ),
    "finish": _e(
        "Mark a run completed",
        f'continuum finish {RUN} --reason "all 3 invoices sent"',
    ),
    "abort": _e(
        "Mark a run aborted, with the reason",
        f'continuum abort {RUN} --reason "wrong input batch"',
    ),
    "runs": _e("List the runs in the store", "continuum runs"),
    "status": _e(
        "One-screen status (exit 20 if an action needs a person)",
        f"continuum status {RUN}",
    ),
    "inspect": _e("The run's state, each value with who recorded it", f"continuum inspect {RUN}"),
    # the log
    "events": _e(
        "The run's events, one readable line each",
        f"continuum events {RUN}",
        f"continuum events {RUN} --after 3 --verbose",
    ),
    "watch": _e(
        "A live view of a run, redrawn as it changes",
        f"continuum watch {RUN}",
    ),
    "history": _e("The run's checkpoints and confirmations", f"continuum history {RUN}"),
    "diff": _e(
        "How the run's state changed between two sequences",
        f"continuum diff {RUN} --from 1 --to 4",
    ),
    "replay": _e(
        "Re-project the state from the log alone",
        f"continuum replay {RUN} --upto 3",
    ),
    "event-types": _e("List the event types continuum understands", "continuum event-types"),
    # side effects
    "intercept": _e(
        "Ask before a side effect (exit 0: proceed; 20: do not)",
        f"continuum intercept {RUN} send_invoice --key invoice:INV-1 "
        '--args \'{"to": "ap@example.com"}\'',
    ),
    "complete": _e(
        "Record that an action's effect happened",
        f"continuum complete {RUN} send_invoice:invoice:INV-1 --external-id msg-1",
    ),
    "fail": _e(
        "Record that an action failed (unknown unless --certain)",
        f'continuum fail {RUN} send_invoice:invoice:INV-2 --error "SMTP timeout"',
    ),
    "actions": _e(
        "The run's side effects (exit 20 if one needs a person)",
        f"continuum actions {RUN}",
        f"continuum actions {RUN} --all --json",
    ),
    "compensate": _e(
        "Record that a completed action was undone outside",
        f'continuum compensate {RUN} send_invoice:invoice:INV-1 --note "credit note CN-7"',
    ),
    "usage": _e(
        "The run's costs: one row per attempt, spent and reserved",
        f"continuum usage {RUN}",
    ),
    # recovery
    "resume": _e(
        "May the run continue? The verdict and its contract",
        f"continuum resume {RUN} --env dataset=v2",
        "continuum resume",
    ),
    "validate": _e(
        "Re-check the run's dependencies against the environment",
        f"continuum validate {RUN} --env dataset=v2",
    ),
    "checkpoint": _e(
        "Store a sealed semantic checkpoint of the run's state",
        f'continuum checkpoint {RUN} --reason "after INV-1" --env dataset=v2',
    ),
    "declare": _e(
        "Declare what the run depends on (re-checked on resume)",
        f"continuum declare {RUN} --env dataset=v2 --file invoices.csv",
    ),
    "observe": _e(
        "Record one signal's reading of an observation",
        f'continuum observe {RUN} "pay button label" --value "Pay 120 EUR" --signal dom --kind ui',
    ),
    "observations": _e(
        "Observations and plan branches (exit 20 if one waits)",
        f"continuum observations {RUN}",
    ),
    "show-contract": _e(
        "The sealed recovery contract, or its JSON in a file",
        f"continuum show-contract {RUN} --env dataset=v2 -o contract.json",
    ),
    "verify-contract": _e(
        "Check a contract file: its seal, and still the run's head",
        "continuum verify-contract contract.json",
    ),
    # people
    "confirm": _e(
        "As a person, vouch for the run's self-reported state",
        f"continuum confirm {RUN}",
        f"continuum confirm {RUN} --scope all",
    ),
    "reconcile": _e(
        "As a person, settle an interrupted action",
        f"continuum reconcile {RUN} send_invoice:invoice:INV-2 --occurred --external-id msg-2",
        f"continuum reconcile --probe {RUN} send_invoice:invoice:INV-2",
    ),
    "decide": _e(
        "As a person, allow or deny a call that waits for approval",
        'continuum decide apr_3f9a2c41 --allow --reason "amount checked with ACME"',
    ),
    "resolve-branch": _e(
        "As a person, resolve a plan branch that waits",
        f'continuum resolve-branch {RUN} pay-invoice --choice pay --reason "amount checked"',
    ),
    "budget": _e(
        "As a person, set or raise a run's limits (USD, tokens)",
        f'continuum budget {RUN} --usd 25.00 --reason "three invoices, two retries"',
    ),
    "approvals": _e(
        "Calls waiting for a person's decision (exit 20 if any)",
        "continuum approvals",
        f"continuum approvals {RUN} --all",
    ),
    "outbox": _e(
        "Notifications for a person, and their delivery",
        "continuum outbox --status failed",
    ),
    "outbox deliver": _e(
        "Send what is due to the configured webhooks",
        "continuum outbox deliver --loop",
    ),
    "outbox retry": _e("Put failed notifications back to pending", "continuum outbox retry --all"),
    "confirm-token": _e(
        "The person's confirm token for MCP and the operator page",
        "continuum confirm-token new",
    ),
    "confirm-token new": _e("Print a new confirm token", "continuum confirm-token new"),
    "confirm-token status": _e(
        "The counter of wrong confirm tokens", "continuum confirm-token status"
    ),
    "confirm-token unlock": _e(
        "As a person, reset that counter after a lock", "continuum confirm-token unlock"
    ),
    # store operations
    "init": _e(
        "Create an empty store",
        "continuum init",
        "continuum --db /srv/agents/continuum.db init",
    ),
    "where": _e("Show which store --db and the environment select", "continuum where"),
    "verify": _e(
        "Recompute every hash of a run (exit 3 on damage)",
        f"continuum verify {RUN}",
        "continuum verify --all",
    ),
    "anchor": _e(
        "Print SEQ:HASH of the run's head, to keep elsewhere",
        f"continuum anchor {RUN}",
        f"continuum anchor {RUN} --sign auditor.key",
    ),
    "keygen": _e("Make an Ed25519 key pair for signing", "continuum keygen auditor.key"),
    "backup": _e(
        "A consistent backup of the store while agents write",
        "continuum backup backup-2026-03-31.tar",
    ),
    "verify-backup": _e(
        "Check a backup file on its own",
        "continuum verify-backup backup-2026-03-31.tar",
    ),
    "audit": _e(
        "A JSON line per human decision: who, how, what was shown",
        f"continuum audit {RUN} --out audit.jsonl --sign auditor.key",
        "continuum audit --all --since 2026-03-01 --out audit.jsonl",
    ),
    "verify-audit": _e(
        "Check an audit file offline (hashes, chain, signature)",
        "continuum verify-audit audit.jsonl --public-key auditor.key.pub",
    ),
    "restore": _e(
        "Restore a backup into a new store",
        "continuum --db restored.db restore backup-2026-03-31.tar",
    ),
    "archive": _e(
        "Move a run's old events to an archive file",
        f"continuum archive {RUN} --before 1000 --to {RUN}-1.archive",
    ),
    "prune": _e(
        "Archive finished runs, then delete them from the store",
        "continuum prune --finished --before 2026-01-31 --to archive/ --dry-run",
    ),
    "fork": _e(
        "Start a new run from a verified prefix of another",
        f"continuum fork {RUN} --at 40 --as {RUN}-retry",
    ),
    "export": _e(
        "Write runs, exactly as sealed, to a JSONL file",
        f"continuum export {RUN} -o {RUN}.jsonl",
    ),
    "import": _e(
        "Import an export file, or a store of the original project",
        f"continuum --db other.db import {RUN}.jsonl",
        "continuum import --from-original old/continuum.db --dry-run",
    ),
    "migrate": _e("Bring the store's schema to this version", "continuum migrate --dry-run"),
    # hosts and servers
    "mcp": _e(
        "Register continuum-mcp with an agent host",
        "continuum mcp install --client claude-code",
    ),
    "mcp install": _e(
        "Write (or print) a host's MCP configuration",
        "continuum mcp install --client claude-code",
        "continuum mcp install --client codex --print",
    ),
    "mcp uninstall": _e(
        "Remove continuum from a host's MCP configuration",
        "continuum mcp uninstall --client gemini",
    ),
    "mcp doctor": _e(
        "What continuum-mcp would load here, and tell each client",
        "continuum mcp doctor",
    ),
    "hooks": _e(
        "Hook continuum into a coding host",
        "continuum hooks install --client claude-code --run my-project",
    ),
    "hooks install": _e(
        "Merge continuum's hooks into a host's project settings",
        "continuum hooks install --client claude-code --run my-project",
    ),
    "hooks remove": _e(
        "Remove continuum's hooks from a host's project settings",
        "continuum hooks remove --client claude-code",
    ),
    "hooks doctor": _e(
        "Will the host really run continuum's hooks here?",
        "continuum hooks doctor --client codex",
    ),
    "hooks serve": _e(
        "Keep the hooks' gate warm for every hook call (Linux)",
        "continuum hooks serve",
    ),
    "hooks accept": _e(
        "As a person, accept the project's effect registry",
        "continuum hooks accept",
    ),
    "hooks effects": _e(
        "Explain or check the project's effect registry",
        "continuum hooks effects --check",
    ),
    "hooks try": _e(
        "Play the host: try the installed hooks on one shell call",
        'continuum hooks try --client claude-code "git push origin main"',
    ),
    "hook": _e(
        "What a host runs on each of its events (hosts call this)",
        "continuum hook pre-tool --host claude-code --db /abs/continuum.db --run my-project",
    ),
    "ui": _e(
        "Serve the operator page",
        "continuum ui --listen 127.0.0.1:8766 --token-file tokens.txt",
    ),
    "gateway": _e(
        "The ledger in front of another MCP server or an HTTP API",
        "continuum gateway --help",
    ),
    "gateway mcp": _e(
        "Serve MCP in front of another MCP server, with the ledger",
        "continuum gateway mcp -- npx -y @modelcontextprotocol/server-memory",
        "continuum gateway mcp --rules .continuum/gateway.toml --run billing -- "
        "python billing_server.py",
        "continuum gateway mcp --url https://billing.example.com/mcp "
        "--header 'Authorization: Bearer $BILLING_TOKEN'",
    ),
    "gateway accept": _e(
        "As a person, accept a changed upstream tool definition",
        "continuum gateway accept --tool send_invoice",
    ),
    "gateway install": _e(
        "Put the gateway in front of a host's MCP server entry",
        "continuum gateway install --client claude-code --server billing",
        "continuum gateway install --client claude-code --server billing --restore",
    ),
    "gateway http": _e(
        "Proxy HTTP APIs for an agent, with the ledger in front",
        "continuum gateway http --listen 127.0.0.1:8780 --rules gateway-http.toml",
    ),
    # proof
    "benchmark": _e(
        "Crash agents for real; count what each recovery repeats",
        "continuum benchmark --total 40",
        "continuum benchmark --frameworks",
    ),
}


def aliases_of(name: str) -> list[str]:
    return [alias for alias, target in ALIASES.items() if target == name]


def epilog(path: str) -> str | None:
    """The examples (and the aliases) for the end of ``path``'s help."""
    entry = HELP.get(path)
    if entry is None:
        return None
    heading = "Example:" if len(entry.examples) == 1 else "Examples:"
    text = f"{heading}\n\n\b\n" + "\n".join(f"  {line}" for line in entry.examples)
    also = aliases_of(path)
    if also:
        names = ", ".join(f"continuum {a}" for a in also)
        tools = ", ".join("continuum_" + a.replace("-", "_") for a in also)
        text += f"\n\nAlso: {names}, the same command under the name of the MCP tool {tools}."
    return text


def document(command: click.Command, path: str) -> None:
    """Give ``command`` (and a group's subcommands) its summary and examples from
    ``HELP``; a command that already has an epilog keeps it, the examples after it."""
    entry = HELP.get(path)
    if entry is not None:
        command.short_help = entry.summary
        block = epilog(path)
        if block is not None and (command.epilog is None or block not in command.epilog):
            command.epilog = f"{command.epilog}\n\n{block}" if command.epilog else block
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            document(sub, f"{path} {name}")


class SectionedGroup(click.Group):
    """The top-level group: commands listed by task (``SECTIONS``), each with its
    summary and aliases; aliases resolve to the same command object; every command added
    gets its examples (``document``)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        document(cmd, name or cmd.name or "")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in ALIASES:
            command = super().get_command(ctx, ALIASES[cmd_name])
        return command

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Commands and aliases (shell completion offers both; the help lists each
        command once)."""
        return sorted({*self.commands, *(a for a, t in ALIASES.items() if t in self.commands)})

    def sections(self) -> list[tuple[str, list[str]]]:
        """(title, command names) in display order; a command in no section (one added
        without a place in ``SECTIONS``) is listed last, under "Other"."""
        placed = {name for _, names in SECTIONS for name in names}
        out = [(title, [n for n in names if n in self.commands]) for title, names in SECTIONS]
        out.append(("Other", sorted(n for n in self.commands if n not in placed)))
        return [(title, names) for title, names in out if names]

    def format_commands(self, ctx: click.Context, formatter: HelpFormatter) -> None:
        rows: list[tuple[str, list[tuple[str, str, str]]]] = []
        for title, names in self.sections():
            listed = []
            for name in names:
                command = self.commands[name]
                if command.hidden:
                    continue
                also = aliases_of(name)
                listed.append(
                    (
                        name,
                        command.get_short_help_str(limit=200),
                        f"(also: {', '.join(also)})" if also else "",
                    )
                )
            rows.append((title, listed))
        width = max((len(row[0]) for _, listed in rows for row in listed), default=0)
        with formatter.section("Commands"):
            for i, (title, listed) in enumerate(rows):
                if i:
                    formatter.write("\n")
                formatter.write_text(f"{title}:")
                with formatter.indentation():
                    _write_rows(formatter, listed, width)
        formatter.write_paragraph()
        formatter.write_text(
            "`continuum COMMAND --help` shows a command's options and an example; "
            "references/cli.md has them all."
        )


def _write_rows(formatter: HelpFormatter, rows: Sequence[tuple[str, str, str]], width: int) -> None:
    """(name, summary, aliases) as a definition list whose first column is ``width``
    wide in every section; the aliases follow the summary, on a line of their own when
    they do not fit after it."""
    indent = formatter.current_indent
    text_width = max(formatter.width - indent - width - 2, 20)
    for name, summary, also in rows:
        joined = f"{summary} {also}".strip()
        text = [joined] if len(joined) <= text_width else [summary, also]
        lines = [
            ln for t in text if t for ln in textwrap.wrap(t, text_width, break_on_hyphens=False)
        ]
        lines = lines or [""]
        formatter.write(f"{'':>{indent}}{name:<{width}}  {lines[0]}\n")
        for line in lines[1:]:
            formatter.write(f"{'':>{indent + width + 2}}{line}\n")
