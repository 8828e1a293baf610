"""Resolve a scenario's ``algorithm`` section into one flat, frozen :class:`AlgoSpec`.

``resolve`` fills every key the scenario leaves unset from the named preset (``presets.py``) and
then checks the combination. Preset-provided parts follow an explicit override where that is the
only sensible reading (``solver: sgd`` on ``fedlada`` turns its ``lada`` amendment into ``fedcm``
and drops ``share_vhat``; ``server_momentum`` on a plain-SGD server turns it into ``momentum``;
``amend`` on an algorithm without a correction adds the amended direction). A combination that
makes no sense raises :class:`SpecError` naming the key the user set (``algorithm.x: ...``),
which the scenario loader turns into exit status 2. A name no registry knows is the registry's own
one-line error (:meth:`fedsim.named_pieces.Registry.get`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from .lr import round_lr
from .parts import KINDS
from .presets import BASE

__all__ = ["AlgoSpec", "resolve", "SpecError", "CONTROL_VARIATES", "GLOBAL_DIRECTION", "OVERRIDABLE", "PART_KINDS",
           "part"]

#: Built-in corrections that keep per-client control variates (SCAFFOLD family).
CONTROL_VARIATES = ("scaffold", "vrlsgd", "nova_vr")
#: Built-in corrections that amend the local step with the server's global direction.
GLOBAL_DIRECTION = ("fedcm", "lada")

#: The kinds of algorithm part: each an AlgoSpec field naming a part, and the key of its registry in
#: :data:`fedsim.registries.ALL` (``solver``, ``correction``, ``aggregation``, ``server_opt``,
#: ``staleness``: :data:`fedsim.algorithms.parts.KINDS`).
PART_KINDS = tuple(KINDS)


def part(kind: str, name: str):
    """The part registered as ``name`` in the registry of ``kind`` (one of :data:`PART_KINDS`); an
    unknown name is the registry's :class:`~fedsim.errors.ScenarioError` listing the known ones."""
    from ..registries import ALL

    return ALL[kind].get(name)


class SpecError(ScenarioError):
    """A combination that makes no sense; ``path`` names the offending key."""

    def __init__(self, path: str, msg: str):
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg


@dataclass(frozen=True)
class AlgoSpec:
    """Every part of an algorithm, resolved (docs/algorithms.md)."""

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
        """A local solver that is not linear in the gradients (Adam family): ||a_i||_1 is reported
        as tau_i."""
        return not part("solver", self.solver).linear

    @property
    def keeps_vhat(self) -> bool:
        """The local solver keeps an AMSGrad v_hat (returned per client, seeded by the server's)."""
        return part("solver", self.solver).keeps_vhat

    @property
    def uses_global_direction(self) -> bool:
        return part("correction", self.correction).direction

    @property
    def uses_control_variates(self) -> bool:
        return part("correction", self.correction).control_variates

    def round_lr(self, round_index: int, total_rounds: int) -> float:
        """Local lr at the start of round ``round_index`` (0-based).

        ``lr * lr_round_decay**round_index``, times ``lr_milestone_factor`` once for every
        milestone fraction f already passed: rounds ``>= ceil(f * total_rounds)`` (FedNova: /10
        after 50% and /100 after 75% of the rounds with ``[0.5, 0.75]`` and factor 0.1).
        """
        return round_lr(self.lr, self.lr_round_decay, self.lr_milestones, self.lr_milestone_factor,
                        round_index, total_rounds)


#: Keys a preset fills when the scenario leaves them unset (``None``).
OVERRIDABLE = (
    "momentum mu solver correction amend aggregation tau_eff server_opt server_lr "
    "server_momentum server_betas server_eps share_vhat"
).split()


def resolve(cfg) -> AlgoSpec:
    """Fill the unset keys of an ``AlgorithmConfig`` from its preset (registered in
    :data:`fedsim.registries.ALGORITHMS`; a preset names only the parts it changes from
    :data:`~fedsim.algorithms.presets.BASE`) and check the combination."""
    from ..registries import ALGORITHMS

    base = dict(BASE)
    preset = ALGORITHMS.get(cfg.name)
    unknown = sorted(set(preset) - set(BASE))
    if unknown:
        raise SpecError("algorithm.name", f"preset {cfg.name!r} sets {unknown[0]!r}, not a part of an algorithm "
                        f"(parts: {', '.join(BASE)})")
    base.update(preset)
    explicit = {key for key in OVERRIDABLE if getattr(cfg, key) is not None}
    for key in explicit:
        base[key] = getattr(cfg, key)
    _follow_overrides(base, explicit)
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
    _check(spec, explicit)
    return spec


