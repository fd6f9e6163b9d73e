"""One session of the invoice batch run by a REAL coding host.

Usage: host_session.py WORK --host claude-code|gemini|codex|kilo --run-id RUN
                       [--kill-after-send INV] [--live] [--session N]

The host is the binary `make hosts` installed (tests/hosts/hosts.toml). It runs in WORK
with WORK's own MCP configuration (the one `1-setup.sh` wrote with `continuum mcp
install`), non-interactively, with a private HOME (WORK/home-HOST):

- scripted (the default, what `run.sh --host` does): its model is the scripted model of
  tests/hosts/ on 127.0.0.1, which does what the session prompts ask of an agent: resume
  first, settle what is unknown by looking at the outbox, intercept before each send,
  send only when told to proceed, complete right after. No key, no network.
- `--live` (Claude Code only): its model is the real one, with the key already in the
  environment (`ANTHROPIC_API_KEY`, no base URL override); the prompt is
  prompts/session-N.md. Not run in CI.

`--kill-after-send INV`: the moment outbox/INV.txt holds its whole line, the host and everything it
started (its continuum-mcp too) are SIGKILLed, before it can record the send. In the
scripted run the model's next answer waits until then, so the kill lands exactly between
the send and its record. Prints what happened; exit 0 when the session ran (and, with
--kill-after-send, was killed at the send).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.hosts.harness import Project  # noqa: E402
from tests.hosts.hosts_all import CLAUDE, CODEX, GEMINI, KILO  # noqa: E402
from tests.hosts.model_server import serve  # noqa: E402
from tests.hosts.proc import HostProcess, kill_tree  # noqa: E402
from tests.hosts.script import Agent, Model, ToolResult, mcp  # noqa: E402

HOSTS = {h.name: h for h in (CLAUDE, GEMINI, CODEX, KILO)}
INVOICES = [f"INV-00{i}" for i in range(1, 6)]
KIT = Path(__file__).resolve().parents[1]


def say(text: str) -> None:
    print(text, flush=True)


def result_json(results: list[ToolResult]) -> dict[str, Any]:
    data = results[-1].json() if results else None
    return data if isinstance(data, dict) else {}


def policy(
    host: Any, run: str, kill_after: str | None, killed: threading.Event
) -> Generator[Any, list[ToolResult], None]:
    """What the session prompts ask of an agent, as a scripted model does it."""
    resume = result_json((yield [mcp("continuum_resume", run_id=run)]))
    if resume.get("mode") in (None, "no_active_run") or resume.get("progress") is None:
        yield [
            mcp(
                "continuum_record_progress",
                run_id=run,
                goal="send INV-001..INV-005, each once",
                total=5,
                completed=0,
            )
        ]
    for action in resume.get("uncertain_actions") or []:
        invoice = str(action["action_key"]).rsplit(":", 1)[-1]
        seen = (yield [host.shell(f"test -f outbox/{invoice}.txt && echo sent || echo missing")])[
            -1
        ].text
        yield [
            mcp(
                "continuum_reconcile_action",
                run_id=run,
                action_key=action["action_key"],
                occurred="missing" not in seen,
                note=f"outbox/{invoice}.txt {'exists' if 'missing' not in seen else 'is absent'}",
            )
        ]
    done = 0
    for invoice in INVOICES:
        answer = result_json(
            (
                yield [
                    mcp(
                        "continuum_intercept_action",
                        run_id=run,
                        action_type="send_invoice",
                        key=f"invoice:{invoice}",
                        arguments={"invoice": invoice},
                    )
                ]
            )
        )
        if answer.get("proceed") is not True:
            if answer.get("status") == "completed":
                done += 1
                continue
            return  # anything else: stop and leave it to a person, as the prompts say
        yield [host.shell(f"cat invoices/{invoice}.txt >> outbox/{invoice}.txt")]
        if invoice == kill_after:
            killed.wait(120)  # the host is killed before it can record the send
        done += 1
        yield [
            mcp(
                "continuum_complete_action",
                run_id=run,
                action_key=answer["action_key"],
                external_id=f"outbox:{invoice}",
            )
        ]
        yield [mcp("continuum_record_progress", run_id=run, completed=done, total=5)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--host", choices=sorted(HOSTS), default="claude-code")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--kill-after-send", default=None)
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--session", type=int, default=1)
    args = ap.parse_args()
    host = HOSTS[args.host]
    work = args.work.resolve()
    project = KitProject(host, work)
    killed = threading.Event()
    prompt = (KIT / "prompts" / f"session-{min(args.session, 2)}.md").read_text(encoding="utf-8")
    model = Model(Agent(lambda: policy(host, args.run_id, args.kill_after_send, killed)))
    if args.live:
        if args.host != "claude-code":
            say("--live runs Claude Code only (its key: ANTHROPIC_API_KEY)")
            return 1
        if not os.environ.get("ANTHROPIC_API_KEY"):
            say("--live needs ANTHROPIC_API_KEY in the environment (and no ANTHROPIC_BASE_URL)")
            return 1
        env = {**host.env(project, ""), "ANTHROPIC_API_KEY": os.environ["ANTHROPIC_API_KEY"]}
        env.pop("ANTHROPIC_BASE_URL", None)
        return run(host, project, env, prompt, args, killed)
    with serve(host.wire(), model) as url:
        code = run(host, project, host.env(project, url), prompt, args, killed)
    if model.problems:
        say(f"the scripted model saw problems: {model.problems}")
        return 1
    return code


def run(
    host: Any, project: Any, env: dict[str, str], prompt: str, args: Any, killed: threading.Event
) -> int:
    host.prepare(project)
    proc = HostProcess(
        host.argv(project, prompt),
        env,
        project.dir,
        project.logs,
        name=f"{host.name}-session-{args.session}",
    ).start()
    say(f"{host.name} session {args.session} started (pid {proc.pid}); logs in {project.logs}")
    if args.kill_after_send:
        target = project.dir / "outbox" / f"{args.kill_after_send}.txt"
        line = (project.dir / "invoices" / f"{args.kill_after_send}.txt").read_bytes()
        deadline = time.monotonic() + 600
        # The send is done when the whole line is there: `cat >> FILE` creates the file
        # before it writes, and a kill at the file's creation (as before) could cut the
        # line in half on a slow machine, which the score then counts as a wrong send.
        while not (target.exists() and target.read_bytes() == line):
            if proc.proc is not None and proc.proc.poll() is not None:
                say(
                    f"the host ended (exit {proc.proc.returncode}) before sending {args.kill_after_send}"
                )
                return 1
            if time.monotonic() > deadline:
                proc.kill()
                say(f"{args.kill_after_send} was not sent within 600 s")
                return 1
            time.sleep(0.02)
        victims = kill_tree(proc.pid, tag=proc.tag)
        killed.set()
        assert proc.proc is not None
        proc.proc.wait(timeout=30)
        say(
            f"SIGKILLed {host.name} and {len(victims) - 1} process(es) of it right after it sent {args.kill_after_send}"
        )
        return 0
    code = proc.wait(600)
    say(f"{host.name} session {args.session} ended, exit {code}")
    return 0 if code == 0 else 1


class KitProject(Project):
    """The kit's working directory as the harness's project: the host runs in WORK itself,
    with a private HOME in WORK/.host-HOST and its output in WORK/logs."""

    def __init__(self, host: Any, work: Path) -> None:
        self._work = work
        super().__init__(host, work / f".host-{host.name}")

    @property
    def dir(self) -> Path:
        return self._work

    @property
    def logs(self) -> Path:
        return self._work / "logs"


if __name__ == "__main__":
    sys.exit(main())
