"""Generated FedScale-shaped device populations, written in fedsim's trace format.

FedScale's measured populations (Lai et al., ICML 2022, Sec. 3: compute speeds from AI Benchmark,
bandwidths from MobiPerf, availability from a 136k-device user-behaviour trace) are heavy-tailed in
compute and bandwidth and diurnal in availability (devices train while charging, mostly at night).
This module draws such a population from a seed, with these stated, adjustable laws:

* per-sample compute time: ``sample_ms_median * exp(sample_ms_sigma * Z)`` milliseconds
  (lognormal, one draw per device);
* bandwidths: ``down_kbps_median * exp(kbps_sigma * Z')`` and ``up_kbps_median * exp(kbps_sigma *
  Z')`` kbit/s with the same Z' for both directions (a device's link is fast or slow both ways);
* availability: one online session per day. Time 0 is noon; device i's session on day d starts
  at ``d * 86400 + 3600 * (session_start_hours + tz_i + jitter)`` seconds, rounded to whole
  seconds, with ``tz_i ~ N(0, tz_hours^2)`` (a per-device phase: time zones and habits) and
  ``jitter ~ N(0, jitter_hours^2)`` per day, and lasts ``online_hours * exp(length_sigma * Z'')``
  hours; sessions are clipped to ``[0, days * 86400]`` and start no earlier than the previous one
  ended. Everything else is offline; the period (the replay's cycle) is ``days`` days.

The defaults (30 ms per sample, 10 / 5 Mbit/s down / up, 8 h online from 22:00, i.e.
``session_start_hours = 10``) are fedsim's choices of a plausible phone, not fitted numbers: set
them from the population you mean to study. Draws come from named streams ``(seed, "population-...")`` (fedsim.rng).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from fedsim.errors import ScenarioError
from fedsim.limits import MAX_CLIENTS, MAX_SECONDS, MAX_SEED, MAX_SIGMA, MAX_SPEED, MAX_TRACE_ROWS
from fedsim.rng import stream

from .traceio import number, write_atomic

__all__ = ["PopulationSpec", "population_rows", "write_population"]

DAY = 86400.0
#: Most days: the period (days x 86400 s) stays within MAX_SECONDS, the trace reader's bound.
MAX_DAYS = int(MAX_SECONDS // DAY)


def _short(v) -> str:
    return repr(v) if abs(v) < 10**30 else f"an integer of {len(str(abs(v)))} digits"


@dataclass(frozen=True)
class PopulationSpec:
    """Parameters of a generated population (see the module docstring for the laws)."""

    clients: int
    seed: int = 0
    days: int = 7
    sample_ms_median: float = 30.0
    sample_ms_sigma: float = 1.0
    down_kbps_median: float = 10_000.0
    up_kbps_median: float = 5_000.0
    kbps_sigma: float = 1.0
    session_start_hours: float = 10.0
    tz_hours: float = 2.0
    jitter_hours: float = 1.0
    online_hours: float = 8.0
    length_sigma: float = 0.3

    def __post_init__(self) -> None:
        # The bounds of validation and of the trace reader (fedsim.limits): what is generated can be read.
        for key, high in (("clients", MAX_CLIENTS), ("days", MAX_DAYS), ("seed", MAX_SEED)):
            v = getattr(self, key)
            if not (1 if key != "seed" else 0) <= v <= high:
                raise ValueError(f"--{key}: must be in [{1 if key != 'seed' else 0}, {high}], got {_short(v)}")
        if self.clients * (2 * self.days + 1) > MAX_TRACE_ROWS:
            raise ValueError(f"--clients {self.clients} x --days {self.days}: up to {self.clients * (2 * self.days + 1):,} "
                             f"rows, more than the {MAX_TRACE_ROWS:,} fedsim reads")
        hours = MAX_SECONDS / 3600
        for key, low, high in (("sample_ms_median", 1000 / MAX_SPEED, 1000 * MAX_SECONDS), ("down_kbps_median", 0, MAX_SECONDS),
                               ("up_kbps_median", 0, MAX_SECONDS), ("online_hours", 0, hours)):  # fmt: skip
            v = getattr(self, key)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"--{key.replace('_', '-')}: must be a finite number > 0, got {v}")
            if not low <= v <= high:
                raise ValueError(f"--{key.replace('_', '-')}: must be in [{low:g}, {high:g}], got {v}")
        for key, high in (("sample_ms_sigma", MAX_SIGMA), ("kbps_sigma", MAX_SIGMA), ("tz_hours", hours),
                          ("jitter_hours", hours), ("length_sigma", MAX_SIGMA), ("session_start_hours", hours)):  # fmt: skip
            v = getattr(self, key)
            if not (np.isfinite(v) and 0 <= v <= high):
                raise ValueError(f"--{key.replace('_', '-')}: must be a finite number in [0, {high:g}], got {v}")


def _lognormal(spec: PopulationSpec, name: str, median: float, sigma: float, shape) -> np.ndarray:
    """``median * exp(sigma * Z)``, Z standard normal of ``shape`` from the stream ``(seed, name)``."""
    return median * np.exp(sigma * stream(spec.seed, name).standard_normal(shape))


def _sessions(spec: PopulationSpec) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends), each ``(clients, days)`` seconds, whole seconds, clipped and ordered."""
    n, days = spec.clients, spec.days
    period = days * DAY
    tz = stream(spec.seed, "population-phase").normal(0.0, spec.tz_hours * 3600.0, n)
    jitter = stream(spec.seed, "population-jitter").normal(0.0, spec.jitter_hours * 3600.0, (n, days))
    length = _lognormal(spec, "population-length", spec.online_hours * 3600.0, spec.length_sigma, (n, days))
    start = np.arange(days) * DAY + spec.session_start_hours * 3600.0 + tz[:, None] + jitter
    start = np.rint(np.clip(start, 0.0, period))
    end = np.rint(np.clip(start + length, 0.0, period))
    for d in range(1, days):  # a session starts after the previous one ended
        start[:, d] = np.maximum(start[:, d], end[:, d - 1])
        end[:, d] = np.maximum(end[:, d], start[:, d])
    return start, end