def _follow_overrides(b: dict, explicit: set[str]) -> None:
    """Adjust preset-provided parts to the user's explicit overrides (never explicit ones)."""
    adaptive = not part("solver", b["solver"]).linear
    if "correction" not in explicit:
        if b["correction"] == "none" and "amend" in explicit and b["amend"] != 1.0:
            b["correction"] = "lada" if adaptive else "fedcm"
        elif b["correction"] == "lada" and not adaptive:
            b["correction"] = "fedcm"
        elif b["correction"] == "fedcm" and adaptive:
            b["correction"] = "lada"
    if "share_vhat" not in explicit and not part("solver", b["solver"]).keeps_vhat:
        b["share_vhat"] = False
    if "server_opt" not in explicit and "server_momentum" in explicit:
        if b["server_opt"] == "sgd" and b["server_momentum"] > 0:
            b["server_opt"] = "momentum"
    if "server_momentum" not in explicit and b["server_opt"] == "momentum" and b["server_momentum"] == 0:
        b["server_momentum"] = 0.9
    if "server_momentum" not in explicit and b["server_opt"] != "momentum":
        b["server_momentum"] = 0.0
    if "aggregation" in explicit and "tau_eff" not in explicit and b["aggregation"] == "avg":
        b["tau_eff"] = "a_norm"


def _check(s: AlgoSpec, explicit: set[str]) -> None:
    def blame(*keys: str) -> str:
        """The first of ``keys`` the user set explicitly (else the first): the path to report."""
        for k in keys:
            if k in explicit:
                return f"algorithm.{k}"
        return f"algorithm.{keys[0]}"

    solver = part("solver", s.solver)
    corr = part("correction", s.correction)
    agg = part("aggregation", s.aggregation)
    sopt = part("server_opt", s.server_opt)
    part("staleness", s.staleness)
    if s.adaptive and s.momentum > 0:
        raise SpecError(blame("momentum", "solver"), f"not used by the {s.solver} local solver (it has its own betas)")
    if s.share_vhat and not solver.keeps_vhat:
        raise SpecError(blame("share_vhat", "solver"), "needs a solver that keeps v_hat (amsgrad)")
    if corr.needs == "adaptive" and not s.adaptive:
        raise SpecError(blame("correction", "solver"), f"{s.correction} amends an adaptive solver; use fedcm with sgd")
    if corr.needs == "linear" and s.adaptive:
        kind = "control variates" if corr.control_variates else "correction"
        raise SpecError(
            blame("correction", "solver"),
            f"{s.correction} {kind} need a linear (sgd) local solver, not {s.solver}",
        )
    if corr.direction:
        if not s.amend > 0:
            raise SpecError("algorithm.amend", "must be > 0 (amend 0 ignores the client's own gradient)")
    elif s.amend != 1.0:
        raise SpecError("algorithm.amend", f"needs correction fedcm or lada (correction is {s.correction})")
    if corr.needs_aggregation is not None and s.aggregation != corr.needs_aggregation:
        raise SpecError(blame("aggregation", "correction"),
                        f"correction {s.correction} needs aggregation {corr.needs_aggregation}")
    if "tau_eff" in explicit and not agg.tau_eff:
        raise SpecError("algorithm.tau_eff", "needs aggregation nova")
    if not sopt.momentum and s.server_momentum > 0:
        raise SpecError("algorithm.server_momentum", f"needs server_opt momentum (server_opt is {s.server_opt})")
    if sopt.momentum and s.server_momentum == 0:
        raise SpecError("algorithm.server_momentum", f"server_opt {s.server_opt} needs server_momentum > 0")
    if not sopt.adaptive:
        for key in ("server_betas", "server_eps"):
            if key in explicit:
                raise SpecError(f"algorithm.{key}", f"needs server_opt adam, yogi or adagrad (server_opt is {s.server_opt})")
    for key, b in (("betas", s.betas), ("server_betas", s.server_betas)):
        if not all(0 <= x < 1 for x in b):
            raise SpecError(f"algorithm.{key}", "must be in [0, 1)")
    if s.asynchronous is not None:
        if not corr.asynchronous:
            raise SpecError(blame("correction", "amend"), f"not supported by asynchronous {s.asynchronous}")
        if s.share_vhat:
            raise SpecError("algorithm.share_vhat", f"not supported by asynchronous {s.asynchronous}")
