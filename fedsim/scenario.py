"""Scenario: the typed, frozen, validated description of one simulation.

A scenario is read from YAML with :func:`fedsim.scenario_yaml.load_yaml` (``yaml.safe_load``
with bounds), overridden with dotted ``--set`` keys and validated once here (pydantic v2,
``extra="forbid"``, frozen; then names, numeric bounds and devices by :mod:`fedsim.validate`).
Core code only ever sees these models, never a dict. Errors become :class:`ScenarioError` with one
line naming the field path.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator,
)

from .clock import model as clock_model
from .clock.model import MAX_EPOCHS, MAX_SPEED, MAX_STEPS, MAX_TIME
from .errors import ScenarioError

from .errors import ScenarioError
from .limits import MAX_SCENARIO_BYTES, MAX_YAML_DEPTH
from .scenario_yaml import YamlInputError, load_yaml, read_regular_file
from .validate import check_device_spec, check_limits, check_names, check_paths, check_run_name

__all__ = [
    "ScenarioError",
    "Scenario",
    "load_scenario",
    "parse_scenario",
    "apply_overrides",
    "dump_scenario",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        # pydantic reads true / false as 1 / 0 in number fields: wrap them so the field refuses them
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: _Boolean(v) if k in fields and _refuses_bool(v, fields[k].annotation) else v for k, v in data.items()}
        return data


class _Boolean:
    """A true / false given to a field that takes none (no type accepts it; see ``_format_error``)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return json.dumps(self.value)


def _refuses_bool(value: Any, annotation: Any) -> bool:
    return _has_bool(value) and not _admits_bool(annotation)


def _has_bool(value: Any) -> bool:
    return isinstance(value, bool) or (isinstance(value, (list, tuple)) and any(_has_bool(x) for x in value))


def _admits_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_admits_bool(a) for a in get_args(annotation))


# --------------------------------------------------------------------------- distributions
class Uniform(_Frozen):
    """Continuous uniform on [low, high]."""

    dist: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _order(self):
        if not self.low <= self.high:
            raise ValueError("low must be <= high")
        return self


