"""Devices coupled to the clients' data (``system.coupling``; docs/devices.md, "Who is slow").

The system draws (or a trace lists) one device per client number, independently of the data.
Coupling hands the same devices to the clients in another order: client c gets device
``devices[c]``, a permutation chosen so that a device score (its speed, FLOP/s, bandwidth or
availability) and a data score of the client (computed by the runner from the data, handed here
as plain numbers) have a rank correlation set by ``strength``:

* Gaussian copula: the data scores' mid-ranks become normal scores ``z_c = Phi^-1((r_c - 1/2) / m)``;
  each client gets the key ``k_c = strength * z_c + sqrt(1 - strength^2) * e_c`` with ``e_c``
  standard normal from the stream ``(seed, "coupling")`` (:func:`fedsim.rng.stream`, one draw
  per client, in client order);
* the client with the j-th smallest key (ties: lower client first) gets the device with the j-th
  smallest score (ties: lower device first).

``strength`` 1 is an exact sort (no draw is used); ``strength`` 0 is never computed: the clock
keeps its identity assignment and draws nothing more, so a run is byte-identical to one without
the key. For a bivariate normal of correlation rho the Spearman correlation is
``(6 / pi) arcsin(rho / 2)`` (Kendall and Gibbons, *Rank Correlation Methods*, 1990); with the
normal scores above it is that value up to sampling noise (0.483 at strength 0.5).

The clock applies the permutation in one place (:class:`fedsim.clock.Clock`, ``devices=``):
speeds / FLOP/s / bandwidths are drawn from the device's stream, a trace's rows are the device's,
and availability (offline intervals, or a model's keyed timelines) is the device's. Per-job draws
(slowdown, prescribed work) stay keyed by the client.
"""

from __future__ import annotations

import math

import numpy as np

from fedsim.rng import stream

from .availability import Always, AvailabilityModel, Intervals, TimelineStates, checked_timelines

__all__ = ["coupled_devices", "device_scores", "normal_scores", "mid_ranks", "Reindexed", "reindexed_availability",
           "spearman_of_strength"]


def mid_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..m of ``x``, tied values sharing the mean of their ranks."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.r_[True, xs[1:] != xs[:-1]]
    first = np.flatnonzero(starts)
    last = np.r_[first[1:], len(x)] - 1
    ranks = np.empty(len(x))
    ranks[order] = ((first + last) / 2.0 + 1.0)[np.cumsum(starts) - 1]
    return ranks


def normal_scores(x: np.ndarray) -> np.ndarray:
    """``Phi^-1((r - 1/2) / m)`` of the mid-ranks r (1..m) of ``x`` (:class:`statistics.NormalDist`)."""
    from statistics import NormalDist

    u = (mid_ranks(x) - 0.5) / len(x)
    inv = NormalDist().inv_cdf
    return np.array([inv(v) for v in u.tolist()], dtype=np.float64)


def coupled_devices(data_score, device_score, strength: float, seed: int, direction: str = "same") -> np.ndarray:
    """``devices[c]``: the device client c gets (see the module docstring). ``direction``
    ``opposite`` ranks the data scores the other way (a high score pairs with a low device score)."""
    d = np.asarray(data_score, dtype=np.float64)
    s = np.asarray(device_score, dtype=np.float64)
    if d.shape != s.shape or d.ndim != 1:
        raise ValueError(f"coupling: {len(d)} data scores for {len(s)} devices")
    if not (np.isfinite(d).all() and np.isfinite(s).all()):
        raise ValueError("coupling: scores must be finite")
    if not 0 <= strength <= 1:
        raise ValueError(f"coupling: strength must be in [0, 1], got {strength}")
    if direction == "opposite":
        d = -d
    z = normal_scores(d)
    if strength < 1:
        e = stream(seed, "coupling").standard_normal(len(d))
        key = strength * z + math.sqrt(1.0 - strength * strength) * e
    else:
        key = z
    clients = np.argsort(key, kind="stable")
    order = np.argsort(s, kind="stable")
    devices = np.empty(len(d), dtype=np.int64)
    devices[clients] = order
    return devices


def spearman_of_strength(strength: float) -> float:
    """``(6 / pi) arcsin(strength / 2)``: the Spearman correlation of a bivariate normal of
    correlation ``strength``, what the coupling aims at."""
    return 6.0 / math.pi * math.asin(strength / 2.0)


def device_scores(clock, by: str) -> np.ndarray:
    """Each device's score for ``system.coupling.by`` in ``clock``'s own (uncoupled) numbering:

    * ``speed``: base steps per second (a trace: the mean speed while online);
    * ``flops``: FLOP/s (ranks as speed with ``system.compute``);
    * ``bandwidth``: minus the seconds of one download and one upload alone (faster link, higher);
    * ``availability``: share of time online, over a trace's period per client, or over
      [0, latest end of any offline interval] for explicit intervals.
    """
    m = clock.num_clients
    if by in ("speed", "flops"):
        return clock.speeds
    if by == "bandwidth":
        if not clock.transfers.network:
            raise ValueError("system.coupling.by: bandwidth needs system.network or a device trace")
        down, up = clock.transfers_of(np.arange(m))
        return -(down + up)
    if by == "availability":
        return _online_share(clock)
    raise ValueError(f"system.coupling.by: unknown {by!r}")


def _online_share(clock) -> np.ndarray:
    """Share of time each device is online (see :func:`device_scores`)."""
    av = clock.system.availability
    if isinstance(av, Intervals):
        horizon = max((e for iv in av.offline for _, e in iv), default=0.0)
        if horizon <= 0:
            return np.ones(clock.num_clients)
        out = []
        for tl in av.timelines(clock.num_clients, clock.seed):
            off = sum(e - s for s, e in tl.intervals)
            out.append(1.0 - off / horizon)
        return np.asarray(out)
    timelines = clock._trace_clients
    if timelines is None:
        raise ValueError("system.coupling.by: availability needs a trace or per-client offline intervals")
    out = []
    for t in timelines:
        dur = np.diff(t.bp)
        out.append(float((dur * t.online).sum() / dur.sum()) if dur.sum() > 0 else 0.0)
    return np.asarray(out)


class Reindexed(AvailabilityModel):
    """``model`` with client c given device ``devices[c]``'s availability (a permutation)."""

    def __init__(self, model: AvailabilityModel, devices: np.ndarray):
        self.model, self.devices = model, np.asarray(devices, dtype=np.int64)

    def timelines(self, m: int, seed: int) -> list:
        inner = list(self.model.timelines(m, seed))
        return [inner[int(d)] for d in self.devices]

    def states(self, m: int, seed: int):
        if self.model.states(m, seed) is None:  # always online
            return None
        return TimelineStates(checked_timelines(self, m, seed))

    def time_scales(self) -> dict[str, float]:
        return self.model.time_scales()


def reindexed_availability(model: AvailabilityModel, devices: np.ndarray) -> AvailabilityModel:
    """The availability of ``model`` with client c on device ``devices[c]``: explicit intervals
    reordered, any other model wrapped (:class:`Reindexed`)."""
    if isinstance(model, Intervals):
        return Intervals(tuple(model.offline[int(d)] for d in devices))
    if isinstance(model, Always):
        return model
    return Reindexed(model, devices)
