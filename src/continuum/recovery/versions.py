"""Version pinning at resume: which open actions were recorded under other versions (a
prompt, a tool's schema, a model) than the ones the agent runs under now.

Pure: reads the folded state and what the caller says is current. The ledger's own check
(an interrupted ``safe``/``idempotent`` action is not re-run under another tool schema)
is in ``ledger/core.py``; this only reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from continuum.errors import UsageError
from continuum.state.records import State
from continuum.types import ActionStatus

_SETTLED = (ActionStatus.COMPLETED, ActionStatus.COMPENSATED)
_RUN_WIDE = ("model", "prompt_hash")


def _current(versions: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(run-wide values, tool schema hash per action type), or ``UsageError``."""
    if not isinstance(versions, Mapping):
        raise UsageError(
            "versions must be an object: model, prompt_hash, tool_schema_hashes",
            code="usage.bad_versions",
            hint='e.g. {"model": "claude-sonnet-4", "tool_schema_hashes": {"send": "sha256:..."}}',
        )
    unknown = sorted(set(versions) - {*_RUN_WIDE, "tool_schema_hashes"})
    if unknown:
        raise UsageError(
            f"versions has unknown field(s) {', '.join(map(repr, unknown))}",
            code="usage.bad_versions",
            hint="give model, prompt_hash and tool_schema_hashes (action type -> hash)",
        )
    run_wide = {k: versions[k] for k in _RUN_WIDE if versions.get(k) is not None}
    schemas = versions.get("tool_schema_hashes") or {}
    if not isinstance(schemas, Mapping) or not all(
        isinstance(v, str) for v in (*run_wide.values(), *schemas.values())
    ):
        raise UsageError(
            "versions: model and prompt_hash must be strings, tool_schema_hashes an object "
            "of action type -> hash string",
            code="usage.bad_versions",
            hint='e.g. {"model": "claude-sonnet-4", "tool_schema_hashes": {"send_invoice": '
            '"sha256:..."}}',
        )
    return run_wide, {str(k): str(v) for k, v in schemas.items()}


def version_drift(state: State, versions: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One entry per field of each open action whose recorded value differs from the
    current one (a field either side does not give is not compared)."""
    if not versions:
        return []
    run_wide, schemas = _current(versions)
    out: list[dict[str, Any]] = []
    for a in state.actions.values():
        if a.status in _SETTLED or not a.versions:
            continue
        now = {**run_wide}
        if a.action_type in schemas:
            now["tool_schema_hash"] = schemas[a.action_type]
        for field in ("prompt_hash", "tool_schema_hash", "model"):
            before, after = a.versions.get(field), now.get(field)
            if before is not None and after is not None and before != after:
                out.append(
                    {
                        "action_id": a.action_id,
                        "action_key": a.action_key,
                        "action_type": a.action_type,
                        "status": str(a.status),
                        "field": field,
                        "recorded": before,
                        "current": after,
                    }
                )
    return out
