"""The :class:`Clock`: a scenario's system and round policy turned into a stream of round plans."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator

import numpy as np

from fedsim.errors import ScenarioError
from fedsim.rng import stream

from .availability import ToggleArrays, ToggleStates, checked_timelines
from .draws import SLOWDOWN_FLOOR, ConstantRate, PerClientDraws, whole_steps
from .model import Epochs, Flops, Population, RandInt, RoundRule, Speed, System, Traced, Uniform, WorkCost
from .feedback import Reported, Selector, observations
from .plan import RoundPlan, RoundTable
from .selection import Observations
from .sim import Simulation
from .trace import TraceError, load_trace
from .transfer import Transfers
from .trace_time import traced as _traced
from .checkin import CHECKIN_MIN_CLIENTS

__all__ = ["Clock", "Schedule", "MIN_SOJOURN"]

#: Markov mean sojourns and cycled trace periods are at least this fraction of the shortest round.
MIN_SOJOURN = 1e-4


class Clock:
    """Decides who computes how much and when; never sees tensors.

    Args:
        system: compute, availability, slowdown, latency, network (:class:`~fedsim.clock.model.System`).
        rule: round policy, prescribed work, step cap, selection (:class:`~fedsim.clock.model.RoundRule`).
        population: n_i and p_i of the clients.
        seed: scenario seed; every draw is ``stream(seed, purpose, *keys)``.
        cost: FLOPs of one local step and bytes transferred (needed by ``Flops`` compute and by a
            ``Network``).
        fast: use the policy's fast path (vectorised for window, wait, deadline, overcommit; the
            heap for async) rather than the SimPy simulation (None: whenever it applies, i.e.
            with ``trace_semantics: fedsim``).
        checkin: async: pick clients by keyed check-in draws (:mod:`fedsim.clock.checkin`);
            None: for populations of at least ``CHECKIN_MIN_CLIENTS``.
        devices: ``system.coupling``: client c runs on device ``devices[c]`` (a permutation of
            0..m-1, :mod:`fedsim.clock.coupling`): its speed / FLOP/s / bandwidth draws, trace rows
            and availability are that device's; None: device c (every client its own).

    The cross-field rules of the inputs are checked where they are validated
    (:mod:`fedsim.scenario`). The clock is a pure description: :meth:`schedule` starts a fresh
    simulation at t = 0 on every call, a deterministic function of the arguments above and of
    what is observed after each plan (which only a selection rule reads). A resumed run replays
    plans 0 .. k - 1 with the observations it logged (fedsim.runner.checkpoint).
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
        checkin: bool | None = None,
        devices: np.ndarray | None = None,
    ):
        self.system, self.rule, self.population, self.seed = system, rule, population, int(seed)
        self.devices = None if devices is None else _permutation(devices, len(population))
        self.client_sizes = population.sizes
        self.p = population.p
        m = self.num_clients = len(population)
        self.latency = float(system.latency)
        needs_cost = isinstance(system.compute, Flops) or system.network is not None
        if needs_cost and cost is None:
            raise ValueError("system.compute flops / system.network need the model's WorkCost (cost=)")

        compute, availability = system.compute, system.availability
        self.sessions = None  # trace_semantics fedscale: the clients' traces, for SessionIndex
        if isinstance(compute, Traced) or isinstance(availability, Traced):
            tr = compute if isinstance(compute, Traced) else availability
            trace = load_trace(tr.path, m)
            if self.devices is not None:  # system.coupling: client c replays device devices[c]'s rows
                trace = _reindexed_trace(trace, self.devices)
            clients, self._rates, self._timelines, means = _traced(
                trace, tr.repeat, 3 * tr.batch_size if trace.device else None, tr.semantics == "fedscale")
            if tr.semantics == "fedscale":  # FedScale: the job computes at its speed throughout
                self.sessions = clients  # Simulation keeps one SessionIndex per client
                if rule.policy.keeps_first:  # FedScale's over-commitment rounds down: int(K F)
                    self.rule = rule = replace(rule, policy=replace(rule.policy, fedscale=True))
            self._speed_draws = PerClientDraws(means, m, self.seed, "speed")
            self._step_flops = None
            self._trace_clients = clients
        else:
            trace = None
            self._rates = self._timelines = self._trace_clients = None
            if self.devices is not None and not isinstance(availability, Traced):
                from .coupling import reindexed_availability

                self.system = system = replace(system, availability=reindexed_availability(availability, self.devices))
            if isinstance(compute, Speed):
                self._speed_draws = PerClientDraws(compute.steps_per_second, m, self.seed, "speed", self.devices)
                self._step_flops = None
            else:
                self._speed_draws = PerClientDraws(compute.flops, m, self.seed, "flops", self.devices)
                self._step_flops = float(cost.step_flops)
        self.transfers = self._transfers(trace, cost)

        self.fixed_work = self._fixed_work_caps()
        self._check_event_rate()
        self._check_transfers(trace)
        self.checkin = m >= CHECKIN_MIN_CLIENTS if checkin is None else bool(checkin)
        eligible = self.sessions is None
        if fast and self.sessions is not None:
            raise ValueError("the vectorised path needs trace_semantics fedsim")
        self.fast = eligible if fast is None else bool(fast)
        self.params = None if cost is None else cost.params
        server = system.server
        if server is not None and server.aggregate_flops is not None and not self.params:
            raise ValueError("system.server.aggregate flops needs the model's parameter count (WorkCost.params)")

    def aggregation_seconds(self, updates: int) -> float:
        """How long the server takes to aggregate ``updates`` client updates (0 without
        ``system.server``'s aggregation time)."""
        server = self.system.server
        return 0.0 if server is None else server.aggregation_seconds(updates, self.params)

    @property
    def paced(self) -> bool:
        """Whether the server's aggregation takes time (each round opens when the last closed)."""
        return self.system.server is not None and self.system.server.aggregates

    @property
    def general(self) -> bool:
        """Whether jobs need events (:mod:`fedsim.clock.jobs`): a shared server link, resume after
        outages, partial uploads at a deadline, async time budgets or the server's aggregation time."""
        return (self.transfers.shared or self.system.on_outage == "resume" or self.rule.on_deadline == "partial"
                or self.rule.local_time is not None or self.paced)

    def rate_of(self, client: int):
        """Client ``client``'s rate (``fit``, ``finish``): its trace's, or its constant speed."""
        if self._rates is not None:
            return self._rates[client]
        return ConstantRate(float(self.speed_of(np.array([client]))[0]))

    def _transfers(self, trace, cost: WorkCost | None) -> Transfers:
        """The transfer seam (:class:`~fedsim.clock.transfer.Transfers`): bandwidths in bits per
        second from ``system.network``, or a device trace's kbit/s (then bits are kbit, / 1024,
        and a server link's bits/s are read as kbit/s / 1024 too), and the server's link."""
        net, m, server = self.system.network, self.num_clients, self.system.server
        caps = {} if server is None else {"down_capacity": server.down, "up_capacity": server.up}
        if trace is not None and trace.device:
            if net is not None:
                raise ScenarioError("system.network: a device trace gives the bandwidths; give one or the other")
            if cost is None:
                raise ValueError("a device trace needs the model's WorkCost (cost=) for its transfers")
            caps = {k: None if v is None else v / 1024 for k, v in caps.items()}
            return Transfers(self.latency, PerClientDraws(tuple(trace.down_kbps), m, self.seed, "down"),
                             float(cost.model_bytes) * 8 / 1024, PerClientDraws(tuple(trace.up_kbps), m, self.seed, "up"),
                             float(cost.upload_bytes) * 8 / 1024, **caps)
        if net is None:
            return Transfers(self.latency)
        return Transfers(self.latency, PerClientDraws(net.down, m, self.seed, "down", self.devices),
                         float(cost.model_bytes) * 8, PerClientDraws(net.up, m, self.seed, "up", self.devices),
                         float(cost.upload_bytes) * 8, **caps)

    def _check_transfers(self, trace) -> None:
        """Refuse a network (or device trace) with which no client could ever fit its download and
        upload into a window or deadline: every job would be dropped."""
        span = self.rule.policy.span()
        if not self.transfers.network or span is None:
            return
        length, key = span
        fastest = self.transfers.quickest(_highest)
        if fastest >= length:
            where = trace.path if trace is not None else "system.network"
            raise ScenarioError(
                f"{where}: the quickest download and upload take {fastest:g} s, not less than {key} "
                f"({length:g} s): no client could ever report"
            )

    # ------------------------------------------------------------------ per-client facts
    def speed_of(self, clients: np.ndarray) -> np.ndarray:
        """Base speeds (steps per second) of ``clients``: drawn from stream ``("speed", c)``, or
        FLOP/s from ``("flops", c)`` / the step's FLOPs; traces: the mean speed while online."""
        v = self._speed_draws.take(clients)
        return v if self._step_flops is None else v / self._step_flops

    def transfers_of(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(download, upload) seconds of ``clients`` each alone (:meth:`Transfers.solo`)."""
        return self.transfers.solo(clients)

    @property
    def download(self) -> np.ndarray:
        """Every client's download seconds (see :meth:`transfers_of`)."""
        return self.transfers_of(np.arange(self.num_clients))[0]

    @property
    def upload(self) -> np.ndarray:
        """Every client's upload seconds (see :meth:`transfers_of`)."""
        return self.transfers_of(np.arange(self.num_clients))[1]

    @property
    def timelines(self) -> list:
        """Per-client availability timelines (built on first use: the vectorised path needs none)."""
        if self._timelines is None:
            self._timelines = checked_timelines(self.system.availability, self.num_clients, self.seed)
        return self._timelines

    def availability_states(self) -> ToggleArrays | None:
        """Every client's availability as arrays for the vectorised paths (None: always online)."""
        av, m = self.system.availability, self.num_clients
        if isinstance(av, Traced):
            return ToggleStates(self.timelines)
        states = av.states(m, self.seed)
        if states is not None and not (np.shape(states.online) == np.shape(states.next) == (m,)):
            raise ScenarioError(f"system.availability: {type(av).__name__}.states gave arrays of shapes "
                                f"{np.shape(states.online)} and {np.shape(states.next)} for {m} clients")
        return states

    @property
    def rates(self) -> list:
        """Per-client rates (steps per unit of time), built on first use."""
        if self._rates is None:
            self._rates = [ConstantRate(s) for s in self.speeds]
        return self._rates

    def time_scale(self) -> float:
        """The shortest round the schedule can have, in seconds: the window or deadline, else the
        quickest job (download + one step or the least prescribed work + upload). Speeds or
        bandwidths drawn from a distribution count at its largest value (unbounded: no time), so
        a million clients need no draws here; only when that bound is 0 are the draws taken."""
        span = self.rule.policy.span()
        if span is not None:
            return span[0]
        work = self.rule.work
        low = 1 if work is None else max(int(getattr(work.dist, "low", getattr(work.dist, "value", 1))), 1)
        if isinstance(work, Epochs):
            low = max(low * int(self.client_sizes.min()) // work.batch_size, 1)
        tr = self.transfers
        drawn = [self._speed_draws] + ([tr.down, tr.up] if tr.network else [])
        if any(d.lazy for d in drawn):  # a distribution: the quickest job it allows, without drawing m values
            transfers = tr.quickest(_highest)
            fastest = _highest(self._speed_draws) / (1.0 if self._step_flops is None else self._step_flops)
            bound = transfers + low / fastest
            if bound > 0:
                return float(bound)
        with np.errstate(divide="ignore"):
            job = self.download + self.upload + low / self.speeds
        return float(job.min())

    def _check_event_rate(self) -> None:
        """Availability may change at most ~1/MIN_SOJOURN times per :meth:`time_scale`: a model's
        time scales (Markov mean sojourns, ``time_scales()``) and the periods of cycling traces
        must be at least ``MIN_SOJOURN * time_scale()`` (else the simulation would process an
        unbounded number of toggles per round)."""
        availability = self.system.availability
        scales = {} if isinstance(availability, Traced) else availability.time_scales()
        if not scales and not isinstance(availability, Traced):
            return
        least = MIN_SOJOURN * self.time_scale()
        for key, seconds in scales.items():
            if seconds < least:
                raise ScenarioError(
                    f"system.availability.{key}: must be at least {least:g} s ({MIN_SOJOURN:g} of the "
                    f"shortest round, {self.time_scale():g} s): shorter sojourns flip faster than rounds run"
                )
        if not isinstance(availability, Traced):
            return
        for c, tl in enumerate(self.timelines):
            if tl.changes and tl.repeat == "cycle" and tl.period < least:
                raise TraceError(
                    f"{availability.path}: client {c}'s trace period {tl.period:g} s is shorter than {least:g} s "
                    f"({MIN_SOJOURN:g} of the shortest round, {self.time_scale():g} s); it cannot be cycled"
                )

    @property
    def speeds(self) -> np.ndarray:
        """Per-client base speed (steps per simulated second; with a trace, the time-weighted
        mean speed while online over one period)."""
        return self.speed_of(np.arange(self.num_clients)).copy()

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
        if self.fixed_work is not None:
            w = self.fixed_work[client]
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
        work, m, cap = self.rule.work, self.num_clients, self.rule.max_local_steps
        if work is None:
            return np.full(m, -1 if cap is None else cap, dtype=np.int64)
        if isinstance(work.dist, RandInt):
            return None
        value = work.dist.value
        if not isinstance(work, Epochs):
            steps = np.full(m, int(math.floor(value)), dtype=np.int64)
        elif float(value).is_integer():
            steps = int(value) * self.client_sizes // work.batch_size
        else:
            steps = whole_steps(value * self.client_sizes / work.batch_size)
        return steps if cap is None else np.minimum(steps, cap)

    # ------------------------------------------------------------------ schedules
    def schedule(self, *, tables: bool = False, log: list | None = None) -> "Schedule":
        """A fresh closed-loop run of the clock from t = 0 (:class:`Schedule`): plans one at a
        time, each followed by what the server learned (:meth:`Schedule.observe`). ``tables``:
        yield :class:`RoundTable` columns rather than :class:`RoundPlan` rows. ``log`` (SimPy
        path only) collects ``(time, event, client, key)`` tuples: start, download, compute,
        upload, failed, dropped, online, offline."""
        return Schedule(self, tables=tables, log=log)

    def plans(self, log: list | None = None) -> Iterator[RoundPlan]:
        """Infinite iterator of round plans, each observed as it stands (no reported losses):
        :meth:`schedule` for a run whose selection hears no losses."""
        return self.schedule(log=log)

    def tables(self) -> Iterator[RoundTable]:
        """The same schedule as :meth:`plans`, as numpy columns (fast for clock-only runs)."""
        return self.schedule(tables=True)


class Schedule:
    """One closed-loop run of a :class:`Clock`: iterate for the plans; after each, the runner may
    call :meth:`observe` with what the trained clients reported (otherwise the plan is observed
    as it stands when the next one is asked for). The clock plans the next round only after the
    last plan was observed, so the selection rule (:class:`~fedsim.clock.feedback.Selector`) sees
    it: a synchronous round r + 1 is picked after plan r; an async pick at time t comes after
    every plan that closed at or before t.

    The system itself never depends on what is observed: speeds, slowdowns, availability and the
    per-job draws are keyed by (seed, purpose, client, key), so two selection rules that ask the
    same client in the same round give it the same work in the same seconds.
    """

    def __init__(self, clock: Clock, *, tables: bool = False, log: list | None = None):
        self.clock, self._tables = clock, bool(tables)
        self.selector = Selector(clock.rule.selection, clock.num_clients, clock.p, clock.seed, clock.checkin,
                                 name=clock.rule.selection_name)
        self._feedback = bool(clock.rule.selection.uses_feedback)
        self._sim = None
        if clock.fast and log is None:
            self._source = clock.rule.policy.tables(clock, self.selector)
        else:
            self._sim = Simulation(clock, self.selector, log)
        self._last = None  # the last plan handed out, not yet observed

    def __iter__(self) -> "Schedule":
        return self

    def __next__(self):
        if self._last is not None:
            self.observe()
        if self._sim is not None:
            plan = self._sim.next_plan()
            self._last = plan
            return plan.table() if self._tables else plan
        table = next(self._source)
        self._last = table
        return table if self._tables else table.plan()

    def observe(self, reported: Reported | None = None, *, given: Observations | None = None) -> Observations | None:
        """The server has learned the last plan: its rows plus ``reported`` (the trained clients'
        losses), or exactly ``given`` (a resumed run replaying its log). Returns what the rule
        was given (None when the rule reads no observations)."""
        last, self._last = self._last, None
        if last is None:
            raise RuntimeError("Schedule.observe: no plan to observe (each plan is observed once)")
        obs = given
        if obs is None and self._feedback:
            obs = observations(last if isinstance(last, RoundTable) else last.table(), reported)
        if obs is not None:
            self.selector.observe(obs)
        if self._sim is not None:
            self._sim.observed()
        return obs


def _permutation(devices, m: int) -> np.ndarray:
    """``devices`` as an int64 permutation of 0..m-1 (else ValueError)."""
    d = np.asarray(devices, dtype=np.int64)
    if d.shape != (m,) or not np.array_equal(np.sort(d), np.arange(m)):
        raise ValueError(f"devices: need a permutation of the {m} clients' devices")
    return d


def _reindexed_trace(trace, devices: np.ndarray):
    """``trace`` with client c holding device ``devices[c]``'s rows and bandwidths."""
    clients = tuple(trace.clients[int(d)] for d in devices)
    down = None if trace.down_kbps is None else np.asarray(trace.down_kbps)[devices]
    up = None if trace.up_kbps is None else np.asarray(trace.up_kbps)[devices]
    return replace(trace, clients=clients, down_kbps=down, up_kbps=up)


def _highest(draws: PerClientDraws) -> float:
    """The largest value ``draws`` can give (inf when a distribution is unbounded above)."""
    spec = draws.spec
    if not draws.lazy:
        return float(np.max(draws.values))
    if isinstance(spec, (Uniform, RandInt)):
        return float(spec.high)
    return math.inf
