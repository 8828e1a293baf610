"""Translation of validated sections into the clock's plain values (:mod:`fedsim.clock.model`).

The clock never sees pydantic: ``system_value`` and ``round_value`` (also reachable as
``SystemConfig.value`` / ``RoundConfig.value``) hand it frozen dataclasses.
"""

from __future__ import annotations

from typing import Any

from ..clock import model as clock_model

__all__ = ["system_value", "round_value"]


def system_value(system, batch_size: int = 32) -> clock_model.System:
    """The clock's :class:`fedsim.clock.model.System` (a trace replaces compute and
    availability; ``batch_size`` sets a device trace's step time)."""
    cm = clock_model
    av = system.availability
    if system.trace is not None:
        compute = availability = cm.Traced(system.trace, system.trace_repeat, batch_size, system.trace_semantics)
    else:
        compute = cm.Speed(_per_client_value(system.speed)) if system.compute is None \
            else cm.Flops(_per_client_value(system.compute.flops))
        if av == "always":
            availability = cm.Always()
        elif isinstance(av, tuple):
            availability = cm.Intervals(av)
        else:  # a registered model's section (fedsim.availability)
            availability = av.clock_value()
    network = None if system.network is None else \
        cm.Network(_per_client_value(system.network.down), _per_client_value(system.network.up))
    slowdown = None if system.slowdown is None else _distribution(system.slowdown)
    server = None
    if system.server is not None:
        sv, agg = system.server, system.server.aggregate
        flops = getattr(agg, "flops", None)
        server = cm.Server(sv.down, sv.up, 0.0 if flops is not None else float(agg), flops)
    return cm.System(compute, availability, slowdown, float(system.latency), network, system.on_outage, server)


def _distribution(d: Any) -> Any:
    """The clock's distribution value (with ``sample(rng)``) of a scenario distribution."""
    return d.clock_value()


def _per_client_value(x: Any) -> Any:
    return x if isinstance(x, (int, float, tuple)) else _distribution(x)


def round_value(rule, batch_size: int) -> clock_model.RoundRule:
    """The clock's :class:`fedsim.clock.model.RoundRule` (``batch_size`` B for local_epochs)."""
    from ..clock import policy as cp

    cm = clock_model
    policy = {
        "window": lambda: cp.Window(rule.window),
        "wait": cp.Wait,
        "deadline": lambda: cp.Deadline(rule.deadline),
        "overcommit": lambda: cp.Overcommit(rule.overcommit),
        "async": lambda: cp.Async(rule.concurrency, rule.buffer),
    }[rule.policy]()

    def dist(w):
        return cm.Constant(w) if isinstance(w, int) else _distribution(w)

    if rule.local_steps is not None:
        work = cm.Steps(dist(rule.local_steps))
    elif rule.local_epochs is not None:
        work = cm.Epochs(dist(rule.local_epochs), batch_size)
    else:
        work = None
    return cm.RoundRule(policy, work, rule.max_local_steps, rule.clients_per_round, selection_value(rule),
                        rule.on_deadline, rule.local_time, selection_name(rule))


def selection_name(rule) -> str:
    """The name the clock's selection rule goes by in errors: ``round.selection.name``, else
    ``uniform`` / ``weighted`` as ``round.sampling`` picks it (:func:`selection_value`)."""
    if getattr(rule, "selection", None) is not None:
        return rule.selection.name
    return "weighted" if rule.sampling == "weighted" and rule.policy != "async" else "uniform"


def selection_value(rule):
    """The clock's selection rule: ``round.selection``'s, else the one ``round.sampling`` and
    ``round.weights`` name (``uniform``; ``weighted`` in synchronous rounds: an async server has
    always picked uniformly)."""
    from ..clock.selection import Uniform, Weighted

    if getattr(rule, "selection", None) is not None:
        return rule.selection.clock_value()
    if rule.sampling == "weighted" and rule.policy != "async":
        return Weighted()
    return Uniform(rule.weights)