class LogNormal(_Frozen):
    """``median * exp(sigma * N(0, 1))``."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)


class RandInt(_Frozen):
    """Integer uniform on {low, ..., high} (both inclusive)."""

    dist: Literal["randint"]
    low: int
    high: int

    @model_validator(mode="after")
    def _order(self):
        if not self.low <= self.high:
            raise ValueError("low must be <= high")
        return self


class Constant(_Frozen):
    dist: Literal["constant"]
    value: float


class Exponential(_Frozen):
    """Exponential with the given mean."""

    dist: Literal["exponential"]
    mean: float = Field(gt=0)


Dist = Annotated[Union[Uniform, LogNormal, RandInt, Constant, Exponential], Field(discriminator="dist")]
IntDist = Annotated[Union[RandInt, Constant], Field(discriminator="dist")]


def dist_low(d: Any) -> float:
    """Smallest value a number or distribution can take."""
    if isinstance(d, (int, float)):
        return float(d)
    if isinstance(d, (Uniform, RandInt)):
        return float(d.low)
    if isinstance(d, Constant):
        return d.value
    return 0.0  # lognormal / exponential: > 0 but unbounded below 1


# --------------------------------------------------------------------------- sections
class PartitionConfig(_Frozen):
    """How training samples are split across clients (ignored for quadratic and synthetic)."""

    name: Literal["iid", "dirichlet", "dirichlet_equal", "shards", "powerlaw"] = "iid"
    alpha: float = Field(0.5, gt=0)
    classes_per_client: int = Field(2, ge=1)
    min_size: int = Field(10, ge=1)
    power: float = Field(1.5, gt=0)


DataName = Literal[
    "quadratic", "synthetic", "digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "tinyimagenet"
]


class DataConfig(_Frozen):
    """Workload data. docs/scenario.md says which keys apply to which ``name``."""

    name: DataName = "quadratic"
    clients: int | None = Field(None, ge=1)
    seed: int | None = None  # seeds the data (draws, partition); default: the scenario seed
    # quadratic
    centers: tuple[tuple[float, ...], ...] | None = None
    dim: int = Field(10, ge=1)
    center_scale: float = Field(1.0, gt=0)
    weights: tuple[float, ...] | None = None
    # synthetic (FedProx Synthetic(alpha, beta))
    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    iid: bool = False
    # digits / images
    partition: PartitionConfig = PartitionConfig()
    root: str = "data"
    download: bool = False
    standin: bool = False
    augment: bool | None = None
    n_train: int | None = Field(None, ge=1)
    n_test: int | None = Field(None, ge=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)

    @field_validator("weights")
    @classmethod
    def _weights(cls, w):
        if w is not None:
            if any(x < 0 for x in w) or sum(w) <= 0:
                raise ValueError("must be non-negative with a positive sum")
        return w

    @model_validator(mode="after")
    def _clients(self):
        if self.name == "quadratic":
            if self.centers is not None:
                if len({len(c) for c in self.centers}) != 1:
                    raise _FieldError("data.centers", "every center needs the same dimension")
                if self.clients is not None and self.clients != len(self.centers):
                    raise _FieldError("data.clients", "must equal the number of centers")
            if self.weights is not None and len(self.weights) != self.num_clients:
                raise _FieldError("data.weights", f"need one weight per client ({self.num_clients})")
        elif self.weights is not None:
            raise _FieldError("data.weights", "only for quadratic data (otherwise p_i = n_i / n)")
        return self

    @property
    def num_clients(self) -> int:
        if self.clients is not None:
            return self.clients
        if self.centers is not None:
            return len(self.centers)
        return 30 if self.name == "synthetic" else 10


class ModelConfig(_Frozen):
    name: Literal["quadratic", "logreg", "mlp", "cnn", "vgg11", "resnet18_gn"] | None = None
    hidden: int = Field(200, ge=1)


class MarkovAvailability(_Frozen):
    """Two-state Markov availability: exponential online/offline sojourns with these means."""

    model: Literal["markov"]
    mean_online: float = Field(gt=0)
    mean_offline: float = Field(gt=0)


class DiurnalAvailability(_Frozen):
    """A daily cycle: online probability trough + (peak - trough) (1 + cos(2 pi (t - phase) /
    period)) / 2 per client, followed by on/off sojourns of about ``mean_sojourn`` seconds."""

    model: Literal["diurnal"]
    period: float = Field(86400.0, gt=0, le=MAX_TIME)
    peak: float = Field(0.8, ge=0, le=1)
    trough: float = Field(0.1, ge=0, le=1)
    phase: float | tuple[float, ...] | Uniform = 0.0
    mean_sojourn: float = Field(3600.0, gt=0, le=MAX_TIME)

    @model_validator(mode="after")
    def _levels(self):
        if self.trough > self.peak:
            raise _FieldError("system.availability.trough", "must be <= peak")
        if self.peak == 0:
            raise _FieldError("system.availability.peak", "must be > 0 (else no client is ever online)")
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
    elif isinstance(s, (Uniform, RandInt, Constant)):
        values = [dist_low(s), s.value if isinstance(s, Constant) else s.high]
    else:
        values = [s.median if isinstance(s, LogNormal) else s.mean]
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

    def value(self, batch_size: int = 32) -> clock_model.System:
        """The clock's :class:`fedsim.clock.model.System` (a trace replaces compute and
        availability; ``batch_size`` sets a device trace's step time)."""
        cm = clock_model
        av = self.availability
        if self.trace is not None:
            compute = availability = cm.Traced(self.trace, self.trace_repeat, batch_size, self.trace_semantics)
        else:
            compute = cm.Speed(_per_client_value(self.speed)) if self.compute is None \
                else cm.Flops(_per_client_value(self.compute.flops))
            if av == "always":
                availability = cm.Always()
            elif isinstance(av, MarkovAvailability):
                availability = cm.Markov(av.mean_online, av.mean_offline)
            elif isinstance(av, DiurnalAvailability):
                phase = av.phase if isinstance(av.phase, (int, float, tuple)) else _dist_value(av.phase)
                availability = cm.Diurnal(av.period, av.peak, av.trough, phase, av.mean_sojourn)
            else:
                availability = cm.Intervals(av)
        network = None if self.network is None else \
            cm.Network(_per_client_value(self.network.down), _per_client_value(self.network.up))
        slowdown = None if self.slowdown is None else _dist_value(self.slowdown)
        return cm.System(compute, availability, slowdown, float(self.latency), network)


