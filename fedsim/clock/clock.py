"""The :class:`Clock`: a scenario's system and round policy turned into a stream of round plans."""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Sequence

import numpy as np

from fedsim.rng import stream
from fedsim.scenario import Constant, MarkovAvailability, RandInt, RoundConfig, ScenarioError, SystemConfig

from .availability import Always, ConstantRate, Markov, OfflineIntervals
from .draws import SLOWDOWN_FLOOR, base_speeds, draw, select, whole_steps
from .plan import JOB_COLUMNS, STATUSES, RoundPlan, RoundTable
from .sim import Simulation
from .trace import TraceRate, TraceTimeline, load_trace

__all__ = ["Clock"]

_COMPLETED, _DROPPED = STATUSES.index("completed"), STATUSES.index("dropped")


class Clock:
    """Decides who computes how much and when; never sees tensors.

    Args:
        system: speeds, slowdown, latency, availability or a trace.
        round_cfg: round policy, work, selection (and async concurrency / buffer).
        seed: scenario seed; every draw is ``stream(seed, purpose, *keys)``.
        client_sizes: n_i, for ``local_epochs`` (tau_i = floor(E n_i / B)) and default weights.
        weights: p_i (default n_i / n), for weighted selection and raw aggregation weights.
        batch_size: B, for ``local_epochs``.
        fast: use the vectorised window path (None: whenever it applies, see :attr:`fast`).

    The clock is a pure description: :meth:`plans` starts a fresh simulation at t = 0 on every call
    and is a deterministic function of the arguments above. Resuming at plan k is
    ``itertools.islice(clock.plans(), k, None)``.
    """

    def __init__(
        self,
        system: SystemConfig,
        round_cfg: RoundConfig,
        *,
        seed: int,
        client_sizes: Sequence[int],
        weights: Sequence[float] | None = None,
        batch_size: int = 32,
        fast: bool | None = None,
    ):
        self.system, self.round_cfg, self.seed = system, round_cfg, int(seed)
        self.client_sizes = np.asarray(client_sizes, dtype=np.int64)
        m = len(self.client_sizes)
        if m == 0:
            raise ValueError("the clock needs at least one client")
        self.num_clients = m
        p = self.client_sizes / self.client_sizes.sum() if weights is None else np.asarray(weights, dtype=np.float64)
        if p.shape != (m,):
            raise ValueError(f"weights: need one weight per client ({m})")
        self.p = p
        self.batch_size = int(batch_size)
        self.latency = float(system.latency)
        _check(round_cfg, m, self.latency)

        if system.trace is not None:
            trace = load_trace(system.trace, m)
            self.rates = [TraceRate(t, system.trace_repeat) for t in trace.clients]
            self.timelines = [TraceTimeline(t, system.trace_repeat) for t in trace.clients]
            self._speeds = np.array([t.mean_speed for t in trace.clients])
        else:
            self._speeds = base_speeds(system.speed, m, self.seed)
            self.rates = [ConstantRate(s) for s in self._speeds]
            self.timelines = _timelines(system.availability, m, self.seed)

        self._fixed_work = self._fixed_work_caps()
        eligible = (
            round_cfg.policy == "window"
            and system.trace is None
            and all(isinstance(tl, Always) or not tl.changes for tl in self.timelines)
            and all(tl.initial for tl in self.timelines)
        )
        if fast and not eligible:
            raise ValueError("the vectorised path needs policy window, no trace and clients that are always online")
        self.fast = eligible if fast is None else bool(fast)

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
        return max(float(draw(self.system.slowdown, stream(self.seed, "slowdown", client, key))), SLOWDOWN_FLOOR)

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
        cfg = self.round_cfg
        dist = cfg.local_steps if cfg.local_steps is not None else cfg.local_epochs
        value = draw(dist, stream(self.seed, "work", client, key))
        return self._cap(self._steps_from(value, client))

    def _steps_from(self, value: Any, client: int) -> int:
        if self.round_cfg.local_steps is not None:
            return int(math.floor(value))
        n, B = int(self.client_sizes[client]), self.batch_size
        if float(value).is_integer():
            return int(value) * n // B
        return whole_steps(value * n / B)

    def _cap(self, steps: int | None) -> int | None:
        cap = self.round_cfg.max_local_steps
        if steps is None:
            return cap
        return steps if cap is None else min(steps, cap)

    def _fixed_work_caps(self) -> np.ndarray | None:
        """Per-client work cap when it is not random (-1 = none), else None."""
        cfg = self.round_cfg
        dist = cfg.local_steps if cfg.local_steps is not None else cfg.local_epochs
        if isinstance(dist, RandInt):
            return None
        if dist is None:
            caps = [self._cap(None)] * self.num_clients
        else:
            value = dist.value if isinstance(dist, Constant) else dist
            caps = [self._cap(self._steps_from(value, c)) for c in range(self.num_clients)]
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
        cfg, L, m = self.round_cfg, self.latency, self.num_clients
        everyone = np.arange(m, dtype=np.int64)
        W = cfg.window
        no_slowdown = self.system.slowdown is None
        for r in itertools.count():
            t_open, close = r * W, (r + 1) * W
            chosen, counts, weights = select(everyone, cfg.clients_per_round, cfg.sampling, self.p, self.seed, r)
            speed = self._speeds[chosen]
            slow = 1.0 if no_slowdown else np.array([self.slowdown(int(c), r) for c in chosen])
            t_d = t_open + L
            t_to = close - L
            tau = whole_steps((t_to - t_d) * speed / slow)
            if self._fixed_work is not None:
                cap = self._fixed_work[chosen]
                tau = np.where(cap >= 0, np.minimum(tau, cap), tau)
            else:
                cap = np.array([self.work_cap(int(c), r) for c in chosen], dtype=np.int64)
                tau = np.minimum(tau, cap)
            t_c = np.minimum(t_d + tau * slow / speed, t_to)
            t_u = np.minimum(t_c + L, close)
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
                "download": np.zeros(n, dtype=np.float64),  # transfer seconds: filled by the device model
                "upload": np.zeros(n, dtype=np.float64),
            }
            assert tuple(cols) == JOB_COLUMNS
            yield RoundTable(r, t_open, close, r + 1, cols)


