"""Periodic revalidation (issue 24, item 2): the environment check of resume, run during
the run, so drift is caught within one interval instead of at the next crash.

The policy says when: every ``every_steps`` steps (a step is one ``intercept`` or
``record_progress`` through a facade; default 25) and on an app or context switch (the
hooks' session events, ``Continuum.switched``). When it is due, the declared dependencies
continuum can observe itself (files, git work trees, registered callables; a static
``name=version`` has no provider and is checked at resume, when the caller gives it) are
observed once; each one found changed or removed is recorded (``environment_changed``,
origin deterministic: continuum's own observation), which marks what was derived from it
stale, and holds every new effect (``revalidation_required``) until the dependency is
declared again (the agent accepts the new environment) or a person acts.

Pure: which dependencies drifted, and which are held, from the state and what was
observed; the facade (``runtime/facade.py``) observes and records.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from continuum.types import DependencyStatus

if TYPE_CHECKING:
    from continuum.state.records import State
    from continuum.state.validation import Observation

DEFAULT_EVERY_STEPS = 25


class RevalidationPolicy(NamedTuple):
    """When the environment is checked during a run: every ``every_steps`` steps (None or
    0: never by count) and on a switch (``on_switch``)."""

    every_steps: int | None = DEFAULT_EVERY_STEPS
    on_switch: bool = True


def drifted(state: State, observed: Mapping[str, Observation | None]) -> list[tuple[str, str]]:
    """(name, ``changed`` | ``removed``) for each declared dependency observed so and not
    recorded so already; one that cannot be observed now (unknown) is not a drift."""
    from continuum.state.validation import diff_dependency

    out: list[tuple[str, str]] = []
    for name, dep in sorted(state.dependencies.items()):
        if dep.recorded_change is not None:
            continue
        check = diff_dependency(dep, observed.get(name))
        if check.status == DependencyStatus.CHANGED:
            out.append((name, "changed"))
        elif check.status == DependencyStatus.REMOVED:
            out.append((name, "removed"))
    return out


def held_in(dependencies: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The dependencies recorded as changed or removed and not declared again since, from
    a state's plain form (its ``dependencies``, as JSON)."""
    return frozenset(n for n, d in dependencies.items() if d.get("recorded_change") is not None)


def hold_reason(held: Collection[str]) -> str | None:
    """Why no new effect may start (what ``intercept`` answers with
    ``revalidation_required``), or None when nothing is held."""
    if not held:
        return None
    names = ", ".join(repr(n) for n in sorted(held)[:5])
    return f" (changed: {names}; declare them again with declare_dependencies to accept the change)"
