"""The ``system`` section: speeds or device compute, network, slowdown, latency, availability, traces.

``system.availability`` is ``always``, per-client offline intervals, or ``{model: NAME, ...}``,
a model registered in ``fedsim.registries.AVAILABILITY`` whose module (:mod:`fedsim.availability`)
holds its section and its clock value.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from ..section import BoolGiven, FieldError, Section, has_bool, registered
from ..section_errors import nested_error
from .distributions import Constant, Dist, Exponential, LogNormal, RandInt, Uniform, dist_bounds, dist_low
from .. import limits

Interval = tuple[float, float]
#: ``system.availability``'s per-client offline intervals: one list of ``[start, end)`` per client.
_INTERVALS = TypeAdapter(tuple[tuple[Interval, ...], ...], config=ConfigDict(allow_inf_nan=False))


def availability_value(v: Any) -> Any:
    """``system.availability`` checked: ``always``, per-client offline intervals, or a registered
    model's section ``{model: NAME, ...}`` (``fedsim.registries.AVAILABILITY``, :mod:`fedsim.availability`)."""
    from ..availability.section import AvailabilitySection
    from ..registries import AVAILABILITY

    if isinstance(v, str) and v == "always":
        return v
    if isinstance(v, AvailabilitySection):
        return _with_clock_value(v)
    if isinstance(v, dict):
        name = v.get("model")
        if not isinstance(name, str):
            known = ", ".join(AVAILABILITY.names())
            raise FieldError("system.availability.model", f"missing (which model? {known})" if name is None
                              else f"must be a model's name ({known})")
        section = AVAILABILITY.get(registered(AVAILABILITY, name))
        if not (isinstance(section, type) and issubclass(section, AvailabilitySection)):
            raise FieldError("system.availability.model", f"{name!r} is registered as {section!r}, not a subclass of "
                              "fedsim.availability.AvailabilitySection")
        try:
            return _with_clock_value(section.model_validate(v))
        except ValidationError as err:
            raise nested_error(err, "system.availability") from None
    if isinstance(v, (list, tuple)):
        if has_bool(v):
            raise FieldError("system.availability", f"must not be true/false (got {BoolGiven(v)!r})")
        try:
            intervals = _INTERVALS.validate_python(v)
        except ValidationError as err:
            raise nested_error(err, "system.availability") from None
        for client in intervals:
            for start, end in client:
                if not 0 <= start < end:
                    raise FieldError("system.availability", "offline intervals need 0 <= start < end")
        return intervals
    raise FieldError("system.availability", "give always, one list of offline [start, end) intervals per "
                      "client, or {model: NAME, ...}")


def _with_clock_value(section: Any) -> Any:
    """``section`` once its ``clock_value()`` gave the clock a value it can use (an
    :class:`~fedsim.clock.availability.AvailabilityModel`), so a broken plug-in fails here, one line."""
    from ..clock.availability import AvailabilityModel

    try:
        value = section.clock_value()
    except Exception as err:  # noqa: BLE001 -- a user's section: one line naming it
        raise FieldError("system.availability", f"model {section.model!r}: clock_value() failed: "
                          f"{type(err).__name__}: {err}".rstrip(": ")) from None
    if not isinstance(value, AvailabilityModel):
        raise FieldError("system.availability", f"model {section.model!r}: clock_value() returned "
                          f"{type(value).__name__}, not a fedsim.clock.availability.AvailabilityModel")
    return section


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


class ComputeConfig(Section):
    """Device compute: FLOP/s (one local step takes the model's step FLOPs / flops seconds)."""

    flops: PerClient

    @field_validator("flops")
    @classmethod
    def _flops(cls, f):
        return _positive_per_client(f, low=1.0)


class NetworkConfig(Section):
    """Bandwidths in bits per second (download: model bytes x 8 / down; upload: upload bytes x 8 / up)."""

    down: PerClient
    up: PerClient

    @field_validator("down", "up")
    @classmethod
    def _bps(cls, b):
        return _positive_per_client(b, low=1.0)


class AggregateFlops(Section):
    """``system.server.aggregate: {flops: F}``: the server aggregates at F FLOP/s."""

    flops: float = Field(gt=0)

    @field_validator("flops")
    @classmethod
    def _finite(cls, f):
        if not (math.isfinite(f) and f >= 1.0):
            raise ValueError("must be a finite FLOP/s of at least 1")
        return f


class ServerConfig(Section):
    """``system.server``: the server's own link, shared by the transfers in flight (bits per
    second per direction, as ``system.network``; absent: unlimited), and the time it takes to
    aggregate (seconds per aggregated update, or ``{flops: F}``: 2 x parameters FLOPs per update)."""

    down: float | None = None
    up: float | None = None
    aggregate: float | AggregateFlops = 0.0

    @field_validator("down", "up")
    @classmethod
    def _bps(cls, b):
        if b is not None and not (math.isfinite(b) and b >= 1.0):
            raise ValueError("must be a finite bit rate of at least 1 bit/s")
        return b

    @field_validator("aggregate", mode="before")
    @classmethod
    def _aggregate(cls, a):
        if isinstance(a, dict):
            try:
                return AggregateFlops.model_validate(a)
            except ValidationError as err:
                raise nested_error(err, "system.server.aggregate") from None
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise FieldError("system.server.aggregate", "give seconds per update, or {flops: F}")
        if not (math.isfinite(a) and 0 <= a <= 1e9):
            raise FieldError("system.server.aggregate", "must be seconds per update in [0, 1e9]")
        return float(a)


