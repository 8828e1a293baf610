"""The ``system`` section: speeds or device compute, network, slowdown, latency, availability models, traces.

An availability model is a section class here (with its clock value, ``clock_value()``) and a member
of the ``Availability`` union; the clock's side is in :mod:`fedsim.clock`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from ..clock import model as cm
from ..clock.model import MAX_TIME
from ..limits import MIN_DIURNAL_LEVEL, MIN_DIURNAL_PERIOD
from .base import _FieldError, _Frozen
from .distributions import Constant, Dist, Exponential, LogNormal, RandInt, Uniform, dist_bounds, dist_low

class MarkovAvailability(_Frozen):
    """Two-state Markov availability: exponential online/offline sojourns with these means."""

    model: Literal["markov"]
    mean_online: float = Field(gt=0)
    mean_offline: float = Field(gt=0)

    def clock_value(self) -> cm.Markov:
        return cm.Markov(self.mean_online, self.mean_offline)


class DiurnalAvailability(_Frozen):
    """A daily cycle: online probability trough + (peak - trough) (1 + cos(2 pi (t - phase) /
    period)) / 2 per client, followed by on/off sojourns of about ``mean_sojourn`` seconds."""

    model: Literal["diurnal"]
    period: float = Field(86400.0, gt=0, le=MAX_TIME)
    peak: float = Field(0.8, ge=0, le=1)
    trough: float = Field(0.1, ge=0, le=1)
    phase: float | tuple[float, ...] | Uniform = 0.0
    mean_sojourn: float = Field(3600.0, gt=0, le=MAX_TIME)

    def clock_value(self) -> cm.Diurnal:
        phase = self.phase if isinstance(self.phase, (int, float, tuple)) else self.phase.clock_value()
        return cm.Diurnal(self.period, self.peak, self.trough, phase, self.mean_sojourn)

    @model_validator(mode="after")
    def _levels(self):
        if self.trough > self.peak:
            raise _FieldError("system.availability.trough", "must be <= peak")
        if self.peak == 0:
            raise _FieldError("system.availability.peak", "must be > 0 (else no client is ever online)")
        # Bounds that keep the thinning of diurnal toggles finite (issue 21.8; fedsim.limits).
        # trough == 1 (so peak == 1) is "always online" and draws no toggle.
        if self.peak < MIN_DIURNAL_LEVEL:
            raise _FieldError("system.availability.peak", f"must be >= {MIN_DIURNAL_LEVEL:g}")
        if self.trough != 1 and 1 - self.trough < MIN_DIURNAL_LEVEL:
            raise _FieldError("system.availability.trough", f"must be 1 or at most {1 - MIN_DIURNAL_LEVEL:g}")
        if self.period < MIN_DIURNAL_PERIOD:
            raise _FieldError("system.availability.period", f"must be >= {MIN_DIURNAL_PERIOD:g} s")
        ph = self.phase
        values = [ph.low, ph.high] if isinstance(ph, Uniform) else list(ph) if isinstance(ph, tuple) else [ph]
        if any(not abs(x) <= MAX_TIME for x in values):
            raise _FieldError("system.availability.phase", f"must lie in [-{MAX_TIME:g}, {MAX_TIME:g}] s")
        return self


Interval = tuple[float, float]


def _availability_kind(v: Any) -> str:
    """Which member of ``system.availability`` a value is meant to be (so errors name its keys)."""
    if isinstance(v, dict):
        return "diurnal" if v.get("model") == "diurnal" else "markov"
    if isinstance(v, (MarkovAvailability, DiurnalAvailability)):
        return v.model
    return "always" if isinstance(v, str) else "intervals"


Availability = Annotated[
    Union[
        Annotated[Literal["always"], Tag("always")],
        Annotated[MarkovAvailability, Tag("markov")],
        Annotated[DiurnalAvailability, Tag("diurnal")],
        Annotated[tuple[tuple[Interval, ...], ...], Tag("intervals")],
    ],
    Discriminator(_availability_kind),
]



def _member_names(union: Any) -> frozenset[str]:
    """What pydantic may name a member of a tagged union in an error location: its tag, and its
    class name (so :mod:`.pydantic_errors` need not list them)."""
    names = set()
    for member in get_args(get_args(union)[0]):
        inner, *meta = get_args(member)
        names |= {m.tag for m in meta if isinstance(m, Tag)}
        if isinstance(inner, type):
            names.add(inner.__name__)
    return frozenset(names)


#: Tags and class names of ``system.availability``'s members.
AVAILABILITY_MEMBERS = _member_names(Availability)
PerClient = float | tuple[float, ...] | Dist


def _positive_per_client(s: Any, high: float = math.inf, low: float = 0.0) -> Any:
    """A number, per-client tuple or distribution that must be > 0, at least ``low`` (bounded
    distributions: their whole range; lognormal / exponential: median / mean) and at most ``high``."""
    if isinstance(s, (int, float)):
        values = [s]
    elif isinstance(s, tuple):
        if not s:
            raise ValueError("must be > 0")
        values = list(s)
    elif isinstance(s, LogNormal):
        values = [s.median]
    elif isinstance(s, Exponential):
        values = [s.mean]
    else:
        values = list(dist_bounds(s))
    if any(not (x > 0 and math.isfinite(x)) for x in values):
        raise ValueError("must be > 0")
    if any(x > high for x in values):
        raise ValueError(f"must be at most {high:g}")
    if any(x < low for x in values):
        raise ValueError(f"must be at least {low:g}")
    return s


class ComputeConfig(_Frozen):
    """Device compute: FLOP/s (one local step takes the model's step FLOPs / flops seconds)."""

    flops: PerClient

    @field_validator("flops")
    @classmethod
    def _flops(cls, f):
        return _positive_per_client(f, low=1.0)


class NetworkConfig(_Frozen):
    """Bandwidths in bits per second (download: model bytes x 8 / down; upload: upload bytes x 8 / up)."""

    down: PerClient
    up: PerClient

    @field_validator("down", "up")
    @classmethod
    def _bps(cls, b):
        return _positive_per_client(b, low=1.0)


class SystemConfig(_Frozen):
    """System heterogeneity: speeds or device compute, network, slowdowns, latency, availability,
    measured traces."""

    speed: PerClient | None = 1.0
    compute: ComputeConfig | None = None
    network: NetworkConfig | None = None
    slowdown: Dist | None = None
    latency: float = Field(0.0, ge=0)
    availability: Availability = "always"
    trace: str | None = None
    trace_repeat: Literal["cycle", "last"] = "cycle"
    # issue 19: FedScale's online test and job rule (docs/devices.md), and the bytes of one transfer
    trace_semantics: Literal["fedsim", "fedscale"] = "fedsim"
    payload_bytes: Annotated[int, Field(gt=0, le=10**15)] | Literal["fedscale_pickle"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _speed_or_compute(cls, data):
        if isinstance(data, dict) and data.get("compute") is not None and "speed" not in data:
            return {**data, "speed": None}  # compute replaces the default speed
        return data

    @field_validator("speed")
    @classmethod
    def _speed(cls, s):
        return s if s is None else _positive_per_client(s)

    @field_validator("slowdown")
    @classmethod
    def _slowdown(cls, s):
        if isinstance(s, (Uniform, RandInt, Constant)) and dist_low(s) <= 0:
            raise ValueError("must be > 0")
        return s

    @field_validator("availability")
    @classmethod
    def _intervals(cls, a):
        if isinstance(a, tuple):
            for intervals in a:
                for s, e in intervals:
                    if not 0 <= s < e:
                        raise ValueError("offline intervals need 0 <= start < end")
        return a

    @model_validator(mode="after")
    def _compute(self):
        if self.speed is None and self.compute is None:
            raise _FieldError("system.speed", "give speed (steps per second) or compute (FLOP/s)")
        if self.speed is not None and self.compute is not None:
            raise _FieldError("system.compute", "give speed or compute, not both")
        if self.trace is not None and self.compute is not None:
            raise _FieldError("system.compute", "a trace gives the speed; give either a trace or compute")
        if self.trace_semantics != "fedsim" and self.trace is None:
            raise _FieldError("system.trace_semantics", "only with system.trace")
        if self.trace_semantics == "fedscale" and self.trace_repeat != "cycle":
            raise _FieldError("system.trace_semantics", "fedscale replays every trace cyclically (t mod finish_time): "
                              "needs trace_repeat cycle")
        if self.payload_bytes is not None and self.trace is None and self.network is None:
            raise _FieldError("system.payload_bytes", "only with system.network or system.trace (transfers to time)")
        return self

    def value(self, batch_size: int = 32):
        """The clock's :class:`fedsim.clock.model.System` (:func:`.clock_values.system_value`)."""
        from .clock_values import system_value

        return system_value(self, batch_size)
