"""Run families at the CLI (issue 25, item 1): `start --parent`, `runs --tree`, a parent's
`resume` naming its child's unsettled action with the command that settles it, and a
parent's `finish` refused while a child is active."""

from __future__ import annotations

from collections.abc import Callable

from continuum.runtime.facade import Continuum
from continuum.store import open_store
from tests.cli.conftest import Result

CLI = Callable[..., Result]


def test_a_family_at_the_cli(cli: CLI, cli_proc: CLI, db: str) -> None:
    cli("start", "root", "--goal", "orchestrate")
    started = cli("--json", "start", "sub-a", "--goal", "part a", "--parent", "root").json()
    assert started["parent"] == "root"
    cli("start", "sub-b", "--goal", "part b", "--parent", "root")
    cli("start", "leaf", "--goal", "a smaller part", "--parent", "sub-a")
    cli("start", "loose", "--goal", "on its own")
    tree = cli("runs", "--tree").out.splitlines()
    assert [line.split()[0] for line in tree] == [
        '"root"',
        '"sub-a"',
        '"leaf"',
        '"sub-b"',
        '"loose"',
    ]
    assert [len(line) - len(line.lstrip()) for line in tree] == [0, 2, 4, 2, 0]
    assert cli("--json", "runs", "--tree").json()["parents"]["leaf"] == "sub-a"
    # the leaf's effect is interrupted (intercepted by a CLI process, gone at once)
    assert cli_proc("intercept", "leaf", "send", "--key", "n1").code == 0
    rt = Continuum(open_store(db))
    try:
        action = rt.actions("leaf")[0].action_id
    finally:
        rt.close()
    resumed = cli("resume", "root")
    assert resumed.code == 20
    assert 'child run "sub-a/leaf": action "send:n1"' in resumed.out
    assert f"continuum reconcile leaf {action} --occurred|--not-occurred" in resumed.out
    assert "child runs: 3 (3 active)" in resumed.out
    refused = cli("--json", "finish", "root")
    assert refused.code == 1 and refused.json()["error"]["code"] == "usage.open_children"
    assert cli("--json", "start", "x", "--goal", "g", "--parent", "nope").code == 2
