"""The clock of a scenario: the one place that turns a Scenario's system and round sections into a
:class:`fedsim.clock.Clock`."""

from __future__ import annotations

from typing import Any, Sequence

from ..clock import Clock

__all__ = ["build_clock"]


def build_clock(
    scenario: Any,
    client_sizes: Sequence[int],
    weights: Sequence[float] | None = None,
    *,
    fast: bool | None = None,
) -> Clock:
    """The clock of a :class:`~fedsim.scenario.Scenario`: its system, round policy, seed and
    ``algorithm.batch_size`` (only for ``local_epochs``). Nothing else of the algorithm is read."""
    return Clock(
        scenario.system,
        scenario.round,
        seed=scenario.seed,
        client_sizes=client_sizes,
        weights=weights,
        batch_size=scenario.algorithm.batch_size,
        fast=fast,
    )
