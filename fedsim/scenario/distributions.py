"""The scenario's distributions, where they have been imported from; they live in
:mod:`fedsim.distributions`, below every package whose sections use them."""

from __future__ import annotations

from ..distributions import (
    Constant, Dist, Exponential, IntDist, LogNormal, RandInt, Uniform, dist_bounds, dist_high, dist_low,
)

__all__ = ["Constant", "Dist", "Exponential", "IntDist", "LogNormal", "RandInt", "Uniform", "dist_bounds", "dist_high",
           "dist_low"]
