"""The clock's inputs as frozen plain values (no pydantic): what a validated scenario becomes.

:mod:`fedsim.scenario` checks every field and cross-field rule (it knows the key paths to blame)
and converts its ``system`` and ``round`` sections into these values; :class:`fedsim.clock.Clock`
takes only these. Sum types are unions of small dataclasses, read with ``isinstance`` or
``match``:

* a distribution: :class:`Constant` | :class:`Uniform` | :class:`LogNormal` | :class:`RandInt` |
  :class:`Exponential`, each with ``sample(rng)``;
* a per-client quantity (:data:`PerClient`): one number for every client, one number per client,
  or a distribution drawn once per client;
* compute: :class:`Speed` (local steps per second) | :class:`Flops` (device FLOP/s; needs a
  :class:`WorkCost`) | :class:`Traced` (a measured trace);
* availability: an :class:`~fedsim.clock.availability.AvailabilityModel` (:class:`Always`,
  :class:`Intervals`, or a model of :mod:`fedsim.availability` such as Markov) | :class:`Traced`;
* round policy: a :class:`fedsim.clock.policy.Policy` (window, wait, deadline, overcommit, async);
* prescribed work: :class:`Steps` | :class:`Epochs` | None.
"""

from __future__ import annotations

from .. import limits

import math
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np

from .availability import Always, AvailabilityModel, Intervals
from . import selection as _selection

__all__ = [
    "Constant", "Uniform", "LogNormal", "RandInt", "Exponential", "Dist", "PerClient",
    "Speed", "Flops", "Network", "Traced", "Always", "Intervals", "Server", "System",
    "Steps", "Epochs", "RoundRule", "Population", "WorkCost",
    "MAX_TIME", "MAX_SPEED", "MAX_STEPS", "MAX_EPOCHS",
]

#: The clock's bounds are the input bounds of :mod:`fedsim.limits` (docs/reliability.md):
#: longest time a scenario or trace may state, fastest step rate, most steps in one job (every
#: job's tau_i is capped there, so a lognormal tail cannot overflow), most local epochs.
MAX_TIME = limits.MAX_SECONDS
MAX_SPEED = limits.MAX_SPEED
MAX_STEPS = limits.MAX_STEPS_PER_JOB
MAX_EPOCHS = limits.MAX_EPOCHS


# --------------------------------------------------------------------------- distributions
@dataclass(frozen=True)
class Constant:
    value: float

    def sample(self, rng: np.random.Generator) -> float:
        return self.value


