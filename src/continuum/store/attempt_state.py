"""The store's counter of wrong confirm tokens (``confirm_attempts.py``), as a model:
loaded when a token is compared, not with the store."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class AttemptState(BaseModel):
    """The store's counter. ``epoch`` is drawn when the row is first written, so the ids
    of its notifications never repeat, even if the row is deleted and starts again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: str = ""
    failures: int = 0  # wrong tokens in a row since the last right one or unlock
    total: int = 0  # wrong tokens ever counted here (never reset)
    not_before: float = 0.0  # Unix time before which no token is compared
    locked: bool = False
    last_failure_at: str | None = None
    last_channel: str | None = None
    last_caller: str | None = None
    last_run_id: str | None = None
    unlocked_at: str | None = None

    def retry_after(self, now: float) -> float:
        return 0.0 if self.locked else max(0.0, self.not_before - now)
