"""An accepted registry keeps its ``[[effect]]`` tables beside its digest, so the gate
compiles them on each tool call without parsing TOML (issue 27), and the result is the
registry its text gives. Only the accepted bytes are taken that way; a changed, absent or
damaged record goes back to the text (and the gate refuses an unaccepted registry as
before)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from continuum.hooks.guard import (
    ACCEPTED,
    accepted_registry,
    accepted_text,
    registry_snapshot,
)
from continuum.hooks.registry import REGISTRY_PATH, Registry, parse_registry

SHIPPED = (
    Path(__file__).resolve().parents[2] / "src" / "continuum" / "hooks" / "effects.example.toml"
)


def _shape(registry: Registry) -> list[tuple[object, ...]]:
    return [
        (
            r.index,
            r.line,
            r.tool.pattern,
            r.action_type,
            r.key,
            r.replay,
            {k: p.pattern for k, p in r.match.items()},
            r.probe,
            r.description,
            r.shell,
            sorted(r.shell_options),
            r.block_drift,
        )
        for r in registry.rules
    ]


def _accept(project: Path, text: str) -> None:
    (project / ".continuum").mkdir(parents=True, exist_ok=True)
    (project / REGISTRY_PATH).write_text(text, encoding="utf-8")
    digest, entries = registry_snapshot(str(project))
    n = len(entries or [])
    (project / ACCEPTED).write_text(accepted_text(digest, n, "now", entries), encoding="utf-8")


def test_an_accepted_registry_is_compiled_from_its_kept_tables(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    _accept(tmp_path, text)
    kept = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))
    assert len(kept["effects"]) == kept["rules"] > 3
    registry, current = accepted_registry(str(tmp_path))
    assert current
    assert _shape(registry) == _shape(parse_registry(text, str(tmp_path / REGISTRY_PATH)))


def test_the_kept_tables_are_used_only_for_the_accepted_bytes(tmp_path: Path) -> None:
    _accept(tmp_path, SHIPPED.read_text(encoding="utf-8"))
    edited = '[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "{command}"\n'
    (tmp_path / REGISTRY_PATH).write_text(edited, encoding="utf-8")
    registry, current = accepted_registry(str(tmp_path))
    assert not current  # the gate refuses every possible effect until a person accepts it
    assert [r.action_type for r in registry.rules] == ["x"]  # what the file says now


def test_a_damaged_record_of_the_tables_falls_back_to_the_text(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    _accept(tmp_path, text)
    data = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))
    data["effects"] = [["one", 1, "x", {}]]
    (tmp_path / ACCEPTED).write_text(json.dumps(data), encoding="utf-8")
    registry, current = accepted_registry(str(tmp_path))
    assert current
    assert _shape(registry) == _shape(parse_registry(text, str(tmp_path / REGISTRY_PATH)))


def test_a_registry_holding_a_toml_date_keeps_no_tables(tmp_path: Path) -> None:
    text = '[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "k"\ndescription = 2026-12-07\n'
    (tmp_path / ".continuum").mkdir()
    (tmp_path / REGISTRY_PATH).write_text(text, encoding="utf-8")
    digest, entries = registry_snapshot(str(tmp_path))
    assert "effects" not in json.loads(accepted_text(digest, 1, "now", entries))


def test_the_gate_parses_no_toml_for_an_accepted_registry(tmp_path: Path) -> None:
    """Control: with an acceptance that kept no tables (an older one), it does."""
    _accept(tmp_path, SHIPPED.read_text(encoding="utf-8"))
    probe = (
        "import sys\nfrom continuum.hooks.guard import accepted_registry\n"
        f"registry, current = accepted_registry({str(tmp_path)!r})\n"
        "print(current, len(registry.rules), 'tomllib' in sys.modules)"
    )

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout.strip()

    rules = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))["rules"]
    assert run() == f"True {rules} False"
    data = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))
    del data["effects"]
    (tmp_path / ACCEPTED).write_text(json.dumps(data), encoding="utf-8")
    assert run() == f"True {rules} True"


def test_a_registry_edited_while_it_was_reviewed_is_not_accepted(tmp_path: Path) -> None:
    """The person accepts what they were shown: if the file changed since (between the
    listing and the confirmation), nothing is accepted."""
    import pytest

    from continuum.cli.hooks import record_acceptance
    from continuum.cli.output import Settings
    from continuum.errors import UsageError

    (tmp_path / ".continuum").mkdir()
    (tmp_path / REGISTRY_PATH).write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    shown = parse_registry(SHIPPED.read_text(encoding="utf-8"), str(tmp_path / REGISTRY_PATH))
    edited = '[[effect]]\ntool = "Bash"\naction_type = "x"\nkey = "{command}"\n'
    (tmp_path / REGISTRY_PATH).write_text(edited, encoding="utf-8")
    with pytest.raises(UsageError) as refused:
        record_acceptance(Settings(), tmp_path, "r", shown, event=False)
    assert refused.value.code == "hooks.registry_changed"
    assert not (tmp_path / ACCEPTED).exists()
    # Control: what was shown is what is there: accepted.
    (tmp_path / REGISTRY_PATH).write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    record_acceptance(Settings(), tmp_path, "r", shown, event=False)
    assert accepted_registry(str(tmp_path))[1]


def test_a_rule_edited_only_in_its_block_drift_or_shell_is_not_accepted(tmp_path: Path) -> None:
    """Every field counts, those the listing shows in other words too."""
    import pytest

    from continuum.cli.hooks import record_acceptance
    from continuum.cli.output import Settings
    from continuum.errors import UsageError

    shown_text = (
        '[[effect]]\ntool = "Bash"\naction_type = "push"\nkey = "{command}"\n'
        'shell = "git push"\nblock_drift = ["tool_schema_hash", "model"]\n'
    )
    (tmp_path / ".continuum").mkdir()
    shown = parse_registry(shown_text, str(tmp_path / REGISTRY_PATH))
    for edited in (
        shown_text.replace('["tool_schema_hash", "model"]', "[]"),
        shown_text.replace('"git push"', '"git fetch"'),
    ):
        (tmp_path / REGISTRY_PATH).write_text(edited, encoding="utf-8")
        with pytest.raises(UsageError) as refused:
            record_acceptance(Settings(), tmp_path, "r", shown, event=False)
        assert refused.value.code == "hooks.registry_changed"


def test_doctor_says_when_the_kept_rules_are_not_the_registrys(tmp_path: Path) -> None:
    """The kept tables are what the gate enforces: an acceptance whose tables were edited
    (its digest left as it was) is reported. Control: an intact one passes."""
    from continuum.hooks.doctor import _registry

    _accept(tmp_path, SHIPPED.read_text(encoding="utf-8"))
    checks = {c["name"]: c["ok"] for c in _registry(tmp_path)}
    assert checks["registry accepted"] and checks["accepted rules"]
    data = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))
    data["effects"][0][3]["tool"] = "NEVER"
    (tmp_path / ACCEPTED).write_text(json.dumps(data), encoding="utf-8")
    checks = {c["name"]: c["ok"] for c in _registry(tmp_path)}
    assert checks["registry accepted"] and not checks["accepted rules"]


def _pre_tool(project: Path, tool: str, tool_input: dict[str, object]) -> tuple[int, str]:
    """``continuum hook pre-tool`` as Claude Code runs it: exit code and stderr."""
    event = {"session_id": "s", "cwd": str(project), "tool_name": tool, "tool_input": tool_input}
    done = subprocess.run(
        [sys.executable, "-m", "continuum", "hook", "pre-tool", "--host", "claude-code"]
        + ["--db", str(project / "store.db"), "--run", "r", "--project", str(project)],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr


def test_a_kept_pattern_that_does_not_compile_refuses_effects_by_name_and_lets_reads_pass(
    tmp_path: Path,
) -> None:
    # The acceptance's kept tables are compiled on first use: one damaged to an invalid
    # pattern (the registry's text is still the accepted one) is refused when a call
    # reaches it, with the registry's own error naming the rule, never let through.
    text = (
        '[[effect]]\ntool = "Bash"\nmatch = { command = "^send" }\naction_type = "x"\nkey = "k"\n'
    )
    _accept(tmp_path, text)
    data = json.loads((tmp_path / ACCEPTED).read_text(encoding="utf-8"))
    data["effects"][0][3]["match"]["command"] = "^send("
    (tmp_path / ACCEPTED).write_text(json.dumps(data), encoding="utf-8")
    code, said = _pre_tool(tmp_path, "Bash", {"command": "ls"})
    assert code == 2, said
    assert "effect #1" in said and "not a valid regular expression" in said
    assert "hooks.bad_registry" in said
    code, said = _pre_tool(tmp_path, "Read", {"file_path": str(tmp_path / "a.txt")})
    assert code == 0, said  # looking around stays possible while a person fixes it
    # Control: the same call with the acceptance's tables intact is judged (no match: run).
    _accept(tmp_path, text)
    assert _pre_tool(tmp_path, "Bash", {"command": "ls"})[0] == 0
