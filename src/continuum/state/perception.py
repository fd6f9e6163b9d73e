"""How far an observation can be trusted, and when a plan branch needs a person (pure).

An observation (``perception_observed`` events) is something an agent or its code saw of
the world: a UI element's label, a page's content, a tool's report, an environment
value. Each event is one reading of it by one signal (the means that produced it: the
DOM, a screenshot's text, an API, continuum's own check of a declared dependency).

Verification counts independent signals:

- the latest reading of each (origin, signal) pair is what that signal says now;
- readings recorded by self-certified origins (an agent, an import) are one signal at
  most, however many signal names they give: an agent cannot verify its own report;
- ``contested``: two of the latest readings disagree (or readings name other subjects);
- ``verified``: at least two independent signals, all agreeing;
- ``unverified``: anything less.

A branch (``branch_resolved``) is a choice the plan makes on observations. It needs a
person (``request_human``) when it is high risk and an observation it rests on is not
verified, or when an environment observation it rests on is contested, whatever its
risk. Only a person's resolution (origin ``human``) settles a branch that waits; the
agent may resolve it itself later only once its observations pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from continuum.types import Origin
from continuum.untrusted import quoted

VERIFIED, UNVERIFIED, CONTESTED = "verified", "unverified", "contested"
RISK_ORDER = {"low": 0, "high": 1}


def reading_key(origin: str, signal: str) -> str:
    """The slot a reading fills: a later reading by the same origin and signal replaces it."""
    return f"{origin}:{signal}"


def independent_signals(readings: Iterable[Mapping[str, Any]]) -> set[str]:
    """The independent signals among ``readings``: self-certified origins count once."""
    out: set[str] = set()
    for r in readings:
        origin = str(r.get("origin"))
        try:
            self_certified = Origin(origin).self_certified
        except ValueError:
            self_certified = True  # an origin nobody knows is nobody's word but its own
        out.add("self-certified" if self_certified else reading_key(origin, str(r.get("signal"))))
    return out


def status_of(readings: Mapping[str, Mapping[str, Any]], *, conflicting_subject: bool) -> str:
    """``verified``, ``unverified`` or ``contested`` for the latest readings of one
    observation (``{reading_key: {"origin", "signal", "digest", ...}}``)."""
    if conflicting_subject or len({r.get("digest") for r in readings.values()}) > 1:
        return CONTESTED
    return VERIFIED if len(independent_signals(readings.values())) >= 2 else UNVERIFIED


def higher_risk(*risks: str | None) -> str:
    """The highest of ``risks`` (``low`` when none is given)."""
    given = [r for r in risks if r in RISK_ORDER]
    return max(given, key=RISK_ORDER.__getitem__) if given else "low"


def branch_hold(
    risk: str, observations: Sequence[tuple[str, Mapping[str, Any] | None]]
) -> str | None:
    """Why a branch of ``risk`` on ``observations`` (``(id, record or None)``) needs a
    person, or None when it may go on. An observation never recorded counts as
    unverified."""
    why: list[str] = []
    for ident, obs in observations:
        status = UNVERIFIED if obs is None else str(obs.get("status"))
        kind = None if obs is None else obs.get("kind")
        if status == CONTESTED and kind == "environment":
            why.append(f"environment observation {quoted(ident, limit=120)} is contested")
        elif risk == "high" and status != VERIFIED:
            seen = "was never recorded" if obs is None else f"is {status}"
            why.append(f"observation {quoted(ident, limit=120)} {seen}")
    if not why:
        return None
    return f"{risk}-risk branch: " + "; ".join(why)
