"""Diurnal availability: a daily cycle of online probability per client.

``system.availability: {model: diurnal, period: 86400, peak: 0.8, trough: 0.1, phase: 0,
mean_sojourn: 3600}``: client i's online probability pi_i(t) = trough + (peak - trough) *
(1 + cos(2 pi (t - phase_i) / period)) / 2 (highest at t = phase_i), approached by a two-state
chain that goes offline at rate (1 - pi_i(t)) / mean_sojourn and online at rate
pi_i(t) / mean_sojourn. ``phase`` is one number, one per client, or ``{dist: uniform}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Literal

import numpy as np
from pydantic import Field, model_validator

from ..clock import model as cm
from ..clock.availability import AvailabilityModel, ToggleArrays
from ..clock.keyed import keyed_exponential, keyed_uniform
from ..limits import MAX_SECONDS, MIN_DIURNAL_LEVEL, MIN_DIURNAL_PERIOD
from ..section import FieldError
from ..distributions import Uniform
from .section import AvailabilitySection

__all__ = ["Diurnal", "DiurnalAvailability", "DiurnalStates", "DiurnalTimeline", "diurnal_phases"]

INF = math.inf


@dataclass(frozen=True)
class Diurnal(AvailabilityModel):
    """The clock's diurnal value (module docstring); ``phase``: a number, a tuple with one per
    client, or a :class:`fedsim.clock.model.Uniform`."""

    period: float
    peak: float
    trough: float
    phase: cm.PerClient
    mean_sojourn: float

    def timelines(self, m: int, seed: int) -> list:
        phases = diurnal_phases(self.phase, m, seed)
        return [DiurnalTimeline(self, seed, c, float(phases[c])) for c in range(m)]

    def states(self, m: int, seed: int) -> "DiurnalStates":
        return DiurnalStates(self, seed, np.arange(m, dtype=np.int64), diurnal_phases(self.phase, m, seed))

    def time_scales(self) -> dict[str, float]:
        return {"mean_sojourn": self.mean_sojourn}


class DiurnalAvailability(AvailabilitySection):
    """``{model: diurnal, period, peak, trough, phase, mean_sojourn}`` (module docstring)."""

    model: Literal["diurnal"] = "diurnal"
    period: float = Field(86400.0, gt=0, le=MAX_SECONDS)
    peak: float = Field(0.8, ge=0, le=1)
    trough: float = Field(0.1, ge=0, le=1)
    phase: float | tuple[float, ...] | Uniform = 0.0
    mean_sojourn: float = Field(3600.0, gt=0, le=MAX_SECONDS)

    def clock_value(self) -> Diurnal:
        phase = self.phase if isinstance(self.phase, (int, float, tuple)) else self.phase.clock_value()
        return Diurnal(self.period, self.peak, self.trough, phase, self.mean_sojourn)

    def check_clients(self, m: int) -> None:
        if isinstance(self.phase, tuple) and len(self.phase) != m:
            raise FieldError("system.availability.phase", f"needs one phase per client ({m})")

    @model_validator(mode="after")
    def _levels(self):
        if self.trough > self.peak:
            raise FieldError("system.availability.trough", "must be <= peak")
        if self.peak == 0:
            raise FieldError("system.availability.peak", "must be > 0 (else no client is ever online)")
        # Bounds that keep the thinning of diurnal toggles finite (fedsim.limits).
        # trough == 1 (so peak == 1) is "always online" and draws no toggle.
        if self.peak < MIN_DIURNAL_LEVEL:
            raise FieldError("system.availability.peak", f"must be >= {MIN_DIURNAL_LEVEL:g}")
        if self.trough != 1 and 1 - self.trough < MIN_DIURNAL_LEVEL:
            raise FieldError("system.availability.trough", f"must be 1 or at most {1 - MIN_DIURNAL_LEVEL:g}")
        if self.period < MIN_DIURNAL_PERIOD:
            raise FieldError("system.availability.period", f"must be >= {MIN_DIURNAL_PERIOD:g} s")
        ph = self.phase
        values = [ph.low, ph.high] if isinstance(ph, Uniform) else list(ph) if isinstance(ph, tuple) else [ph]
        if any(not abs(x) <= MAX_SECONDS for x in values):
            raise FieldError("system.availability.phase", f"must lie in [-{MAX_SECONDS:g}, {MAX_SECONDS:g}] s")
        return self


def diurnal_phases(phase, m: int, seed: int) -> np.ndarray:
    """Per-client phases (seconds): a number, one per client, or uniform draws
    ``low + (high - low) * u(seed, "phase", client, 0)`` (keyed, so a million cost one vector)."""
    if isinstance(phase, cm.Uniform):
        return phase.low + (phase.high - phase.low) * keyed_uniform(seed, "phase", np.arange(m), 0)
    if isinstance(phase, cm.Constant):
        return np.full(m, float(phase.value))
    if isinstance(phase, tuple):
        if len(phase) != m:
            raise ValueError(f"need one phase per client ({m}), got {len(phase)}")
        return np.asarray(phase, dtype=np.float64)
    return np.full(m, float(phase))


class DiurnalStates(ToggleArrays):
    """Diurnal availability (:class:`fedsim.clock.model.Diurnal`) of ``clients`` as arrays.

    The chain's toggle rates vary with time, so toggles are found by thinning (Lewis and Shedler,
    "Simulation of nonhomogeneous Poisson processes by thinning", 1979): candidates at the constant
    rate max(peak, 1 - trough) / mean_sojourn, each accepted with probability (its state's rate at
    that time) / (that bound). Keyed draws ``("availability", client, k)``: k = 0 the initial state,
    k = 2j and 2j + 1 (j >= 1) candidate j's gap and acceptance. The initial state is online with
    the periodic regime's probability at t = 0 (below), so the process is in its long-run cycle
    from the start: with tau = mean_sojourn and w = 2 pi / period, p(t) = P(online at t) solves
    p' = (pi(t) - p) / tau, whose periodic solution is
    p(t) = a + b cos(w (t - phase) - atan(w tau)) / sqrt(1 + (w tau)^2), a = (peak + trough) / 2,
    b = (peak - trough) / 2; its mean over a period (the long-run online share) is a.
    ``online`` and ``next`` (the next toggle of each client) as in :class:`~fedsim.clock.availability.ToggleArrays`.
    """

    PER_CLIENT = ("online", "next", "clients", "phase", "j", "t")

    def __init__(self, d, seed: int, clients: np.ndarray, phase: np.ndarray):
        self.seed, self.clients, self.phase = seed, clients, phase
        self.a, self.b = (d.peak + d.trough) / 2, (d.peak - d.trough) / 2
        self.w, self.tau = 2 * math.pi / d.period, float(d.mean_sojourn)
        self.bound = max(d.peak, 1 - d.trough) / self.tau
        wt = self.w * self.tau
        p0 = self.a + self.b * np.cos(self.w * (0.0 - phase) - math.atan(wt)) / math.sqrt(1 + wt * wt)
        self.online = keyed_uniform(seed, "availability", clients, 0) < p0
        n = len(clients)
        self.j = np.zeros(n, dtype=np.int64)  # candidates drawn
        self.t = np.zeros(n)  # time of the last candidate
        self.next = np.full(n, INF)
        if d.trough < 1:  # trough == peak == 1: always online (p0 = 1), no toggle to find
            self._find(np.arange(n, dtype=np.int64))

    def pi(self, idx: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Target online probability of clients ``idx`` (positions) at times t."""
        return self.a + self.b * np.cos(self.w * (t - self.phase[idx]))

    def _find(self, idx: np.ndarray) -> None:
        """Set ``next`` of clients ``idx`` to their next accepted candidate."""
        while len(idx):
            self.j[idx] += 1
            c, j = self.clients[idx], self.j[idx]
            t = self.t[idx] + keyed_exponential(1.0 / self.bound, self.seed, "availability", c, 2 * j)
            u = keyed_uniform(self.seed, "availability", c, 2 * j + 1)
            self.t[idx] = t
            pi = self.pi(idx, t)
            rate = np.where(self.online[idx], 1.0 - pi, pi) / self.tau
            accept = u * self.bound < rate
            self.next[idx[accept]] = t[accept]
            idx = idx[~accept]

    def toggled(self, idx: np.ndarray) -> None:
        self.next[idx] = INF
        self._find(idx)


class DiurnalTimeline:
    """One client's diurnal availability as a timeline (the draws of :class:`DiurnalStates`)."""

    changes = True

    def __init__(self, d, seed: int, client: int, phase: float):
        self.args = (d, seed, np.array([client], dtype=np.int64), np.array([phase], dtype=np.float64))
        self.initial = bool(DiurnalStates(*self.args).online[0])
        self.changes = d.trough < 1  # trough == 1: always online

    def toggles(self) -> Iterator[float]:
        st = DiurnalStates(*self.args)
        while True:
            t = float(st.next[0])
            if t == INF:
                return
            st.advance(t)
            yield t