#: ``system.coupling.by``: the device property that is ranked (docs/devices.md, "Who is slow").
COUPLING_BY = ("speed", "flops", "bandwidth", "availability")
#: ``system.coupling.to``: the data property of each client it is ranked against.
COUPLING_TO = ("dominant_label", "label_axis", "size", "feature_shift")


class CouplingConfig(Section):
    """``system.coupling``: devices handed to clients so that the device property ``by`` and the
    data property ``to`` have a rank correlation set by ``strength`` (0: the independent
    assignment, unchanged; 1: sorted). ``direction: opposite`` pairs high with low."""

    by: Literal["speed", "flops", "bandwidth", "availability"] = "speed"
    to: Literal["dominant_label", "label_axis", "size", "feature_shift"]
    strength: float = Field(ge=0, le=1)
    direction: Literal["same", "opposite"] = "same"


class SystemConfig(Section):
    """System heterogeneity: speeds or device compute, network, slowdowns, latency, availability,
    measured traces."""

    speed: PerClient | None = 1.0
    compute: ComputeConfig | None = None
    network: NetworkConfig | None = None
    slowdown: Dist | None = None
    latency: float = Field(0.0, ge=0)
    availability: Any = "always"  # availability_value
    trace: str | None = None
    trace_repeat: Literal["cycle", "last"] = "cycle"
    # issue 19: FedScale's online test and job rule (docs/devices.md), and the bytes of one transfer
    trace_semantics: Literal["fedsim", "fedscale"] = "fedsim"
    payload_bytes: Annotated[int, Field(gt=0, le=limits.MAX_PAYLOAD_BYTES)] | Literal["fedscale_pickle"] | None = None
    #: a job hit by an outage: loses its work (fail) or keeps its completed steps and goes on when
    #: its client is back online, while its round is open (resume)
    on_outage: Literal["fail", "resume"] = "fail"
    server: ServerConfig | None = None
    #: issue 36: devices coupled to the clients' data (fedsim.clock.coupling)
    coupling: CouplingConfig | None = None

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

    @field_validator("availability", mode="before")
    @classmethod
    def _availability(cls, a):
        return availability_value(a)

    @model_validator(mode="after")
    def _compute(self):
        if self.speed is None and self.compute is None:
            raise FieldError("system.speed", "give speed (steps per second) or compute (FLOP/s)")
        if self.speed is not None and self.compute is not None:
            raise FieldError("system.compute", "give speed or compute, not both")
        if self.trace is not None and self.compute is not None:
            raise FieldError("system.compute", "a trace gives the speed; give either a trace or compute")
        if self.trace_semantics != "fedsim" and self.trace is None:
            raise FieldError("system.trace_semantics", "only with system.trace")
        if self.trace_semantics == "fedscale" and self.trace_repeat != "cycle":
            raise FieldError("system.trace_semantics", "fedscale replays every trace cyclically (t mod finish_time): "
                              "needs trace_repeat cycle")
        if self.payload_bytes is not None and self.trace is None and self.network is None:
            raise FieldError("system.payload_bytes", "only with system.network or system.trace (transfers to time)")
        server = self.server
        if server is not None and (server.up is not None or server.down is not None) and self.trace is None \
                and self.network is None:
            key = "up" if server.up is not None else "down"
            raise FieldError(f"system.server.{key}", "a shared server link needs transfers with bits to share: "
                              "give system.network (or a device trace)")
        if self.on_outage == "resume":
            if self.trace is None and self.availability == "always":
                raise FieldError("system.on_outage", "resume means nothing when every client is always online")
            if self.trace_semantics == "fedscale":
                raise FieldError("system.on_outage", "FedScale's semantics decide a job's fate at its start: "
                                  "resume needs trace_semantics fedsim")
        self._check_coupling()
        return self

    def _check_coupling(self) -> None:
        """``system.coupling.by`` needs a system in which devices differ in that property."""
        c = self.coupling
        if c is None:
            return
        if c.by == "flops" and self.compute is None:
            raise FieldError("system.coupling.by", "flops needs system.compute (device FLOP/s)")
        if c.by == "bandwidth" and self.network is None and self.trace is None:
            raise FieldError("system.coupling.by", "bandwidth needs system.network or a device trace")
        if c.by == "availability" and self.trace is None and not isinstance(self.availability, tuple):
            raise FieldError("system.coupling.by", "availability needs a trace or per-client offline intervals "
                              "(a model's devices are alike in expectation)")

    def value(self, batch_size: int = 32):
        """The clock's :class:`fedsim.clock.model.System` (:func:`.clock_values.system_value`)."""
        from .clock_values import system_value

        return system_value(self, batch_size)