def _dist_value(d: Any) -> Any:
    """The clock's distribution value (with ``sample(rng)``) of a scenario distribution."""
    cm = clock_model
    if isinstance(d, Uniform):
        return cm.Uniform(d.low, d.high)
    if isinstance(d, LogNormal):
        return cm.LogNormal(d.median, d.sigma)
    if isinstance(d, RandInt):
        return cm.RandInt(d.low, d.high)
    if isinstance(d, Exponential):
        return cm.Exponential(d.mean)
    return cm.Constant(d.value)


def _per_client_value(x: Any) -> Any:
    return x if isinstance(x, (int, float, tuple)) else _dist_value(x)


class RoundConfig(_Frozen):
    """Server round policy and the work each client is given."""

    policy: Literal["window", "wait", "deadline", "async"] = "window"
    window: float | None = Field(None, gt=0)
    deadline: float | None = Field(None, gt=0)
    local_steps: int | IntDist | None = None
    local_epochs: int | IntDist | None = None
    max_local_steps: int | None = Field(None, ge=1)
    clients_per_round: int | None = Field(None, ge=1)
    sampling: Literal["uniform", "weighted"] = "uniform"
    weights: Literal["normalized", "unbiased"] = "normalized"  # uniform sampling's w_i (docs/algorithms.md)
    # asynchronous policy
    concurrency: int | None = Field(None, ge=1)
    buffer: int = Field(1, ge=1)

    @field_validator("local_steps", "local_epochs")
    @classmethod
    def _work(cls, w, info):
        if isinstance(w, Constant) and not float(w.value).is_integer():
            raise ValueError("a constant number of steps or epochs must be an integer")
        if w is not None and dist_low(w) < 1:
            raise ValueError("must be >= 1")
        return w  # upper bounds: fedsim.validate.check_limits

    def value(self, batch_size: int) -> clock_model.RoundRule:
        """The clock's :class:`fedsim.clock.model.RoundRule` (``batch_size`` B for local_epochs)."""
        cm = clock_model
        policy = {
            "window": lambda: cm.Window(self.window),
            "wait": cm.Wait,
            "deadline": lambda: cm.Deadline(self.deadline),
            "async": lambda: cm.Async(self.concurrency, self.buffer),
        }[self.policy]()

        def dist(w):
            return cm.Constant(w) if isinstance(w, int) else _dist_value(w)

        if self.local_steps is not None:
            work = cm.Steps(dist(self.local_steps))
        elif self.local_epochs is not None:
            work = cm.Epochs(dist(self.local_epochs), batch_size)
        else:
            work = None
        return cm.RoundRule(policy, work, self.max_local_steps, self.clients_per_round, self.sampling, self.weights)


