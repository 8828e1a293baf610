"""The ``eval``, ``engine`` and ``checkpoint`` sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..validate import check_device_spec
from .base import Section

class PerClientEval(Section):
    """``eval.per_client``: the global model on each sampled client's own held-out data
    (docs/client-accuracy.md): ``clients`` sampled (uniformly, seeded by the data seed),
    ``tiers`` speed-quantile device tiers, and ``holdout``: the share of each client's training
    examples held out as its test data, for data without per-client test parts."""

    clients: int = Field(50, ge=1, le=100_000)
    tiers: int = Field(4, ge=1, le=1000)
    holdout: float | None = Field(None, gt=0, lt=1)


class EvalConfig(Section):
    """Evaluation: every ``every`` rounds; the training objective over the evaluation sample.

    ``clients``: size of a fixed uniform sample of clients (seeded by the data seed) whose training
    data make the reported training objective (and, for Synthetic, whose test parts make the test
    set). Default: every client when there are at most 1,000, else 1,000 of them.
    """

    every: int = Field(1, ge=1)
    train_loss: bool = True
    clients: int | None = Field(None, ge=1)
    #: evaluate the model standing at simulated times S, 2S, ... into evals.csv (fedsim.runner.evals)
    every_seconds: float | None = Field(None, gt=0, le=1e9)
    #: issue 36 item 2: accuracy on each sampled client's own test data, by device tier (client_evals.csv)
    per_client: PerClientEval | None = None


class EngineConfig(Section):
    clients_per_batch: Literal["auto"] | int = "auto"
    device: str = "auto"
    dtype: Literal["float32", "float64"] = "float32"
    threads: int | None = Field(None, ge=1)

    @field_validator("device")
    @classmethod
    def _device(cls, v):
        return check_device_spec(v)

    @field_validator("clients_per_batch")
    @classmethod
    def _cpb(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("must be >= 1 or auto")
        return v


class CheckpointConfig(Section):
    every: int = Field(0, ge=0)  # rounds; 0 = never

