"""The :class:`Scenario`: one simulation's sections put together (cross-field rules in :mod:`.checks`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ..validate import check_run_name
from .algorithm import AlgorithmConfig
from ..section import Section
from .checks import algorithm_spec, check_scenario
from .data import DataConfig, ModelConfig
from .loss import LossConfig
from .round import RoundConfig
from .settings import CheckpointConfig, EngineConfig, EvalConfig
from .system import SystemConfig

__all__ = ["Scenario"]


class Scenario(Section):
    """One simulation: workload, system, round policy, algorithm, evaluation, engine."""

    name: str = "run"
    seed: int = 0
    rounds: int = Field(10, ge=1)
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    system: SystemConfig = SystemConfig()
    round: RoundConfig = RoundConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    engine: EngineConfig = EngineConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    variants: dict[str, dict[str, Any]] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return check_run_name(v)

    @model_validator(mode="after")
    def _cross(self):
        check_scenario(self)
        return self

    @property
    def algorithm_spec(self):
        """The resolved algorithm (:func:`fedsim.algorithms.spec.resolve`), from the registries as
        they are now."""
        return algorithm_spec(self.algorithm)

    @property
    def data_seed(self) -> int:
        """Seed of the workload's data (``data.seed``, else ``seed``)."""
        return self.seed if self.data.seed is None else self.data.seed

    @property
    def model_name(self) -> str:
        if self.data.name == "quadratic":
            return "quadratic"
        return self.model.name or "logreg"