class AlgorithmConfig(_Frozen):
    """Algorithm preset plus overrides. ``None`` means "the preset's default"."""

    name: str = "fedavg"
    lr: float = 0.1
    batch_size: int = Field(32, ge=1)
    weight_decay: float = Field(0.0, ge=0)
    momentum: float | None = Field(None, ge=0, lt=1)
    mu: float | None = Field(None, ge=0)
    clip_norm: float | None = Field(None, gt=0)
    lr_decay: float = Field(1.0, gt=0, le=1)  # per local step within a round
    lr_round_decay: float = Field(1.0, gt=0, le=1)  # per round, exponential (FedLADA 0.998)
    lr_milestones: tuple[float, ...] = ()  # fractions of the run (FedNova: [0.5, 0.75])
    lr_milestone_factor: float = Field(0.1, gt=0, le=1)
    solver: Literal["sgd", "adam", "amsgrad"] | None = None
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    correction: Literal["none", "scaffold", "vrlsgd", "fedcm", "lada", "nova_vr"] | None = None
    amend: float | None = Field(None, ge=0, le=1)  # FedCM / FedLADA alpha
    aggregation: Literal["avg", "nova"] | None = None
    tau_eff: Literal["a_norm", "tau"] | None = None
    server_opt: Literal["sgd", "momentum", "adam", "yogi", "adagrad"] | None = None
    server_lr: float | None = Field(None, gt=0)
    server_momentum: float | None = Field(None, ge=0, lt=1)
    server_betas: tuple[float, float] | None = None
    server_eps: float | None = Field(None, gt=0)
    share_vhat: bool | None = None
    # asynchronous
    staleness: Literal["constant", "polynomial", "hinge"] = "polynomial"
    staleness_exponent: float = 0.5
    hinge_a: float = Field(10.0, gt=0)
    hinge_b: float = Field(4.0, ge=0)
    mixing: float = Field(0.6, gt=0, le=1)  # FedAsync a
    normalize_async: bool = False

    @field_validator("lr")
    @classmethod
    def _lr(cls, v):
        if not v > 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("lr_milestones")
    @classmethod
    def _milestones(cls, v):
        if any(not 0 < f < 1 for f in v) or list(v) != sorted(v):
            raise ValueError("fractions must be increasing and in (0, 1)")
        return v

    @field_validator("staleness_exponent")
    @classmethod
    def _exp(cls, v):
        if v < 0:
            raise ValueError("must be >= 0")
        return v


class EvalConfig(_Frozen):
    """Evaluation: every ``every`` rounds; the training objective over the evaluation sample.

    ``clients``: size of a fixed uniform sample of clients (seeded by the data seed) whose training
    data make the reported training objective (and, for Synthetic, whose test parts make the test
    set). Default: every client when there are at most 1,000, else 1,000 of them.
    """

    every: int = Field(1, ge=1)
    train_loss: bool = True
    clients: int | None = Field(None, ge=1)
    #: evaluate the model standing at simulated times S, 2S, ... into evals.csv (fedsim.run.evals)
    every_seconds: float | None = Field(None, gt=0, le=1e9)


