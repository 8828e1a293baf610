"""The clock of a scenario: the one place that turns a Scenario's system and round sections into a
:class:`fedsim.clock.Clock`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..clock import Clock, Population, WorkCost

__all__ = ["build_clock"]


def build_clock(
    scenario: Any,
    client_sizes: Sequence[int],
    weights: Sequence[float] | None = None,
    *,
    fast: bool | None = None,
    cost: WorkCost | None = None,
    epoch_rule: str = "floor",
    data: Any = None,
) -> Clock:
    """The clock of a :class:`~fedsim.scenario.Scenario`: its system, round policy, seed and
    ``algorithm.batch_size`` (only for ``local_epochs``), over clients with n_i = ``client_sizes``
    and p_i = ``weights`` (default n_i / n). ``cost`` (FLOPs per step, bytes per transfer) is
    needed by ``system.compute`` and ``system.network``. Nothing else of the algorithm is read.
    ``epoch_rule``: the data's steps per epoch (:mod:`fedsim.data.epochs`; LEAF's ``ceil``), given
    to the clock as the sizes it counts ``local_epochs`` over (p_i stay n_i / n).

    ``system.coupling`` (strength > 0): the clock is built once uncoupled, its devices scored, the
    clients' ``data`` scored (:mod:`fedsim.runner.coupling`), and built again with client c on
    device ``devices[c]``: every run, trained or clock-only, gets its devices here."""
    from ..data.epochs import epoch_sizes

    if epoch_rule != "floor":  # issue 27 item 6: the clock counts floor(E m_i / B) over m_i = ceil(n_i / B) B
        n = np.asarray(client_sizes, dtype=np.int64)
        weights = n / n.sum() if weights is None else weights
        client_sizes = epoch_sizes(n, scenario.algorithm.batch_size, epoch_rule)
    def clock(devices=None) -> Clock:
        return Clock(
            scenario.system.value(scenario.algorithm.batch_size),
            scenario.round.value(scenario.algorithm.batch_size),
            Population.of(client_sizes, weights),
            seed=scenario.seed,
            cost=cost,
            fast=fast,
            devices=devices,
        )

    built = clock()
    if getattr(scenario.system, "coupling", None) is None:
        return built
    from .coupling import coupling_devices

    devices = coupling_devices(scenario, built, data)
    return built if devices is None else clock(devices)
