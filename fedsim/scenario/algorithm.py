"""The ``algorithm`` section: a named preset plus overrides (resolved by :mod:`fedsim.algorithms.spec`)."""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field, ValidationError, field_validator

from .. import registries
from ..section import Section, registered

__all__ = ["AlgorithmConfig", "check_preset"]

class AlgorithmConfig(Section):
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
    solver: str | None = None  # fedsim.registries.SOLVERS
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    correction: str | None = None  # fedsim.registries.CORRECTIONS
    amend: float | None = Field(None, ge=0, le=1)  # FedCM / FedLADA alpha
    aggregation: str | None = None  # fedsim.registries.AGGREGATIONS
    tau_eff: Literal["a_norm", "tau"] | None = None
    server_opt: str | None = None  # fedsim.registries.SERVER_OPTS
    server_lr: float | None = Field(None, gt=0)
    server_momentum: float | None = Field(None, ge=0, lt=1)
    server_betas: tuple[float, float] | None = None
    server_eps: float | None = Field(None, gt=0)
    share_vhat: bool | None = None
    # asynchronous
    staleness: str = "polynomial"  # fedsim.registries.STALENESS
    staleness_exponent: float = 0.5
    hinge_a: float = Field(10.0, gt=0)
    hinge_b: float = Field(4.0, ge=0)
    mixing: float = Field(0.6, gt=0, le=1)  # FedAsync a
    normalize_async: bool = False
    # compression (fedsim.compression, docs/compression.md): a registered compressor's section or None
    compression: Any = None  # the clients' uploads
    downlink_compression: Any = None  # the server's broadcast

    @field_validator("compression", "downlink_compression", mode="before")
    @classmethod
    def _compression(cls, v, info):
        from ..compression.section import compression_value

        return compression_value(v, f"algorithm.{info.field_name}")

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return registered(registries.ALGORITHMS, v)

    @field_validator("solver", "correction", "aggregation", "server_opt", "staleness")
    @classmethod
    def _part(cls, v, info):
        return v if v is None else registered(registries.ALL[info.field_name], v)

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


def check_preset(preset: Any) -> None:
    """Raise ``ValueError`` (one line, ``KEY: problem``) unless ``preset`` is an algorithm preset: a
    mapping from part keys (those of :data:`fedsim.algorithms.presets.BASE`) to values the
    scenario's ``algorithm`` keys of the same names take (the parts' names are strings; whether
    they are registered is checked when a scenario uses the preset)."""
    from ..algorithms.presets import BASE
    from ..algorithms.spec import PART_KINDS
    from ..section_errors import format_error

    if not isinstance(preset, Mapping):
        raise ValueError(f"a preset is a mapping of part keys to values, got {type(preset).__name__}")
    for key in preset:
        if key not in BASE:
            raise ValueError(f"{str(key)[:40]!r} is not a part of an algorithm (parts: {', '.join(BASE)})")
        if preset[key] is None and BASE[key] is not None:
            raise ValueError(f"{key}: must not be null in a preset (leave it out for the default, {BASE[key]!r})")
    for key in PART_KINDS:
        if key in preset and not isinstance(preset[key], str):
            raise ValueError(f"{key}: must be a registered {key}'s name, got {type(preset[key]).__name__}")
    if preset.get("asynchronous") not in (None, "fedbuff", "fedasync"):
        raise ValueError(f"asynchronous: must be fedbuff, fedasync or null, got {str(preset['asynchronous'])[:40]!r}")
    values = {k: v for k, v in preset.items() if k not in PART_KINDS and k != "asynchronous"}
    try:
        AlgorithmConfig.model_validate(values)
    except ValidationError as err:
        raise ValueError(format_error(err)) from None
