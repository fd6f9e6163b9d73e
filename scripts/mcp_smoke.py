"""Smoke test of `continuum-mcp`: a real subprocess, real JSON-RPC, the official client.

Usage: .venv/bin/python scripts/mcp_smoke.py [--no-inspector] [--keep]

For each protocol era of the official MCP client (mode="legacy": the initialize
handshake; mode="auto": the 2026-07-28 per-request envelope) it starts the server as a
subprocess on a fresh store and drives every one of the ten tools, plus a denial and a
confirm-token refusal. Then the MCP Inspector CLI (a third-party client, via npx) lists
the tools and calls continuum_resume; without npx that part is skipped with the reason.

Prints one PASS/FAIL/SKIP line per check and exits 1 if any check failed. With CI=true a
failed Inspector download is a failure, otherwise a skip.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
try:
    import continuum  # noqa: F401  (installed by `make setup`)
except ImportError:  # a checkout whose venv lacks the editable install: use the source tree
    sys.path.insert(0, str(REPO / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])
    )

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp_types import CallToolResult, Implementation  # noqa: E402

TOOLS = (
    "continuum_validate",
    "continuum_resume",
    "continuum_list_actions",
    "continuum_record_progress",
    "continuum_checkpoint",
    "continuum_intercept_action",
    "continuum_complete_action",
    "continuum_fail_action",
    "continuum_reconcile_action",
    "continuum_confirm",
)
READ_ONLY = {"continuum_validate", "continuum_resume", "continuum_list_actions"}
AGENT = "smoke-agent"
CONFIRM_SECRET = "smoke-confirm-secret-0123456789abcdef"  # >= 32 characters
INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"  # the last release that runs on Node 20
TIMEOUT = 60

failures: list[str] = []


def report(status: str, label: str, detail: str = "") -> None:
    print(f"{status:4} {label}" + (f": {detail}" if detail else ""), flush=True)
    if status == "FAIL":
        failures.append(label)


def check(label: str, condition: bool, detail: str = "") -> bool:
    report("PASS" if condition else "FAIL", label, detail)
    return condition


def server_args(db: Path) -> list[str]:
    return ["-m", "continuum.mcp", "--db", str(db)]


def data(result: CallToolResult) -> dict[str, Any]:
    """Structured content of an ok result; it must also be the same JSON as the text."""
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error or result.structured_content is None:
        raise AssertionError(f"error result: {text[:300]}")
    if json.loads(text) != result.structured_content:
        raise AssertionError("structured content and text differ")
    return result.structured_content


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def drive_every_tool(mode: str, work: Path) -> None:
    db = work / "store.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=server_args(db),
        cwd=work,
        env={
            "CONTINUUM_MCP_MUTATING_CLIENTS": AGENT,
            "CONTINUUM_MCP_CONFIRM_TOKEN": CONFIRM_SECRET,
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        },
    )
    tag = f"[{mode}]"
    with (work / "server-stderr.log").open("a") as errlog, anyio.fail_after(TIMEOUT * 2):
        async with Client(
            stdio_client(params, errlog=errlog),
            client_info=Implementation(name=AGENT, version="1"),
            mode=mode,
        ) as client:

            async def call(
                tool: str, meta: dict[str, Any] | None = None, **args: Any
            ) -> dict[str, Any]:
                return data(await client.call_tool(tool, args, meta=meta))

            listed = {t.name: t for t in (await client.list_tools()).tools}
            check(
                f"{tag} tools/list names the ten tools",
                sorted(listed) == sorted(TOOLS),
                ", ".join(sorted(listed)),
            )
            hints_ok = all(
                t.annotations is not None and t.annotations.read_only_hint is (n in READ_ONLY)
                for n, t in listed.items()
            )
            check(
                f"{tag} readOnlyHint true for the 3 read-only tools, false for the 7 others",
                hints_ok,
            )
            check(
                f"{tag} every tool has an outputSchema and a description",
                all(t.output_schema and t.description for t in listed.values()),
            )

            async def step(label: str, fn: Callable[[], Any]) -> Any:
                try:
                    outcome = await fn()
                except Exception as exc:  # report and go on: one line per check
                    report("FAIL", f"{tag} {label}", f"{type(exc).__name__}: {exc}")
                    return None
                return outcome

            r = await step("resume", lambda: call("continuum_resume"))
            if r is not None:
                check(
                    f"{tag} continuum_resume with no run -> no_active_run",
                    (r["run_id"], r["mode"]) == (None, "no_active_run"),
                    r["mode"],
                )
            r = await step(
                "record_progress",
                lambda: call(
                    "continuum_record_progress",
                    run_id="smoke",
                    goal="smoke-test every tool",
                    total=2,
                ),
            )
            if r is not None:
                check(
                    f"{tag} continuum_record_progress creates the run",
                    r["run_id"] == "smoke" and r["progress"]["total"] == 2,
                )
            r = await step(
                "checkpoint",
                lambda: call(
                    "continuum_checkpoint", run_id="smoke", reason="smoke", env={"dataset": "v1"}
                ),
            )
            if r is not None:
                check(
                    f"{tag} continuum_checkpoint declares env and seals the state",
                    r["event_sequence"] > r["sequence"] and len(r["state_hash"]) >= 64,
                )
            a = await step(
                "intercept",
                lambda: call(
                    "continuum_intercept_action",
                    run_id="smoke",
                    action_type="send_mail",
                    key="mail:1",
                    arguments={"to": "ops@example.com"},
                ),
            )
            if a is not None:
                check(
                    f"{tag} continuum_intercept_action -> proceed",
                    a["proceed"] is True,
                    a["status"],
                )
                r = await step(
                    "complete",
                    lambda: call(
                        "continuum_complete_action",
                        run_id="smoke",
                        action_key=a["action_key"],
                        external_id="msg-1",
                        result={"queued": True},
                    ),
                )
                if r is not None:
                    check(
                        f"{tag} continuum_complete_action -> completed", r["status"] == "completed"
                    )
                r = await step(
                    "intercept again",
                    lambda: call(
                        "continuum_intercept_action",
                        run_id="smoke",
                        action_type="send_mail",
                        key="mail:1",
                        arguments={"to": "ops@example.com"},
                    ),
                )
                if r is not None:
                    check(
                        f"{tag} a done action is not performed again (stored result returned)",
                        r["proceed"] is False
                        and r["external_id"] == "msg-1"
                        and r["previous_result"] == {"queued": True},
                    )
            b = await step(
                "intercept 2",
                lambda: call(
                    "continuum_intercept_action",
                    run_id="smoke",
                    action_type="send_mail",
                    key="mail:2",
                ),
            )
            if b is not None:
                r = await step(
                    "fail",
                    lambda: call(
                        "continuum_fail_action",
                        run_id="smoke",
                        action_key=b["action_key"],
                        error="timeout",
                    ),
                )
                if r is not None:
                    check(
                        f"{tag} continuum_fail_action (certain=false) -> unknown",
                        r["status"] == "unknown",
                    )
                r = await step("resume uncertain", lambda: call("continuum_resume", run_id="smoke"))
                if r is not None:
                    keys = [u["action_key"] for u in r["uncertain_actions"]]
                    check(
                        f"{tag} resume -> request_human, the unknown action listed by action_key",
                        r["mode"] == "request_human" and keys == [b["action_key"]],
                        r["mode"],
                    )
                r = await step(
                    "reconcile",
                    lambda: call(
                        "continuum_reconcile_action",
                        run_id="smoke",
                        action_key=b["action_key"],
                        occurred=False,
                        note="not in the mail log",
                    ),
                )
                if r is not None:
                    check(
                        f"{tag} continuum_reconcile_action(occurred=false) -> failed",
                        r["status"] == "failed",
                    )
            r = await step("list_actions", lambda: call("continuum_list_actions", run_id="smoke"))
            if r is not None:
                check(
                    f"{tag} continuum_list_actions: 2 actions, none unresolved",
                    len(r["actions"]) == 2 and r["unresolved"] == [],
                )
            r = await step(
                "validate",
                lambda: call("continuum_validate", run_id="smoke", env={"dataset": "v2"}),
            )
            if r is not None:
                statuses = {d["name"]: d["status"] for d in r["dependencies"]}
                check(
                    f"{tag} continuum_validate sees the changed dependency",
                    statuses == {"dataset": "changed"},
                    str(statuses),
                )
            refused = await client.call_tool("continuum_confirm", {"run_id": "smoke"})
            check(
                f"{tag} continuum_confirm without the confirm token is refused",
                refused.is_error is True and "continuum confirm smoke" in text_of(refused),
            )
            r = await step(
                "confirm",
                lambda: call(
                    "continuum_confirm", meta={"confirmToken": CONFIRM_SECRET}, run_id="smoke"
                ),
            )
            if r is not None:
                check(
                    f"{tag} continuum_confirm with the confirm token is recorded",
                    r["through_sequence"] > 0,
                )
            r = await step(
                "resume after confirm",
                lambda: call("continuum_resume", run_id="smoke", env={"dataset": "v1"}),
            )
            if r is not None:
                check(
                    f"{tag} resume after the human confirmation -> resume",
                    r["mode"] == "resume",
                    r["mode"],
                )

    before = db.read_bytes()
    stranger = StdioServerParameters(
        command=sys.executable, args=server_args(db), cwd=work, env=dict(params.env or {})
    )
    with (work / "server-stderr.log").open("a") as errlog, anyio.fail_after(TIMEOUT):
        async with Client(
            stdio_client(stranger, errlog=errlog),
            client_info=Implementation(name="stranger", version="1"),
            mode=mode,
        ) as client:
            denied = await client.call_tool(
                "continuum_record_progress", {"run_id": "smoke", "completed": 2}
            )
    check(
        f"{tag} a client off the allowlist is denied, readably, and nothing is written",
        denied.is_error is True and "'stranger'" in text_of(denied) and db.read_bytes() == before,
    )
    check(
        f"{tag} the denial is logged on stderr",
        '"mcp.call_denied"' in (work / "server-stderr.log").read_text(),
    )


def npm_env() -> dict[str, str]:
    cache = (
        REPO / ".venv" / "npm-cache"
        if (REPO / ".venv").is_dir()
        else Path(tempfile.gettempdir()) / "continuum-npm-cache"
    )
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {
        **{k: os.environ[k] for k in keep if k in os.environ},
        "npm_config_cache": str(cache),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }


def inspector_checks(work: Path) -> None:
    npx = shutil.which("npx")
    if npx is None:
        report("SKIP", "MCP Inspector CLI", "npx is not installed (needs Node.js and npm)")
        return
    fetched = subprocess.run(
        [npx, "-y", "-p", INSPECTOR, "-c", "true"],
        capture_output=True,
        text=True,
        env=npm_env(),
        timeout=300,
        check=False,
    )
    if fetched.returncode != 0:
        reason = f"could not fetch {INSPECTOR}: {fetched.stderr.strip()[-200:]}"
        report("FAIL" if os.environ.get("CI") == "true" else "SKIP", "MCP Inspector CLI", reason)
        return
    db = work / "inspector.db"
    base = [npx, "-y", INSPECTOR, "--cli", sys.executable, *server_args(db)]

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [*base, *args],
            capture_output=True,
            text=True,
            cwd=work,
            env=npm_env(),
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(done.stderr.strip()[-300:])
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    try:
        listed = run("--method", "tools/list")
        names = sorted(t["name"] for t in listed["tools"])
        check("[inspector] tools/list names the ten tools", names == sorted(TOOLS))
        resumed = run("--method", "tools/call", "--tool-name", "continuum_resume")
        check(
            "[inspector] tools/call continuum_resume -> no_active_run",
            resumed.get("isError") is False
            and resumed["structuredContent"]["mode"] == "no_active_run",
        )
        check("[inspector] read-only calls created no store", not db.exists())
    except (AssertionError, ValueError, KeyError) as exc:
        report("FAIL", "[inspector] MCP Inspector CLI", str(exc))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-inspector", action="store_true", help="skip the MCP Inspector CLI checks")
    ap.add_argument("--keep", action="store_true", help="keep the temporary stores")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="continuum-mcp-smoke-"))
    try:
        for mode in ("legacy", "auto"):
            work = root / mode
            work.mkdir()
            try:
                anyio.run(drive_every_tool, mode, work)
            except Exception as exc:  # the server or the client broke: one line, then go on
                report("FAIL", f"[{mode}] session", f"{type(exc).__name__}: {exc}")
        if args.no_inspector:
            report("SKIP", "MCP Inspector CLI", "--no-inspector")
        else:
            inspector_checks(root)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failed check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
