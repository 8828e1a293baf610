"""Resolve a scenario's ``algorithm`` section into one flat, frozen :class:`AlgoSpec`."""

from __future__ import annotations

from dataclasses import dataclass

from .presets import PRESETS, preset

__all__ = ["AlgoSpec", "resolve", "SpecError"]


class SpecError(ValueError):
    """A combination that makes no sense; ``path`` names the offending key."""

    def __init__(self, path: str, msg: str):
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg


@dataclass(frozen=True)
class AlgoSpec:
    name: str
    lr: float
    batch_size: int
    weight_decay: float
    momentum: float
    mu: float
    clip_norm: float | None
    lr_decay: float
    lr_round_decay: float
    lr_milestones: tuple[float, ...]
    lr_milestone_factor: float
    solver: str  # sgd | adam | amsgrad
    betas: tuple[float, float]
    eps: float
    correction: str  # none | scaffold | vrlsgd | nova_vr | fedcm | lada
    amend: float
    aggregation: str  # avg | nova
    tau_eff: str  # a_norm | tau
    server_opt: str  # sgd | momentum | adam | yogi | adagrad
    server_lr: float
    server_momentum: float
    server_betas: tuple[float, float]
    server_eps: float
    share_vhat: bool
    asynchronous: str | None
    staleness: str = "polynomial"
    staleness_exponent: float = 0.5
    hinge_a: float = 10.0
    hinge_b: float = 4.0
    mixing: float = 0.6
    normalize_async: bool = False

    @property
    def adaptive(self) -> bool:
        """Adam-family local solver: not linear, so ||a_i||_1 is reported as tau_i."""
        return self.solver in ("adam", "amsgrad")

    @property
    def uses_global_direction(self) -> bool:
        return self.correction in ("fedcm", "lada")

    @property
    def uses_control_variates(self) -> bool:
        return self.correction in ("scaffold", "vrlsgd", "nova_vr")

    def round_lr(self, round_index: int, total_rounds: int) -> float:
        """Local lr at the start of round ``round_index`` (exponential and milestone decay)."""
        lr = self.lr * self.lr_round_decay**round_index
        for frac in self.lr_milestones:
            if round_index >= int(round(frac * total_rounds)):
                lr *= self.lr_milestone_factor
        return lr


_OVERRIDABLE = (
    "momentum mu solver correction amend aggregation tau_eff server_opt server_lr "
    "server_momentum server_betas server_eps share_vhat"
).split()


def resolve(cfg) -> AlgoSpec:
    """Fill the unset keys of an ``AlgorithmConfig`` from its preset and check the combination."""
    if cfg.name not in PRESETS:
        raise SpecError("algorithm.name", f"unknown algorithm {cfg.name!r}; known: {', '.join(sorted(PRESETS))}")
    base = dict(preset(cfg.name))
    for key in _OVERRIDABLE:
        value = getattr(cfg, key)
        if value is not None:
            base[key] = value
    if cfg.correction is None and cfg.amend is not None and base["correction"] == "none":
        base["correction"] = "fedcm"
    spec = AlgoSpec(
        name=cfg.name,
        lr=cfg.lr,
        batch_size=cfg.batch_size,
        weight_decay=cfg.weight_decay,
        clip_norm=cfg.clip_norm,
        lr_decay=cfg.lr_decay,
        lr_round_decay=cfg.lr_round_decay,
        lr_milestones=tuple(cfg.lr_milestones),
        lr_milestone_factor=cfg.lr_milestone_factor,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        staleness=cfg.staleness,
        staleness_exponent=cfg.staleness_exponent,
        hinge_a=cfg.hinge_a,
        hinge_b=cfg.hinge_b,
        mixing=cfg.mixing,
        normalize_async=cfg.normalize_async,
        **base,
    )
    _check(spec)
    return spec


def _check(s: AlgoSpec) -> None:
    if s.adaptive and s.momentum > 0:
        raise SpecError("algorithm.momentum", f"not used by the {s.solver} local solver (it has its own betas)")
    if s.share_vhat and s.solver != "amsgrad":
        raise SpecError("algorithm.share_vhat", "needs solver amsgrad")
    if s.correction in ("fedcm", "lada") and s.amend >= 1.0 and s.correction == "fedcm":
        pass  # amend 1 is plain local SGD: allowed for ablations
    if s.correction == "lada" and not s.adaptive:
        raise SpecError("algorithm.correction", "lada amends an adaptive solver; use fedcm with sgd")
    if s.correction == "none" and s.amend != 1.0:
        raise SpecError("algorithm.amend", "needs correction fedcm or lada")
    if s.correction == "nova_vr" and s.aggregation != "nova":
        raise SpecError("algorithm.correction", "nova_vr needs aggregation nova")
    if s.server_opt != "momentum" and s.server_momentum > 0:
        raise SpecError("algorithm.server_momentum", "needs server_opt momentum")
    if s.server_opt == "momentum" and s.server_momentum == 0:
        raise SpecError("algorithm.server_momentum", "server_opt momentum needs server_momentum > 0")
    if s.aggregation == "nova" and s.adaptive and s.correction != "none":
        pass
    for b in (s.betas, s.server_betas):
        if not all(0 <= x < 1 for x in b):
            raise SpecError("algorithm.betas", "must be in [0, 1)")
