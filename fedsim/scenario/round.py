"""The ``round`` section: the server's round policy and the work each client is given."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import Section
from .distributions import Constant, IntDist, dist_low

#: Largest ``round.overcommit`` factor (FedScale's default is 1.3).
MAX_OVERCOMMIT = 100.0


class RoundConfig(Section):
    """Server round policy and the work each client is given."""

    policy: Literal["window", "wait", "deadline", "overcommit", "async"] = "window"
    window: float | None = Field(None, gt=0)
    deadline: float | None = Field(None, gt=0)
    local_steps: int | IntDist | None = None
    local_epochs: int | IntDist | None = None
    max_local_steps: int | None = Field(None, ge=1)
    clients_per_round: int | None = Field(None, ge=1)
    sampling: Literal["uniform", "weighted"] = "uniform"
    weights: Literal["normalized", "unbiased"] = "normalized"  # uniform sampling's w_i (docs/algorithms.md)
    # over-commitment (FedScale): select ceil(overcommit * clients_per_round), keep the first K
    overcommit: float = 1.3
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

    @field_validator("overcommit")
    @classmethod
    def _overcommit(cls, v):
        if not 1 <= v <= MAX_OVERCOMMIT:
            raise ValueError(f"must be between 1 and {MAX_OVERCOMMIT:g} (a factor on clients_per_round)")
        return v

    def value(self, batch_size: int):
        """The clock's :class:`fedsim.clock.model.RoundRule` (:func:`.clock_values.round_value`)."""
        from .clock_values import round_value

        return round_value(self, batch_size)