def _merged(starts: list[float], ends: list[float]) -> list[tuple[float, float]]:
    """Non-empty sessions in order, those that touch joined into one."""
    out: list[tuple[float, float]] = []
    for a, b in zip(starts, ends):
        if b <= a:
            continue
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _drawn_in_bounds(x: np.ndarray, low: float, high: float, what: str, unit: str, flag: str) -> None:
    """ScenarioError unless every drawn value can be read back (the trace reader's bounds)."""
    bad = x[~((x > low) & (x <= high))] if low == 0 else x[~((x >= low) & (x <= high))]
    if len(bad):
        raise ScenarioError(f"{flag}: drew {what} of {bad[0]:g} {unit}, outside [{low:g}, {high:g}] that fedsim "
                            "reads; lower the sigma or move the median")


def population_rows(spec: PopulationSpec) -> Iterator[str]:
    """The trace rows (without header) of the population ``spec``, client after client."""
    n = spec.clients
    sample_s = _lognormal(spec, "population-compute", spec.sample_ms_median, spec.sample_ms_sigma, n) / 1000.0
    z = _lognormal(spec, "population-bandwidth", 1.0, spec.kbps_sigma, n)  # one factor for both directions
    down, up = spec.down_kbps_median * z, spec.up_kbps_median * z
    _drawn_in_bounds(sample_s, 1 / MAX_SPEED, MAX_SECONDS, "a per-sample time", "s", "--sample-ms-sigma")
    for kbps in (down, up):
        _drawn_in_bounds(kbps, 0.0, MAX_SECONDS, "a bandwidth", "kbit/s", "--kbps-sigma")
    start, end = _sessions(spec)
    period = spec.days * DAY
    for i in range(n):
        tail = f"{number(sample_s[i])},{number(down[i])},{number(up[i])}"
        t = 0.0
        for a, b in _merged(start[i].tolist(), end[i].tolist()):
            if a > t:
                yield f"{i},{number(t)},{number(a)},0,{tail}"
            yield f"{i},{number(a)},{number(b)},1,{tail}"
            t = b
        if t < period:
            yield f"{i},{number(t)},{number(period)},0,{tail}"


def write_population(spec: PopulationSpec, out: str | Path) -> int:
    """Write the population as a trace CSV at ``out`` (atomically); returns the rows written."""
    count = 0

    def rows() -> Iterator[str]:
        nonlocal count
        for r in population_rows(spec):
            count += 1
            yield r

    params = ", ".join(f"{k}={v}" for k, v in spec.__dict__.items())
    write_atomic(Path(out), ["fedsim generated device population (`fedsim trace generate`)", params], rows())
    return count
