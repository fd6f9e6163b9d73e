"""The invoice task, host-neutral: what the scripted model asks each real host to do.

The side effect is ``./send INV-00N``, a tiny script that appends the invoice to
``outbox.txt``: two lines for one invoice are a duplicate. When the file ``.die-after-send``
names the invoice, ``send`` removes it after sending, creates ``.kill-now`` and blocks: the test
then SIGKILLs the host and everything it started (``Project.session(kill_marker=...)``),
so the crash lands exactly between the effect and its record.
"""

from __future__ import annotations

from collections import Counter

from tests.hosts.harness import Project
from tests.hosts.script import Reply, Step, ToolCall, ToolResult, mcp

SEND = """#!/bin/sh
# the "mail server": append the invoice; FAIL-* is refused (nothing sent, exit 3)
case "$1" in FAIL-*) exit 3;; esac
echo "$1" >> outbox.txt
if [ "$(cat .die-after-send 2>/dev/null)" = "$1" ]; then rm -f .die-after-send; : > .kill-now; sleep 600; fi
echo "sent $1"
"""
KILL_MARKER = ".kill-now"

REGISTRY = """
[[effect]]
description = "sending an invoice"
tool = "{tool}"
match = {{ command = '^\\./send ' }}
action_type = "send_invoice"
key = "{{command}}"
replay = "never"
"""


def setup_send(p: Project) -> None:
    p.write_file("send", SEND, mode=0o755)


def register_send(p: Project, tool: str) -> None:
    """The effect registry: a shell call ``./send ...`` on ``tool`` (a regex) is an effect."""
    p.write_file(".continuum/effects.toml", REGISTRY.format(tool=tool))


def die_after_sending(p: Project, invoice: str) -> None:
    p.write_file(".die-after-send", invoice + "\n")


def duplicates(lines: list[str]) -> dict[str, int]:
    return {k: n for k, n in Counter(lines).items() if n > 1}


def last_json(results: list[ToolResult]) -> dict:
    data = results[-1].json() if results else None
    return data if isinstance(data, dict) else {}


def send_with_ledger(p: Project, run: str, invoice: str) -> list[Step]:
    """Intercept, send only if proceed, then complete with the action key the intercept
    answered: the MCP protocol of one invoice, as a model follows it."""
    host = p.host
    seen: dict[str, str] = {}

    def perform(results: list[ToolResult]) -> Reply:
        answer = last_json(results)
        if answer.get("proceed") is not True:
            return f"STOP: {invoice} may not be sent: {answer.get('status')}"
        seen["key"] = answer["action_key"]
        return [host.shell(f"./send {invoice}")]

    def complete(results: list[ToolResult]) -> Reply:
        return [
            mcp(
                "continuum_complete_action", run_id=run, action_key=seen["key"], external_id=invoice
            )
        ]

    return [
        [
            mcp(
                "continuum_intercept_action",
                run_id=run,
                action_type="send_invoice",
                key=f"invoice:{invoice}",
                arguments={"invoice": invoice},
            )
        ],
        perform,
        complete,
    ]


def progress(run: str, completed: int, total: int = 5, goal: str | None = None) -> Step:
    args: dict[str, object] = {"run_id": run, "completed": completed, "total": total}
    if goal:
        args["goal"] = goal
    return [mcp("continuum_record_progress", **args)]


__all__ = ["KILL_MARKER", "ToolCall"]
