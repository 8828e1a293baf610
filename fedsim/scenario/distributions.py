"""Scenario distributions (``{dist: uniform | lognormal | randint | constant | exponential, ...}``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from .base import _Frozen

class Uniform(_Frozen):
    """Continuous uniform on [low, high]."""

    dist: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _order(self):
        if not self.low <= self.high:
            raise ValueError("low must be <= high")
        return self


class LogNormal(_Frozen):
    """``median * exp(sigma * N(0, 1))``."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)


class RandInt(_Frozen):
    """Integer uniform on {low, ..., high} (both inclusive)."""

    dist: Literal["randint"]
    low: int
    high: int

    @model_validator(mode="after")
    def _order(self):
        if not self.low <= self.high:
            raise ValueError("low must be <= high")
        return self


class Constant(_Frozen):
    dist: Literal["constant"]
    value: float


class Exponential(_Frozen):
    """Exponential with the given mean."""

    dist: Literal["exponential"]
    mean: float = Field(gt=0)


Dist = Annotated[Union[Uniform, LogNormal, RandInt, Constant, Exponential], Field(discriminator="dist")]
IntDist = Annotated[Union[RandInt, Constant], Field(discriminator="dist")]


def dist_low(d: Any) -> float:
    """Smallest value a number or distribution can take."""
    if isinstance(d, (int, float)):
        return float(d)
    if isinstance(d, (Uniform, RandInt)):
        return float(d.low)
    if isinstance(d, Constant):
        return d.value
    return 0.0  # lognormal / exponential: > 0 but unbounded below 1

