"""Translation of validated sections into the clock's plain values (:mod:`fedsim.clock.model`).

The clock never sees pydantic: ``system_value`` and ``round_value`` (also reachable as
``SystemConfig.value`` / ``RoundConfig.value``) hand it frozen dataclasses.
"""

from __future__ import annotations

from typing import Any

from ..clock import model as clock_model
from .distributions import Exponential, LogNormal, RandInt, Uniform

__all__ = ["system_value", "round_value"]


def system_value(system, batch_size: int = 32) -> clock_model.System:
    """The clock's :class:`fedsim.clock.model.System` (a trace replaces compute and
    availability; ``batch_size`` sets a device trace's step time)."""
    cm = clock_model
    av = system.availability
    if system.trace is not None:
        compute = availability = cm.Traced(system.trace, system.trace_repeat, batch_size)
    else:
        compute = cm.Speed(_per_client_value(system.speed)) if system.compute is None \
            else cm.Flops(_per_client_value(system.compute.flops))
        if av == "always":
            availability = cm.Always()
        elif getattr(av, "model", None) == "markov":
            availability = cm.Markov(av.mean_online, av.mean_offline)
        elif getattr(av, "model", None) == "diurnal":
            phase = av.phase if isinstance(av.phase, (int, float, tuple)) else _dist_value(av.phase)
            availability = cm.Diurnal(av.period, av.peak, av.trough, phase, av.mean_sojourn)
        else:
            availability = cm.Intervals(av)
    network = None if system.network is None else \
        cm.Network(_per_client_value(system.network.down), _per_client_value(system.network.up))
    slowdown = None if system.slowdown is None else _dist_value(system.slowdown)
    return cm.System(compute, availability, slowdown, float(system.latency), network)



def _dist_value(d: Any) -> Any:
    """The clock's distribution value (with ``sample(rng)``) of a scenario distribution."""
    cm = clock_model
    if isinstance(d, Uniform):
        return cm.Uniform(d.low, d.high)
    if isinstance(d, LogNormal):
        return cm.LogNormal(d.median, d.sigma)
    if isinstance(d, RandInt):
        return cm.RandInt(d.low, d.high)
    if isinstance(d, Exponential):
        return cm.Exponential(d.mean)
    return cm.Constant(d.value)


def _per_client_value(x: Any) -> Any:
    return x if isinstance(x, (int, float, tuple)) else _dist_value(x)



def round_value(rule, batch_size: int) -> clock_model.RoundRule:
    """The clock's :class:`fedsim.clock.model.RoundRule` (``batch_size`` B for local_epochs)."""
    cm = clock_model
    policy = {
        "window": lambda: cm.Window(rule.window),
        "wait": cm.Wait,
        "deadline": lambda: cm.Deadline(rule.deadline),
        "async": lambda: cm.Async(rule.concurrency, rule.buffer),
    }[rule.policy]()

    def dist(w):
        return cm.Constant(w) if isinstance(w, int) else _dist_value(w)

    if rule.local_steps is not None:
        work = cm.Steps(dist(rule.local_steps))
    elif rule.local_epochs is not None:
        work = cm.Epochs(dist(rule.local_epochs), batch_size)
    else:
        work = None
    return cm.RoundRule(policy, work, rule.max_local_steps, rule.clients_per_round, rule.sampling)

