"""Two-state Markov availability: exponential online and offline sojourns.

``system.availability: {model: markov, mean_online: 600, mean_offline: 60}`` (seconds). Keyed
draws ``u(seed, "availability", client, k)`` (:mod:`fedsim.clock.keyed`): k = 0 sets the initial
state (online iff u < mean_online / (mean_online + mean_offline), the stationary probability);
sojourn k >= 1 is ``-mean * log(u_k)`` with the mean of the state it is spent in.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Literal

import numpy as np
from pydantic import Field, model_validator

from ..clock.availability import AvailabilityModel, ToggleArrays
from ..clock.keyed import keyed_exponential, keyed_uniform
from ..limits import MAX_SECONDS
from ..section import FieldError
from .section import AvailabilitySection

__all__ = ["Markov", "MarkovAvailability", "MarkovTimeline", "MarkovStates"]


@dataclass(frozen=True)
class Markov(AvailabilityModel):
    """Exponential online / offline sojourns with these means (seconds)."""

    mean_online: float
    mean_offline: float

    def timelines(self, m: int, seed: int) -> list:
        return [MarkovTimeline(self.mean_online, self.mean_offline, seed, c) for c in range(m)]

    def states(self, m: int, seed: int) -> "MarkovStates":
        return MarkovStates(self.mean_online, self.mean_offline, seed, m)

    def time_scales(self) -> dict[str, float]:
        return {"mean_online": self.mean_online, "mean_offline": self.mean_offline}


class MarkovAvailability(AvailabilitySection):
    """``{model: markov, mean_online, mean_offline}``: mean sojourns in seconds."""

    model: Literal["markov"] = "markov"
    mean_online: float = Field(gt=0)
    mean_offline: float = Field(gt=0)

    @model_validator(mode="after")
    def _bounded(self):
        for key in ("mean_online", "mean_offline"):
            if getattr(self, key) > MAX_SECONDS:
                raise FieldError(f"system.availability.{key}", f"must be <= {MAX_SECONDS:g}")
        return self

    def clock_value(self) -> Markov:
        return Markov(self.mean_online, self.mean_offline)


class MarkovTimeline:
    """One client's Markov availability as a timeline (SimPy path)."""

    changes = True

    def __init__(self, mean_online: float, mean_offline: float, seed: int, client: int):
        self.means = np.array([mean_offline, mean_online], dtype=np.float64)  # indexed by the state
        self.seed, self.client = seed, client
        p_online = mean_online / (mean_online + mean_offline)
        self.initial = bool(keyed_uniform(seed, "availability", client, 0)[0] < p_online)

    def toggles(self) -> Iterator[float]:
        online, t = self.initial, 0.0
        for k in itertools.count(1):
            t = float(np.float64(t) + keyed_exponential(self.means[int(online)], self.seed, "availability", self.client, k)[0])
            online = not online
            yield t


class MarkovStates(ToggleArrays):
    """Every client's Markov availability as arrays (the draws of :class:`MarkovTimeline`);
    ``k[c]``: the draws client c has used."""

    PER_CLIENT = ("online", "next", "k", "clients")

    def __init__(self, mean_online: float, mean_offline: float, seed: int, num_clients: int):
        self.means = np.array([mean_offline, mean_online], dtype=np.float64)
        self.seed = seed
        self.clients = np.arange(num_clients, dtype=np.int64)
        p_online = mean_online / (mean_online + mean_offline)
        self.online = keyed_uniform(seed, "availability", self.clients, 0) < p_online
        self.k = np.ones(num_clients, dtype=np.int64)
        self.next = keyed_exponential(self.means[self.online.astype(np.int64)], seed, "availability", self.clients, 1)

    def toggled(self, idx: np.ndarray) -> None:
        k = self.k[idx] + 1
        self.k[idx] = k
        mean = self.means[self.online[idx].view(np.uint8)]
        self.next[idx] += keyed_exponential(mean, self.seed, "availability", self.clients[idx], k)