class EngineConfig(_Frozen):
    clients_per_batch: Literal["auto"] | int = "auto"
    device: str = "auto"
    dtype: Literal["float32", "float64"] = "float32"
    threads: int | None = Field(None, ge=1)

    @field_validator("device")
    @classmethod
    def _device(cls, v):
        return check_device_spec(v)

    @field_validator("clients_per_batch")
    @classmethod
    def _cpb(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("must be >= 1 or auto")
        return v


class CheckpointConfig(_Frozen):
    every: int = Field(0, ge=0)  # rounds; 0 = never


class Scenario(_Frozen):
    """One simulation: workload, system, round policy, algorithm, evaluation, engine."""

    name: str = "run"
    seed: int = 0
    rounds: int = Field(10, ge=1)
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    system: SystemConfig = SystemConfig()
    round: RoundConfig = RoundConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    engine: EngineConfig = EngineConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    variants: dict[str, dict[str, Any]] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return check_run_name(v)

    @model_validator(mode="after")
    def _cross(self):
        m = self.data.num_clients
        r = self.round
        if r.clients_per_round is not None and r.clients_per_round > m:
            raise _FieldError("round.clients_per_round", f"must be <= data.clients ({m})")
        if isinstance(self.system.speed, tuple) and len(self.system.speed) != m:
            raise _FieldError("system.speed", f"needs one speed per client ({m})")
        av = self.system.availability
        if isinstance(av, DiurnalAvailability) and isinstance(av.phase, tuple) and len(av.phase) != m:
            raise _FieldError("system.availability.phase", f"needs one phase per client ({m})")
        if isinstance(av, tuple) and len(av) != m:
            raise _FieldError("system.availability", f"needs one interval list per client ({m})")
        two_lat = 2 * self.system.latency
        if r.policy == "window":
            if r.window is None:
                raise _FieldError("round.window", "required for policy window")
            if not r.window > two_lat:
                raise _FieldError("round.window", "must be longer than two latencies (download + upload)")
        if r.policy == "deadline":
            if r.deadline is None:
                raise _FieldError("round.deadline", "required for policy deadline")
            if not r.deadline > two_lat:
                raise _FieldError("round.deadline", "must be longer than two latencies (download + upload)")
        if r.policy in ("wait", "deadline", "async"):
            if r.local_steps is None and r.local_epochs is None:
                raise _FieldError("round.local_steps", f"policy {r.policy} needs local_steps or local_epochs")
        if r.local_steps is not None and r.local_epochs is not None:
            raise _FieldError("round.local_epochs", "give local_steps or local_epochs, not both")
        if r.local_epochs is not None and self.data.name == "quadratic":
            raise _FieldError("round.local_epochs", "quadratic data has no epochs; use local_steps")
        if r.policy == "async":
            if r.concurrency is None:
                raise _FieldError("round.concurrency", "required for policy async")
            if r.concurrency > m:
                raise _FieldError("round.concurrency", f"must be <= data.clients ({m})")
            if self.algorithm.name == "fedbuff" and r.buffer > r.concurrency:
                raise _FieldError("round.buffer", "must be <= round.concurrency for fedbuff")
        if self.model.name not in (None, "quadratic") and self.data.name == "quadratic":
            raise _FieldError("model.name", "quadratic data takes no model")
        if self.data.name != "quadratic" and self.model.name == "quadratic":
            raise _FieldError("model.name", "quadratic model needs quadratic data")
        if self.system.trace is not None and av != "always":
            raise _FieldError("system.availability", "give either a trace or availability, not both")
        if self.system.trace_semantics == "fedscale" and r.policy == "async":
            raise _FieldError("system.trace_semantics", "fedscale applies to window, wait and deadline rounds, not async")
        _check_model_fits_data(self.data.name, self.model_name, self.data.dim)
        from .algorithms.spec import SpecError, resolve

        try:
            spec = resolve(self.algorithm)
        except SpecError as err:
            raise _FieldError(err.path, err.msg) from None
        if spec.mu > 0 and self.algorithm.lr * spec.mu >= 1:
            raise _FieldError("algorithm.mu", "lr * mu must be < 1 (the proximal step factor 1 - lr mu must stay positive)")
        if spec.asynchronous and r.policy != "async":
            raise _FieldError("algorithm.name", f"{spec.name} needs round.policy async")
        if r.policy == "async" and not spec.asynchronous:
            raise _FieldError("algorithm.name", "round.policy async needs fedbuff or fedasync")
        if spec.asynchronous == "fedasync" and r.buffer != 1:
            raise _FieldError("round.buffer", "fedasync updates the model at every arrival: must be 1 (fedbuff buffers)")
        if spec.asynchronous and spec.aggregation == "nova":
            raise _FieldError("algorithm.aggregation", f"{spec.name}: use algorithm.normalize_async for FedNova's normalization")
        if not spec.asynchronous and self.algorithm.normalize_async:
            # the other async-only keys are ignored by synchronous runs (so one base scenario can
            # serve a compare grid over both); this one would read like FedNova being on.
            raise _FieldError(
                "algorithm.normalize_async", "only for asynchronous algorithms; use fednova / aggregation: nova"
            )
        return self

    @property
    def data_seed(self) -> int:
        """Seed of the workload's data (``data.seed``, else ``seed``)."""
        return self.seed if self.data.seed is None else self.data.seed

    @property
    def model_name(self) -> str:
        if self.data.name == "quadratic":
            return "quadratic"
        return self.model.name or "logreg"


# Input shape of each dataset (before any model): flat features or (C, H, W) images.
_DATA_SHAPES = {
    "digits": (1, 8, 8), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28),
    "cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "tinyimagenet": (3, 64, 64),
}
_CONV_MIN_SIDE = {"cnn": 4, "vgg11": 32, "resnet18_gn": 8}


