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
* round policy: :class:`Window` | :class:`Wait` | :class:`Deadline` | :class:`Overcommit` |
  :class:`Async`, each a :class:`Policy` that answers the clock's questions about itself (when a
  round opens and closes, when the server gives up, how many clients it asks for, its fast path);
* prescribed work: :class:`Steps` | :class:`Epochs` | None.
"""

from __future__ import annotations

from .. import limits

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, Union

import numpy as np

from .availability import Always, AvailabilityModel, Intervals
from . import selection as _selection

__all__ = [
    "Constant", "Uniform", "LogNormal", "RandInt", "Exponential", "Dist", "PerClient",
    "Speed", "Flops", "Network", "Traced", "Always", "Intervals", "System",
    "Policy", "Window", "Wait", "Deadline", "Overcommit", "Async", "overcommit_size", "Steps", "Epochs", "RoundRule", "Population", "WorkCost",
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
class System:
    """Compute, availability, slowdown (a per-job factor on step time), latency (seconds per
    transfer) and network of the clients."""

    compute: Union[Speed, Flops, Traced] = Speed(1.0)
    availability: Union[AvailabilityModel, Traced] = Always()
    slowdown: Dist | None = None
    latency: float = 0.0
    network: Network | None = None


# --------------------------------------------------------------------------- rounds
INF = math.inf


class Policy:
    """Base of the round policies: each answers the clock's questions about itself, so the clock's
    paths never test which policy they run.

    Class attributes:
        is_async: one server update per ``buffer`` arrivals with jobs always in flight
            (:class:`Async`) rather than synchronous rounds.
        keeps_first: the round closes at the K-th upload (:class:`Overcommit`).
        waits_for_online: a round that found nobody online closes when the first client comes
            online (else at its fixed close).
    """

    is_async: ClassVar[bool] = False
    keeps_first: ClassVar[bool] = False

    def open_at(self, r: int, last_close: float) -> float:
        """When round ``r`` opens, the previous one having closed at ``last_close``."""
        return last_close

    def fixed_close(self, r: int) -> float | None:
        """Round ``r``'s close when it is fixed in advance (a window), else None."""
        return None

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        """When the server stops waiting for round jobs opened at ``t_open``."""
        return INF

    def request_size(self, k: int | None) -> int | None:
        """How many clients the server asks for when it wants ``k`` updates."""
        return k

    def span(self) -> tuple[float, str] | None:
        """(seconds, scenario key) of a round's fixed length or deadline; None without one."""
        return None

    def tables(self, clock, selector):
        """The fast path's iterator of :class:`~fedsim.clock.plan.RoundTable` for ``clock``,
        picking through ``selector`` (:class:`fedsim.clock.feedback.Selector`)."""
        from .vectorised_wait import prescribed_tables

        return prescribed_tables(clock, selector)


@dataclass(frozen=True)
class Window(Policy):
    """Rounds of fixed length ``window`` seconds: round r spans [r W, (r + 1) W]."""

    window: float

    def open_at(self, r: int, last_close: float) -> float:
        return r * self.window

    def fixed_close(self, r: int) -> float:
        return (r + 1) * self.window

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        return fixed_close

    def span(self) -> tuple[float, str]:
        return float(self.window), "round.window"

    def tables(self, clock, selector):
        from .vectorised import window_tables

        return window_tables(clock, selector)


@dataclass(frozen=True)
class Wait(Policy):
    """Prescribed work; the round ends when the last surviving client has uploaded."""


@dataclass(frozen=True)
class Deadline(Policy):
    """Prescribed work; jobs not done ``deadline`` seconds after the open are dropped."""

    deadline: float

    def give_up(self, t_open: float, fixed_close: float | None) -> float:
        return t_open + self.deadline

    def span(self) -> tuple[float, str]:
        return float(self.deadline), "round.deadline"


@dataclass(frozen=True)
class Overcommit(Policy):
    """FedScale's over-commitment: prescribed work; select ``overcommit_size(factor, K)`` clients,
    aggregate the first K uploads (K = ``RoundRule.clients_per_round``), drop the rest; the round
    ends at the K-th upload (with fewer than K uploads, as :class:`Wait`)."""

    factor: float
    keeps_first: ClassVar[bool] = True

    def request_size(self, k: int | None) -> int | None:
        return overcommit_size(self.factor, k)


def overcommit_size(factor: float, k: int) -> int:
    """ceil(factor * K) with ``factor`` read as the decimal it was written as (``repr``), so
    1.3 x 10 selects 13 clients, not ceil(13.000000000000002) = 14."""
    from fractions import Fraction

    return int(math.ceil(Fraction(repr(float(factor))) * int(k)))


@dataclass(frozen=True)
class Async(Policy):
    """FedBuff-style: ``concurrency`` jobs in flight, one server update every ``buffer`` arrivals."""

    concurrency: int
    buffer: int = 1
    is_async: ClassVar[bool] = True

    def tables(self, clock, selector):
        from .heap import async_tables

        return async_tables(clock, selector)


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

    policy: Policy
    work: Union[Steps, Epochs, None] = None
    max_local_steps: int | None = None
    clients_per_round: int | None = None
    selection: "_selection.SelectionRule" = _selection.Uniform()


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
