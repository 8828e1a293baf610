"""Scenario distributions (``{dist: uniform | lognormal | randint | constant | exponential, ...}``).

Each knows its clock value (``clock_value()``: the :mod:`fedsim.clock.model` distribution with
``sample(rng)``) and the (smallest, largest) value it takes (``bounds()``), so a new distribution
is one class here. They sit below the packages whose sections use them (``fedsim.scenario``,
``fedsim.availability``) and :mod:`fedsim.validate`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from .clock import model as cm
from .section import Section


class _Interval(Section):
    """A distribution on [low, high] (its subclasses give the fields' types): low <= high."""

    def bounds(self) -> tuple[float, float]:
        return self.low, self.high

    @model_validator(mode="after")
    def _order(self):
        if not self.low <= self.high:
            raise ValueError("low must be <= high")
        return self


class Uniform(_Interval):
    """Continuous uniform on [low, high]."""

    dist: Literal["uniform"]
    low: float
    high: float

    def clock_value(self) -> cm.Uniform:
        return cm.Uniform(self.low, self.high)


class LogNormal(Section):
    """``median * exp(sigma * N(0, 1))``."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)

    def clock_value(self) -> cm.LogNormal:
        return cm.LogNormal(self.median, self.sigma)

    def bounds(self) -> tuple[float, float]:
        return 0.0, math.inf  # not reached


class RandInt(_Interval):
    """Integer uniform on {low, ..., high} (both inclusive)."""

    dist: Literal["randint"]
    low: int
    high: int

    def clock_value(self) -> cm.RandInt:
        return cm.RandInt(self.low, self.high)


class Constant(Section):
    dist: Literal["constant"]
    value: float

    def clock_value(self) -> cm.Constant:
        return cm.Constant(self.value)

    def bounds(self) -> tuple[float, float]:
        return self.value, self.value


class Exponential(Section):
    """Exponential with the given mean."""

    dist: Literal["exponential"]
    mean: float = Field(gt=0)

    def clock_value(self) -> cm.Exponential:
        return cm.Exponential(self.mean)

    def bounds(self) -> tuple[float, float]:
        return 0.0, math.inf  # not reached


Dist = Annotated[Union[Uniform, LogNormal, RandInt, Constant, Exponential], Field(discriminator="dist")]
IntDist = Annotated[Union[RandInt, Constant], Field(discriminator="dist")]


def dist_bounds(d: Any) -> tuple[float, float]:
    """(smallest, largest) value a number, per-client tuple or distribution takes (its ``bounds()``;
    lognormal, exponential: 0 and inf, neither reached)."""
    if isinstance(d, tuple):
        return min(d), max(d)
    bounds = getattr(d, "bounds", None)
    return bounds() if bounds is not None else (d, d)


def dist_low(d: Any) -> float:
    """Smallest value of :func:`dist_bounds`."""
    return dist_bounds(d)[0]


def dist_high(d: Any) -> float:
    """Largest value of :func:`dist_bounds`."""
    return dist_bounds(d)[1]