def _check_model_fits_data(data: str, model: str, dim: int) -> None:
    if model not in _CONV_MIN_SIDE:
        return
    shape = _DATA_SHAPES.get(data)
    if shape is None:
        raise _FieldError("model.name", f"{model} needs image data; {data} has flat features")
    if min(shape[1:]) < _CONV_MIN_SIDE[model]:
        raise _FieldError("model.name", f"{model} needs images of at least {_CONV_MIN_SIDE[model]}x{_CONV_MIN_SIDE[model]}; {data} has {shape[1]}x{shape[2]}")


class _FieldError(ValueError):
    def __init__(self, path: str, msg: str):
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg


# --------------------------------------------------------------------------- loading
def _format_error(err: ValidationError) -> str:
    e = _first_problem(err.errors(include_url=False))
    loc = [str(p) for p in e["loc"] if not _is_union_tag(p)]
    path = ".".join(loc)
    msg = e["msg"]
    ctx = e.get("ctx") or {}
    if isinstance(ctx.get("error"), _FieldError):
        return f"{ctx['error'].path}: {ctx['error'].msg}"
    if isinstance(e.get("input"), _Boolean):
        msg = f"must not be true/false (got {e['input']!r})"  # YAML 1.2 spelling, e.g. [1, true]
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif e["type"] == "union_tag_invalid":
        path, msg = f"{path}.{ctx['discriminator'].strip(chr(39))}", f"{ctx['tag']!r} is not one of {ctx['expected_tags']}"
    elif e["type"] == "union_tag_not_found":
        path, msg = f"{path}.{ctx['discriminator'].strip(chr(39))}", "missing (which distribution?)"
    return f"{path}: {msg}" if path else msg


# Errors saying only that a union member does not take this kind of value at all.
_MISMATCH = {
    "float_type", "int_type", "tuple_type", "list_type", "string_type", "bool_type", "dict_type",
    "model_type", "model_attributes_type", "literal_error", "float_parsing", "int_parsing", "bool_parsing",
}


def _first_problem(errors: list[dict]) -> dict:
    """The error that names the real problem of the first invalid field.

    For a union (``speed: 3.0 | [...] | {dist: ...}``) pydantic lists one error per member, the
    members that do not take the value's kind first; the useful one is inside the member that
    does take it (an unknown key, a missing one, ``low > high``). Unknown keys come first: a
    typo (``lo`` for ``low``) is then named, not the key it left missing.
    """
    first = errors[0]
    k = next((i for i, p in enumerate(first["loc"]) if _is_union_tag(p)), None)
    if k is None:
        return first
    prefix = first["loc"][:k]
    same = [e for e in errors if e["loc"][:k] == prefix and len(e["loc"]) > k and _is_union_tag(e["loc"][k])]
    real = [
        e for e in same
        if e["type"] not in _MISMATCH or any(not _is_union_tag(p) for p in e["loc"][k + 1 :])
    ]
    return next((e for e in real if e["type"] == "extra_forbidden"), real[0] if real else first)


def _is_union_tag(p: Any) -> bool:
    # pydantic puts union member names (e.g. 'float', 'tuple[float, ...]', 'uniform') in loc
    return isinstance(p, str) and (
        p in {"float", "int", "str", "bool", "uniform", "lognormal", "randint", "constant", "exponential"}
        or p in {"always", "markov", "diurnal", "intervals"}  # system.availability's tags
        or "[" in p
        or p.startswith("function-")
        or p in {"MarkovAvailability", "DiurnalAvailability", "literal['always']", "Uniform", "LogNormal", "RandInt", "Constant"}
    )


