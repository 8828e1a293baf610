"""``round.selection: {name: uniform, weights: normalized|unbiased}`` and ``{name: weighted}``:
the sections of the clock's own rules (:class:`fedsim.clock.selection.Uniform`,
:class:`fedsim.clock.selection.Weighted`). ``round.sampling`` / ``round.weights`` name the same
two rules (the keys scenarios used before ``round.selection``)."""

from __future__ import annotations

from typing import Literal

from ..clock.selection import Uniform, Weighted
from .section import SelectionSection

__all__ = ["UniformSelection", "WeightedSelection"]


class UniformSelection(SelectionSection):
    """Uniformly without replacement among the clients online at the open; weights p_i over the
    picked clients' sum (``normalized``) or p_i m / q (``unbiased``): docs/algorithms.md."""

    weights: Literal["normalized", "unbiased"] = "normalized"

    def clock_value(self) -> Uniform:
        return Uniform(self.weights)


class WeightedSelection(SelectionSection):
    """With replacement in proportion to p_i among the clients online at the open (count / q)."""

    def clock_value(self) -> Weighted:
        return Weighted()
