"""The components of a run's state a person confirms (plain constants; the fold and the
models share them without the fold loading pydantic)."""

from __future__ import annotations

DEFAULT_CONFIRM_SCOPE = ("goal", "progress")


ALL_COMPONENTS = ("goal", "progress", "plan", "decisions", "findings", "evidence", "model")
