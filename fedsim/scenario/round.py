"""The ``round`` section: the server's round policy and the work each client is given."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import _Frozen
from .distributions import Constant, IntDist, dist_low

class RoundConfig(_Frozen):
    """Server round policy and the work each client is given."""

    policy: Literal["window", "wait", "deadline", "async"] = "window"
    window: float | None = Field(None, gt=0)
    deadline: float | None = Field(None, gt=0)
    local_steps: int | IntDist | None = None
    local_epochs: int | IntDist | None = None
    max_local_steps: int | None = Field(None, ge=1)
    clients_per_round: int | None = Field(None, ge=1)
    sampling: Literal["uniform", "weighted"] = "uniform"
    # asynchronous policy
    concurrency: int | None = Field(None, ge=1)
    buffer: int = Field(1, ge=1)

    @field_validator("local_steps", "local_epochs")
    @classmethod
    def _work(cls, w, info):
        if isinstance(w, Constant) and not float(w.value).is_integer():
            raise ValueError("a constant number of steps or epochs must be an integer")
        if w is not None and dist_low(w) < 1:
            raise ValueError("must be >= 1")
        return w  # upper bounds: fedsim.validate.check_limits

    def value(self, batch_size: int):
        """The clock's :class:`fedsim.clock.model.RoundRule` (:func:`.clock_values.round_value`)."""
        from .clock_values import round_value

        return round_value(self, batch_size)