def parse_scenario(raw: Any, base_dir: Path | None = None) -> Scenario:
    """Validate a raw mapping into a :class:`Scenario`; relative paths resolve against ``base_dir``."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError("scenario: top level must be a mapping")
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(_format_error(err)) from None
    except _FieldError as err:  # pragma: no cover - pydantic wraps these
        raise ScenarioError(str(err)) from None
    check_limits(sc)
    check_paths(sc)
    if base_dir is not None:
        sc = _resolve_paths(sc, base_dir)
    return sc


def _resolve_paths(sc: Scenario, base: Path) -> Scenario:
    data = sc.data
    root = Path(data.root)
    if not root.is_absolute():
        data = data.model_copy(update={"root": str((base / root).resolve())})
    system = sc.system
    if system.trace is not None and not Path(system.trace).is_absolute():
        system = system.model_copy(update={"trace": str((base / system.trace).resolve())})
    return sc.model_copy(update={"data": data, "system": system})


def _parse_value(text: str, where: str) -> Any:
    try:
        return load_yaml(text)
    except YamlInputError as err:
        raise ScenarioError(f"{where}: {err}") from None
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=value`` overrides (value parsed as YAML) to a raw scenario mapping."""
    raw = _deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected dotted.key=value")
        key, value = item.split("=", 1)
        set_dotted(raw, key.strip(), _parse_value(value, f"--set {item}"), f"--set {item}")
    return raw


def set_dotted(raw: dict, key: str, value: Any, where: str) -> None:
    parts = key.split(".")
    if not all(parts):
        raise ScenarioError(f"{where}: empty key")
    if len(parts) > MAX_YAML_DEPTH:
        raise ScenarioError(f"{where}: key nested deeper than {MAX_YAML_DEPTH} levels")
    if parts[0] == "variants" and len(parts) > 2 and isinstance(raw.get("variants"), dict):
        # a variant's overrides are themselves dotted keys: keep the rest of the path as one key
        variant = raw["variants"].get(parts[1])
        if not isinstance(variant, dict):
            variant = raw["variants"][parts[1]] = {}
        variant[".".join(parts[2:])] = value
        return
    node = raw
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def _deepcopy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deepcopy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deepcopy(v) for v in x]
    return x


def read_yaml(path: str | Path) -> dict:
    """Read a scenario file into a raw mapping (:func:`~fedsim.scenario_yaml.load_yaml` only).

    Only a regular file of at most ``MAX_SCENARIO_BYTES`` is read (never a device or a FIFO).
    """
    p = Path(path)
    try:
        raw = load_yaml(read_regular_file(p, MAX_SCENARIO_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such scenario file") from None
    except OSError as err:
        raise ScenarioError(f"{p}: cannot read ({err.strerror or type(err).__name__})") from None
    except YamlInputError as err:
        raise ScenarioError(f"{p}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{p}:{where}: YAML syntax error: {problem}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{p}: not a text file") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{p}: top level must be a mapping")
    return raw


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario file."""
    raw = read_yaml(path)
    raw = apply_overrides(raw, overrides or [])
    check_names(raw)
    return parse_scenario(raw, base_dir=Path(path).resolve().parent)


def expand_variants(sc: Scenario, raw: dict, base_dir: Path | None = None) -> list[tuple[str, Scenario]]:
    """``[(variant, scenario)]``: one scenario per entry of ``variants`` (overrides applied)."""
    if not sc.variants:
        return [("", sc)]
    out = []
    for vname, over in sc.variants.items():
        if not isinstance(over, dict):
            raise ScenarioError(f"variants.{vname}: must map dotted keys to values")
        sub = {k: v for k, v in raw.items() if k != "variants"}
        sub = _deepcopy(sub)
        for k, v in over.items():
            set_dotted(sub, str(k), _deepcopy(v), f"variants.{vname}.{k}")
        sub["name"] = f"{sc.name}/{vname}"
        try:
            out.append((vname, parse_scenario(sub, base_dir)))
        except ScenarioError as err:
            raise ScenarioError(f"variants.{vname}.{err}") from None
    return out


def dump_scenario(sc: Scenario) -> str:
    """The fully resolved scenario as YAML (round-trips through :func:`parse_scenario`)."""
    return yaml.safe_dump(_plain(sc.model_dump(mode="json")), sort_keys=False)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