def _check(cfg: RoundConfig, m: int, latency: float) -> None:
    """The cross-field rules the clock relies on (the scenario validates them too)."""
    if cfg.policy == "window" and (cfg.window is None or not cfg.window > 2 * latency):
        raise ScenarioError("round.window: must be longer than two latencies (download + upload)")
    if cfg.policy == "deadline" and (cfg.deadline is None or not cfg.deadline > 2 * latency):
        raise ScenarioError("round.deadline: must be longer than two latencies (download + upload)")
    if cfg.policy in ("wait", "deadline", "async") and cfg.local_steps is None and cfg.local_epochs is None:
        raise ScenarioError(f"round.local_steps: policy {cfg.policy} needs local_steps or local_epochs")
    if cfg.local_steps is not None and cfg.local_epochs is not None:
        raise ScenarioError("round.local_epochs: give local_steps or local_epochs, not both")
    if cfg.policy == "async" and (cfg.concurrency is None or cfg.concurrency > m):
        raise ScenarioError(f"round.concurrency: required for policy async, at most the number of clients ({m})")
    if cfg.clients_per_round is not None and cfg.clients_per_round > m:
        raise ScenarioError(f"round.clients_per_round: must be <= data.clients ({m})")


def _timelines(availability: Any, m: int, seed: int) -> list:
    if availability == "always":
        return [Always() for _ in range(m)]
    if isinstance(availability, MarkovAvailability):
        return [Markov(availability.mean_online, availability.mean_offline, seed, c) for c in range(m)]
    if len(availability) != m:
        raise ScenarioError(f"system.availability: needs one interval list per client ({m})")
    return [OfflineIntervals(iv) for iv in availability]
