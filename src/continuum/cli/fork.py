"""`continuum fork RUN --at SEQ --as NEW`: a new run from a verified prefix of another."""

from __future__ import annotations

import click

from continuum.cli.common import common, runtime
from continuum.cli.output import Line, Settings, Styled, emit
from continuum.untrusted import quoted


@click.command("fork")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--at", "at", type=int, required=True, metavar="SEQ", help="Copy RUN's events 1..SEQ."
)
@click.option("--as", "new_run_id", required=True, metavar="NEW", help="The new run's id.")
@common
def fork_cmd(s: Settings, run_id: str, at: int, new_run_id: str) -> None:
    """Start run NEW as a copy of RUN's events 1..SEQ, verified as read.

    The copy is re-chained under NEW and followed by a run_forked marker (RUN, SEQ and
    RUN's hash of event SEQ), an action_marked_unknown for each action open at SEQ and a
    checkpoint, all in one transaction; RUN is not changed. Effects completed by SEQ stay
    completed in NEW (an intercept answers completed); open ones are unknown there.
    """
    r = runtime(s).fork(run_id, at=at, new_run_id=new_run_id)
    lines: list[Line] = [
        [
            Styled("ok", fg="green"),
            f"  forked {quoted(r.from_run)} at sequence {r.through_sequence} as {quoted(r.run_id)}",
        ],
        f"  from hash {r.through_hash}",
        f"  marker at sequence {r.marker_sequence}, checkpoint at {r.checkpoint_sequence}; "
        f"head {r.head}",
    ]
    if r.marked_unknown:
        lines.append(
            f"  {len(r.marked_unknown)} action(s) open at the fork point, unknown in the fork: "
            + ", ".join(quoted(k, limit=80) for k in r.marked_unknown)
        )
    emit(s, r.model_dump(mode="json"), lines)


COMMANDS = (fork_cmd,)
