"""The kinds of algorithm part a scenario names, and fedsim's own parts (registered as a plug-in's).

A scenario's ``algorithm`` section names one part of each kind; each name is looked up in its
registry (:mod:`fedsim.registries`):

=====================  ===================  =====================================================
scenario key           registry             part
=====================  ===================  =====================================================
``solver``             ``SOLVERS``          :class:`Solver`: the local solver's transforms
``correction``         ``CORRECTIONS``      :class:`Correction`: local correction + server rule
``aggregation``        ``AGGREGATIONS``     :class:`Aggregation`: the round's updates -> d
``server_opt``         ``SERVER_OPTS``      :class:`ServerOpt`: the server optimizer on d
``staleness``          ``STALENESS``        :class:`StalenessRule`: async weight w(s)
=====================  ===================  =====================================================

Each part is a small frozen value: what the spec checks need to know (``linear``, ``keeps_vhat``,
``control_variates``, ...) as plain fields, and ``build(spec)`` functions that return the pieces
(:class:`fedsim.algorithms.transforms.Transform` and plain functions) when a run is built. This
module imports no torch, so checking a scenario's names and combinations stays light; the
builders import :mod:`~fedsim.algorithms.transforms` when called. docs/extending.md documents the
contract of each part with runnable examples; docs/algorithms.md the built-ins' equations.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

__all__ = [
    "Solver", "Correction", "Aggregation", "ServerOpt", "StalenessRule",
    "SGD", "ADAM", "AMSGRAD", "NONE", "SCAFFOLD", "VRLSGD", "NOVA_VR", "FEDCM", "LADA",
    "AVG", "NOVA", "SERVER_SGD", "SERVER_MOMENTUM", "SERVER_ADAM", "SERVER_YOGI", "SERVER_ADAGRAD",
    "CONSTANT", "POLYNOMIAL", "HINGE", "Staleness", "KINDS", "check_part",
]


def _none(spec: Any) -> tuple:
    return ()


@dataclass(frozen=True)
class Solver:
    """A local solver: the transforms between the (clipped, decayed, corrected) gradient and the
    step ``x <- x - lr_k * u``.

    Attributes:
        build: ``spec -> transforms`` in chain order (the proximal term included where the solver
            places it).
        linear: The update is linear in the gradients, so ||a_i||_1 is exact by the shadow run
            (FedNova eq. (6)); False (Adam family): ||a_i||_1 is reported as tau_i.
        keeps_vhat: The state holds an AMSGrad ``vhat.<name>`` per parameter, returned to the server
            (``share_vhat``) and seeded from it.
    """

    build: Callable[[Any], Sequence[Any]]
    linear: bool = True
    keeps_vhat: bool = False


@dataclass(frozen=True)
class Correction:
    """A local correction and the server state it keeps.

    Attributes:
        before: ``spec -> transforms`` applied to the gradient before the solver (not part of the
            shadow rule a_i unless a transform says ``in_shadow``).
        after: ``spec -> transforms`` applied after the solver (FedCM's amended direction).
        client: ``(server state, client, like) -> Tensors | None``: client i's additive
            correction for the round (what ``Context.corr`` carries), or None.
        server: ``(server state, round update, d, spec) -> server state``: the state after a
            round (called after the server optimizer step, with the aggregated d). Pure.
        init: ``(params, spec) -> dict`` of :class:`~fedsim.algorithms.state.ServerState` fields at
            round 0 (e.g. ``{"c": zeros}``).
        control_variates: Keeps per-client control variates (SCAFFOLD family): a client uploads
            twice the model (``devices.cost``).
        direction: Uses the server's global direction (``Context.direction``).
        needs: ``"linear"`` or ``"adaptive"``: the solver kind it requires; None: any.
        needs_aggregation: The aggregation it requires (FedNova-VR: ``nova``); None: any.
        asynchronous: Usable with FedBuff / FedAsync.
    """

    before: Callable[[Any], Sequence[Any]] = _none
    after: Callable[[Any], Sequence[Any]] = _none
    client: Callable[..., Any] | None = None
    server: Callable[..., Any] | None = None
    init: Callable[..., dict] | None = None
    control_variates: bool = False
    direction: bool = False
    needs: str | None = None
    needs_aggregation: str | None = None
    asynchronous: bool = False


@dataclass(frozen=True)
class Aggregation:
    """``build(spec) -> aggregate``, ``aggregate(update: RoundUpdate) -> d`` (Tensors, the model's
    shapes): the round's model change from the clients' stacked deltas, weights w_i, tau_i and
    ||a_i||_1. ``tau_eff``: whether ``algorithm.tau_eff`` applies. ``asynchronous``: usable with
    FedBuff / FedAsync (which aggregate with their own buffer rule)."""

    build: Callable[[Any], Callable[[Any], Any]]
    tau_eff: bool = False
    asynchronous: bool = True


@dataclass(frozen=True)
class ServerOpt:
    """``build(spec) -> Transform`` on the pseudo-gradient d; its output u is added to x. The
    transform's context carries ``params`` (x), ``lr_ratio`` and ``update`` (the RoundUpdate; None
    in asynchronous updates). ``momentum`` / ``adaptive``: whether ``server_momentum`` /
    ``server_betas``, ``server_eps`` apply."""

    build: Callable[[Any], Any]
    momentum: bool = False
    adaptive: bool = False


@dataclass(frozen=True)
class StalenessRule:
    """``build(spec) -> w``, ``w(s: float) -> float``: the weight of an update of staleness s >= 0."""

    build: Callable[[Any], Callable[[float], float]]


#: Each kind of part (a scenario key, :data:`fedsim.algorithms.spec.PART_KINDS`) and its class.
KINDS = {"solver": Solver, "correction": Correction, "aggregation": Aggregation, "server_opt": ServerOpt,
         "staleness": StalenessRule}

_NEEDS = (None, "linear", "adaptive")


def check_part(kind: str, part: Any) -> None:
    """Raise ``ValueError`` (one line) unless ``part`` is a part of ``kind``: an instance of its class
    (:data:`KINDS`) whose functions are callable (optional ones None or callable), whose flags are
    ``True`` / ``False`` and whose ``needs`` is ``linear``, ``adaptive`` or None. What it builds is
    checked when a run is built (``Algorithm.check``)."""
    cls = KINDS[kind]
    if not isinstance(part, cls):
        raise ValueError(f"expected a fedsim.algorithms.parts.{cls.__name__}, got {type(part).__name__}")
    for f in fields(cls):
        value = getattr(part, f.name)
        if f.type.startswith("Callable") and not f.type.endswith("| None"):
            if not callable(value):
                raise ValueError(f"{cls.__name__}.{f.name} must be callable, got {type(value).__name__}")
        elif f.type.startswith("Callable"):
            if value is not None and not callable(value):
                raise ValueError(f"{cls.__name__}.{f.name} must be None or callable, got {type(value).__name__}")
        elif f.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{cls.__name__}.{f.name} must be True or False, got {type(value).__name__}")
    if kind == "correction":
        if part.needs not in _NEEDS:
            raise ValueError(f"Correction.needs must be 'linear', 'adaptive' or None, got {str(part.needs)[:40]!r}")
        if part.needs_aggregation is not None and not isinstance(part.needs_aggregation, str):
            raise ValueError(f"Correction.needs_aggregation must be an aggregation's name or None, "
                             f"got {type(part.needs_aggregation).__name__}")


# --------------------------------------------------------------------------------- solvers
def _prox(spec):
    from . import transforms as T

    return [T.add_prox(spec.mu)] if spec.mu > 0 else []


def _sgd(spec):
    from . import transforms as T

    p = [T.trace(spec.momentum, "buf.")] if spec.momentum > 0 else []
    return p + _prox(spec)  # the prox term on the step, outside the momentum buffer


def _adam(amsgrad: bool):
    def build(spec):
        from . import transforms as T

        # the prox term is part of the objective the solver preconditions
        return _prox(spec) + [T.scale_by_adam(*spec.betas, spec.eps, amsgrad=amsgrad)]

    return build


SGD = Solver(_sgd)
ADAM = Solver(_adam(False), linear=False)
AMSGRAD = Solver(_adam(True), linear=False, keeps_vhat=True)


# --------------------------------------------------------------------------------- corrections
def _add_correction(spec):
    from . import transforms as T

    return [T.add_correction()]


def _amend(spec):
    from . import transforms as T

    return [T.amend(spec.amend)] if spec.amend != 1.0 else []


def _cv_client(state, client, like):
    ci = state.c_clients.get(client)
    if ci is None:  # never selected so far: c_i = 0 (SCAFFOLD's initialisation)
        return {k: state.c[k].clone() for k in like}
    return {k: state.c[k] - ci[k] for k in like}


def _cv_server(vrlsgd: bool):
    def server(state, upd, d, spec):
        from .state import update_control_variates

        return update_control_variates(state, upd, d, vrlsgd=vrlsgd)

    return server


def _zeros(field: str):
    def init(params, spec):
        import torch

        return {field: {k: torch.zeros_like(v) for k, v in params.items()}}

    return init


def _direction_server(state, upd, d, spec):
    from .state import global_direction

    return replace(state, direction=global_direction(upd, d))


NONE = Correction(asynchronous=True)
SCAFFOLD = Correction(before=_add_correction, client=_cv_client, server=_cv_server(False), init=_zeros("c"),
                      control_variates=True, needs="linear")
VRLSGD = replace(SCAFFOLD, server=_cv_server(True))
NOVA_VR = replace(SCAFFOLD, needs_aggregation="nova")
FEDCM = Correction(after=_amend, server=_direction_server, init=_zeros("direction"), direction=True, needs="linear")
LADA = replace(FEDCM, needs="adaptive")


# --------------------------------------------------------------------------------- aggregations
def _avg(spec):
    from .aggregate import Average

    return Average()


def _nova(spec):
    from .aggregate import Nova

    return Nova(spec.tau_eff)


AVG = Aggregation(_avg)
NOVA = Aggregation(_nova, tau_eff=True, asynchronous=False)


# --------------------------------------------------------------------------------- server optimizers
def _server_sgd(spec):
    from . import transforms as T

    return T.chain(T.scale(spec.server_lr))


def _server_momentum(spec):
    from . import transforms as T

    # FedNova's hybrid momentum keeps its buffer in gradient units across lr changes
    return T.chain(T.trace(spec.server_momentum, "v.", follow_lr=spec.aggregation == "nova"), T.scale(spec.server_lr))


def _server_adaptive(kind: str):
    def build(spec):
        from . import transforms as T

        b1, b2 = spec.server_betas
        return T.chain(T.scale_by_adam(b1, b2, spec.server_eps, second_moment=kind, eps_in_root=False, lr=spec.server_lr))

    return build


SERVER_SGD = ServerOpt(_server_sgd)
SERVER_MOMENTUM = ServerOpt(_server_momentum, momentum=True)
SERVER_ADAM = ServerOpt(_server_adaptive("adam"), adaptive=True)
SERVER_YOGI = ServerOpt(_server_adaptive("yogi"), adaptive=True)
SERVER_ADAGRAD = ServerOpt(_server_adaptive("adagrad"), adaptive=True)


# --------------------------------------------------------------------------------- staleness
@dataclass(frozen=True)
class Staleness:
    """w(s): ``constant`` 1; ``polynomial`` (1 + s)^-exponent; ``hinge`` 1 if s <= b else 1 / (a (s - b) + 1)."""

    kind: str = "polynomial"
    exponent: float = 0.5
    hinge_a: float = 10.0
    hinge_b: float = 4.0

    def __call__(self, s: int | float) -> float:
        s = float(s)
        if s < 0:
            raise ValueError(f"staleness must be >= 0, got {s}")
        if self.kind == "constant":
            return 1.0
        if self.kind == "polynomial":
            return (1.0 + s) ** (-self.exponent)
        if self.kind == "hinge":
            b = self.hinge_b
            return 1.0 if s <= b else 1.0 / (self.hinge_a * (s - b) + 1.0)
        raise ValueError(f"unknown staleness function {self.kind!r}")


def _staleness(kind: str):
    def build(spec):
        return Staleness(kind, spec.staleness_exponent, spec.hinge_a, spec.hinge_b)

    return build


CONSTANT = StalenessRule(_staleness("constant"))
POLYNOMIAL = StalenessRule(_staleness("polynomial"))
HINGE = StalenessRule(_staleness("hinge"))