@dataclass(frozen=True)
class Uniform:
    """Continuous uniform on [low, high]."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class LogNormal:
    """``median * exp(sigma * N(0, 1))``."""

    median: float
    sigma: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(self.median * math.exp(self.sigma * rng.standard_normal()))


@dataclass(frozen=True)
class RandInt:
    """Integer uniform on {low, ..., high} (both inclusive)."""

    low: int
    high: int

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high + 1))


@dataclass(frozen=True)
class Exponential:
    mean: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean))


Dist = Union[Constant, Uniform, LogNormal, RandInt, Exponential]
#: One number for every client, a tuple with one number per client, or a distribution drawn once
#: per client (stream ``(purpose, client)``).
PerClient = Union[float, tuple, Dist]


# --------------------------------------------------------------------------- system
@dataclass(frozen=True)
class Speed:
    """Local steps per simulated second."""

    steps_per_second: PerClient


@dataclass(frozen=True)
class Flops:
    """Device FLOP/s; one local step takes ``WorkCost.step_flops / flops`` seconds."""

    flops: PerClient


@dataclass(frozen=True)
class Network:
    """Bandwidths in bits per second: download ``model_bytes * 8 / down``, upload
    ``upload_bytes * 8 / up`` (plus the latency, per transfer)."""

    down: PerClient
    up: PerClient


@dataclass(frozen=True)
class Traced:
    """A measured trace file (:mod:`fedsim.clock.trace`): time-varying speed and availability."""

    path: str
    repeat: Literal["cycle", "last"] = "cycle"
    batch_size: int = 32  # device traces: one local step is 3 x batch_size samples' time
    #: ``fedsim``: online iff inside a row, any outage fails a running job, steps accrue only while
    #: online; ``fedscale``: FedScale's stateful session index, a job fails only if its client is
    #: offline at its completion, and it computes at its online speed throughout (fedsim.clock.trace)
    semantics: Literal["fedsim", "fedscale"] = "fedsim"


@dataclass(frozen=True)
class Server:
    """The server's own costs (``system.server``).

    Attributes:
        down, up: capacity of the server's link per direction in bits per second (the units of
            ``Network``), shared by the transfers in flight (:mod:`fedsim.clock.link`); None:
            unlimited (each transfer moves at its client's bandwidth).
        aggregate: seconds the server takes per aggregated client update.
        aggregate_flops: the server's FLOP/s: aggregating takes 2 x parameters FLOPs per update
            (instead of ``aggregate``; needs ``WorkCost.params``).
    """

    down: float | None = None
    up: float | None = None
    aggregate: float = 0.0
    aggregate_flops: float | None = None

    @property
    def aggregates(self) -> bool:
        """Whether aggregation takes time."""
        return self.aggregate > 0 or self.aggregate_flops is not None

    def aggregation_seconds(self, updates: int, params: int | None) -> float:
        """Seconds to aggregate ``updates`` client updates: ``aggregate`` x updates, or 2 x
        ``params`` x updates / ``aggregate_flops`` (a multiply-add per parameter and update)."""
        if updates <= 0:
            return 0.0
        if self.aggregate_flops is not None:
            return 2.0 * float(params) * updates / self.aggregate_flops
        return self.aggregate * updates


@dataclass(frozen=True)
class System:
    """Compute, availability, slowdown (a per-job factor on step time), latency (seconds per
    transfer), network of the clients, what a job hit by an outage keeps (``on_outage``: ``fail``
    loses the job, ``resume`` keeps its completed steps and goes on once the client is back) and
    the server's own costs."""

    compute: Union[Speed, Flops, Traced] = Speed(1.0)
    availability: Union[AvailabilityModel, Traced] = Always()
    slowdown: Dist | None = None
    latency: float = 0.0
    network: Network | None = None
    on_outage: Literal["fail", "resume"] = "fail"
    server: Server | None = None


# --------------------------------------------------------------------------- rounds
@dataclass(frozen=True)
class Steps:
    """``local_steps``: a number of local steps, or an integer distribution drawn per job."""

    dist: Union[Constant, RandInt]


@dataclass(frozen=True)
class Epochs:
    """``local_epochs`` E: tau_i = floor(E * n_i / batch_size), E a number or drawn per job."""

    dist: Union[Constant, RandInt]
    batch_size: int


@dataclass(frozen=True)
class RoundRule:
    """Round policy, prescribed work (None: only the window limits it), step cap and selection
    rule (:class:`fedsim.clock.selection.SelectionRule`; default ``uniform`` with normalized weights)."""

    policy: "Policy"  # fedsim.clock.policy
    work: Union[Steps, Epochs, None] = None
    max_local_steps: int | None = None
    clients_per_round: int | None = None
    selection: "_selection.SelectionRule" = _selection.Uniform()
    #: deadline: a job still computing when the time left is its upload time uploads its steps
    on_deadline: Literal["drop", "partial"] = "drop"
    #: async: each job computes for this many seconds (tau_i from the device), no prescribed work
    local_time: float | None = None
    #: the name ``selection`` was registered under (``round.selection.name``), for its errors;
    #: None: the rule's ``name`` attribute, else its class name
    selection_name: str | None = None


# --------------------------------------------------------------------------- clients and work
@dataclass(frozen=True, eq=False)
class Population:
    """The clients: n_i (``sizes``, for ``local_epochs``) and p_i (``p``, selection and weights)."""

    sizes: np.ndarray
    p: np.ndarray

    def __post_init__(self):
        if len(self.sizes) == 0:
            raise ValueError("the clock needs at least one client")
        if self.p.shape != self.sizes.shape:
            raise ValueError(f"weights: need one weight per client ({len(self.sizes)})")

    @classmethod
    def of(cls, sizes, weights=None) -> "Population":
        """n_i from ``sizes``; p_i from ``weights``, default n_i / n."""
        n = np.asarray(sizes, dtype=np.int64)
        p = n / n.sum() if weights is None else np.asarray(weights, dtype=np.float64)
        return cls(n, p)

    def __len__(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True)
class WorkCost:
    """What one job costs, from the model (``fedsim.devices``): FLOPs of one local step (forward
    and backward at the batch size), bytes downloaded (the model) and bytes uploaded."""

    step_flops: float | None  # None when not counted (only system.compute needs it)
    model_bytes: float
    upload_bytes: float
    params: int | None = None  # the model's parameter count (aggregation FLOPs)
