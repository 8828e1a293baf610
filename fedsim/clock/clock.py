"""The :class:`Clock`: a scenario's system and round policy turned into a stream of round plans."""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

from fedsim.errors import ScenarioError
from fedsim.rng import stream

from .availability import AlwaysOnline, ConstantRate, MarkovTimeline, OfflineIntervals
from .draws import SLOWDOWN_FLOOR, per_client, select, whole_steps
from .model import (
    Always, Deadline, Epochs, Flops, Intervals, Markov, Population, RandInt, RoundRule, Speed, System,
    Traced, Window, WorkCost,
)
from .plan import JOB_COLUMNS, STATUSES, RoundPlan, RoundTable
from .sim import Simulation
from .trace import TraceError, TraceRate, TraceTimeline, load_trace

__all__ = ["Clock", "MIN_SOJOURN"]

#: Markov mean sojourns and cycled trace periods are at least this fraction of the shortest round.
MIN_SOJOURN = 1e-4

_COMPLETED, _DROPPED = STATUSES.index("completed"), STATUSES.index("dropped")


class Clock:
    """Decides who computes how much and when; never sees tensors.

    Args:
        system: compute, availability, slowdown, latency, network (:class:`~fedsim.clock.model.System`).
        rule: round policy, prescribed work, step cap, selection (:class:`~fedsim.clock.model.RoundRule`).
        population: n_i and p_i of the clients.
        seed: scenario seed; every draw is ``stream(seed, purpose, *keys)``.
        cost: FLOPs of one local step and bytes transferred (needed by ``Flops`` compute and by a
            ``Network``).
        fast: use the vectorised window path (None: whenever it applies, see :attr:`fast`).

    The cross-field rules of the inputs are checked where they are validated
    (:mod:`fedsim.scenario`). The clock is a pure description: :meth:`plans` starts a fresh
    simulation at t = 0 on every call and is a deterministic function of the arguments above.
    Resuming at plan k is ``itertools.islice(clock.plans(), k, None)``.
    """

    def __init__(
        self,
        system: System,
        rule: RoundRule,
        population: Population,
        *,
        seed: int,
        cost: WorkCost | None = None,
        fast: bool | None = None,
    ):
        self.system, self.rule, self.population, self.seed = system, rule, population, int(seed)
        self.client_sizes = population.sizes
        self.p = population.p
        m = self.num_clients = len(population)
        self.latency = float(system.latency)
        needs_cost = isinstance(system.compute, Flops) or system.network is not None
        if needs_cost and cost is None:
            raise ValueError("system.compute flops / system.network need the model's WorkCost (cost=)")

        compute, availability = system.compute, system.availability
        if isinstance(compute, Traced) or isinstance(availability, Traced):
            tr = compute if isinstance(compute, Traced) else availability
            trace = load_trace(tr.path, m)
            self.rates = [TraceRate(t, tr.repeat) for t in trace.clients]
            self.timelines = [TraceTimeline(t, tr.repeat) for t in trace.clients]
            self._speeds = np.array([t.mean_speed for t in trace.clients])
        else:
            if isinstance(compute, Speed):
                self._speeds = per_client(compute.steps_per_second, m, self.seed, "speed")
            else:
                self._speeds = per_client(compute.flops, m, self.seed, "flops") / float(cost.step_flops)
            self.rates = [ConstantRate(s) for s in self._speeds]
            self.timelines = _timelines(availability, m, self.seed)
        self.download, self.upload = self._transfer_seconds(cost)

        self._fixed_work = self._fixed_work_caps()
        self._check_event_rate()
        eligible = (
            isinstance(rule.policy, Window)
            and not isinstance(availability, Traced)
            and all(not tl.changes for tl in self.timelines)
            and all(tl.initial for tl in self.timelines)
        )
        if fast and not eligible:
            raise ValueError("the vectorised path needs policy window, no trace and clients that are always online")
        self.fast = eligible if fast is None else bool(fast)

    def _transfer_seconds(self, cost: WorkCost | None) -> tuple[np.ndarray, np.ndarray]:
        """Per-client download and upload seconds, latency included: L + bytes * 8 / bandwidth."""
        m, L, net = self.num_clients, self.latency, self.system.network
        if net is None:
            return np.full(m, L), np.full(m, L)
        down = per_client(net.down, m, self.seed, "down")
        up = per_client(net.up, m, self.seed, "up")
        return L + float(cost.model_bytes) * 8 / down, L + float(cost.upload_bytes) * 8 / up

    def time_scale(self) -> float:
        """The shortest round the schedule can have, in seconds: the window or deadline, else the
        quickest job (download + one step or the least prescribed work + upload)."""
        policy = self.rule.policy
        if isinstance(policy, Window):
            return float(policy.window)
        if isinstance(policy, Deadline):
            return float(policy.deadline)
        work = self.rule.work
        low = 1 if work is None else max(int(getattr(work.dist, "low", getattr(work.dist, "value", 1))), 1)
        if isinstance(work, Epochs):
            low = max(low * int(self.client_sizes.min()) // work.batch_size, 1)
        with np.errstate(divide="ignore"):
            job = self.download + self.upload + low / self._speeds
        return float(job.min())

    def _check_event_rate(self) -> None:
        """Availability may change at most ~1/MIN_SOJOURN times per :meth:`time_scale`: Markov mean
        sojourns and the periods of cycling traces must be at least ``MIN_SOJOURN * time_scale()``
        (else the simulation would process an unbounded number of toggles per round)."""
        availability = self.system.availability
        if not isinstance(availability, (Markov, Traced)):
            return
        least = MIN_SOJOURN * self.time_scale()
        if isinstance(availability, Markov):
            for key in ("mean_online", "mean_offline"):
                if getattr(availability, key) < least:
                    raise ScenarioError(
                        f"system.availability.{key}: must be at least {least:g} s ({MIN_SOJOURN:g} of the "
                        f"shortest round, {self.time_scale():g} s): shorter sojourns flip faster than rounds run"
                    )
            return
        for c, tl in enumerate(self.timelines):
            if tl.changes and tl.repeat == "cycle" and tl.period < least:
                raise TraceError(
                    f"{availability.path}: client {c}'s trace period {tl.period:g} s is shorter than {least:g} s "
                    f"({MIN_SOJOURN:g} of the shortest round, {self.time_scale():g} s); it cannot be cycled"
                )

    # ------------------------------------------------------------------ per-client facts
    @property
    def speeds(self) -> np.ndarray:
        """Per-client base speed (steps per simulated second; with a trace, the time-weighted
        mean speed while online over one period)."""
        return self._speeds.copy()

    def slowdown(self, client: int, key: int) -> float:
        """Slowdown factor of job (client, key) from stream ``("slowdown", client, key)``; 1 if none."""
        if self.system.slowdown is None:
            return 1.0
        return max(float(self.system.slowdown.sample(stream(self.seed, "slowdown", client, key))), SLOWDOWN_FLOOR)

    def work_cap(self, client: int, key: int) -> int | None:
        """Prescribed local steps of job (client, key), capped by ``max_local_steps``; None if the
        job has no prescribed work and no cap (window policy: only the window limits it).

        ``local_steps``: the number, or a draw from stream ``("work", client, key)``;
        ``local_epochs`` E (same draw): floor(E * n_i / B). The draw depends only on (seed,
        client, key), so a client selected in round r does the same work whatever else changes
        (clients_per_round, sampling, other clients, the algorithm).
        """
        if self._fixed_work is not None:
            w = self._fixed_work[client]
            return None if w < 0 else int(w)
        value = self.rule.work.dist.sample(stream(self.seed, "work", client, key))
        return self._cap(self._steps_from(value, client))

    def _steps_from(self, value: float, client: int) -> int:
        work = self.rule.work
        if not isinstance(work, Epochs):
            return int(math.floor(value))
        n, B = int(self.client_sizes[client]), work.batch_size
        if float(value).is_integer():
            return int(value) * n // B
        return whole_steps(value * n / B)

    def _cap(self, steps: int | None) -> int | None:
        cap = self.rule.max_local_steps
        if steps is None:
            return cap
        return steps if cap is None else min(steps, cap)

    def _fixed_work_caps(self) -> np.ndarray | None:
        """Per-client work cap when it is not random (-1 = none), else None."""
        work = self.rule.work
        if work is None:
            caps = [self._cap(None)] * self.num_clients
        elif isinstance(work.dist, RandInt):
            return None
        else:
            caps = [self._cap(self._steps_from(work.dist.value, c)) for c in range(self.num_clients)]
        return np.array([-1 if c is None else c for c in caps], dtype=np.int64)

    # ------------------------------------------------------------------ schedules
    def plans(self, log: list | None = None) -> Iterator[RoundPlan]:
        """Infinite iterator of round plans; each ``next()`` advances the simulation until the
        next plan is ready. ``log`` (SimPy path only) collects ``(time, event, client, key)``
        tuples: start, download, compute, upload, failed, dropped, online, offline."""
        if self.fast and log is None:
            for table in self._fast_tables():
                yield table.plan()
            return
        sim = Simulation(self, log)
        while True:
            yield sim.next_plan()

    def tables(self) -> Iterator[RoundTable]:
        """The same schedule as :meth:`plans`, as numpy columns (fast for clock-only runs)."""
        if self.fast:
            yield from self._fast_tables()
            return
        for plan in self.plans():
            yield plan.table()

    def _fast_tables(self) -> Iterator[RoundTable]:
        """Vectorised window policy for always-online clients without a trace.

        Computes exactly what the SimPy path computes (same streams, same floating-point
        expressions as ``Simulation._start``, ``ConstantRate.fit`` / ``finish``): with no outage
        nothing can interrupt a job, so each job is a closed-form function of (speed, slowdown,
        work cap, window, latency). ``tests/test_clock.py`` checks the two paths agree.
        """
        rule, m = self.rule, self.num_clients
        everyone = np.arange(m, dtype=np.int64)
        W = rule.policy.window
        no_slowdown = self.system.slowdown is None
        for r in itertools.count():
            t_open, close = r * W, (r + 1) * W
            chosen, counts, weights = select(everyone, rule.clients_per_round, rule.sampling, self.p, self.seed, r)
            speed = self._speeds[chosen]
            down, up = self.download[chosen], self.upload[chosen]
            slow = 1.0 if no_slowdown else np.array([self.slowdown(int(c), r) for c in chosen])
            t_d = t_open + down
            t_to = close - up
            tau = whole_steps((t_to - t_d) * speed / slow)
            if self._fixed_work is not None:
                cap = self._fixed_work[chosen]
                tau = np.where(cap >= 0, np.minimum(tau, cap), tau)
            else:
                cap = np.array([self.work_cap(int(c), r) for c in chosen], dtype=np.int64)
                tau = np.minimum(tau, cap)
            t_c = np.minimum(t_d + tau * slow / speed, t_to)
            t_u = np.minimum(t_c + up, close)
            done = tau > 0
            n = len(chosen)
            cols = {
                "round": np.full(n, r, dtype=np.int64),
                "client": chosen.astype(np.int64),
                "status": np.where(done, _COMPLETED, _DROPPED).astype(np.int8),
                "steps": np.where(done, tau, 0).astype(np.int64),
                "start": np.full(n, t_open, dtype=np.float64),
                "end": np.where(done, t_u, close).astype(np.float64),
                "key": np.full(n, r, dtype=np.int64),
                "version": np.full(n, r, dtype=np.int64),
                "staleness": np.zeros(n, dtype=np.int64),
                "weight": np.asarray(weights, dtype=np.float64),
                "count": np.asarray(counts, dtype=np.int64),
                "download": np.where(done, down, 0.0),
                "upload": np.where(done, up, 0.0),
            }
            assert tuple(cols) == JOB_COLUMNS
            yield RoundTable(r, t_open, close, r + 1, cols, m)


def _timelines(availability: Always | Markov | Intervals, m: int, seed: int) -> list:
    if isinstance(availability, Always):
        return [AlwaysOnline() for _ in range(m)]
    if isinstance(availability, Markov):
        return [MarkovTimeline(availability.mean_online, availability.mean_offline, seed, c) for c in range(m)]
    if len(availability.offline) != m:
        raise ValueError(f"system.availability: needs one interval list per client ({m})")
    return [OfflineIntervals(iv) for iv in availability.offline]
