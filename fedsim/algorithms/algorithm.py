"""An algorithm as a value: the chains of one resolved :class:`AlgoSpec`, built once, clock-free.

``Algorithm.build(spec)`` (also :func:`algorithm`) looks every part of the spec up in its registry
once (:class:`Parts`) and assembles the pieces of ``transforms.py``:

    local  (SGD family): clip -> weight decay -> correction -> momentum trace -> prox -> amend
    local  (Adam/AMSGrad): clip -> weight decay -> correction -> prox -> Adam/AMSGrad scaling -> amend
           (each piece only where the spec uses it)
    step:  x <- x - lr_k * u
    shadow: the local chain without clip, weight decay and correction (the rule a_i of ``a_norm``)
    server: aggregate (avg | nova) -> [momentum trace | Adam/Yogi/Adagrad scaling] -> eta_g; x <- x + u

and drives them: ``init`` (server state), ``client_step`` / ``client_update`` (local training of
stacked clients on any gradient oracle), ``correction`` (a client's additive correction),
``a_norm`` (the shadow run), ``server_update``. The parts are looked up by name in their
registries (:mod:`fedsim.algorithms.parts`, :mod:`fedsim.registries`) when the algorithm is built
and never again: fedsim's own parts and a user's go through the same lookups, and a part
registered again with ``replace=True`` is used by the next algorithm built. The engine holds the
run's one ``Algorithm`` (``engine/run.py``, ``engine/train.py``). docs/algorithms.md gives the
equations and citations, docs/extending.md the contract of the parts.

The server side of a synchronous round (``server_update``). Aggregation (``aggregate.py``; Wang
et al. 2020, eq. (7)), with the weights w_i of the clients that reported:

    avg:  d = sum_i w_i Delta_i
    nova: d = tau_eff * sum_i w_i Delta_i / ||a_i||_1,   tau_eff = sum_i w_i ||a_i||_1 (or tau_i)

Server optimizer on the pseudo-gradient d (Reddi et al. 2021; Hsu et al. 2019), no bias correction:
    sgd:      x += eta_g d
    momentum: v = beta v + d;            x += eta_g v       (avg: FedAvgM, Hsu et al. 2019)
              v = beta (eta_t / eta_{t-1}) v + d; x += eta_g v  (nova: FedNova's hybrid momentum,
              the buffer b = v / eta_t kept in gradient units: b = beta b + d / eta_t, x += eta_g eta_t b;
              eta_t the round's local lr, so the two rules differ only after an lr change)
    adam:     m = b1 m + (1-b1) d; v = b2 v + (1-b2) d^2;                 x += eta_g m/(sqrt(v)+eps)
    yogi:     m as adam; v = v - (1-b2) d^2 sign(v - d^2);               x += eta_g m/(sqrt(v)+eps)
    adagrad:  m as adam; v = v + d^2;                                      x += eta_g m/(sqrt(v)+eps)

Persistent state (control variates, global direction, shared v_hat): ``state.py``.

Driving one round by hand (tests, notebooks)::

    alg = algorithm(resolve(AlgorithmConfig(name="fednova")))
    params = {"x": torch.zeros(2, dtype=torch.float64)}
    state = alg.init(params)
    upd = alg.client_update(params, state, grad, steps=[2, 3], lr=0.1, weights=[0.5, 0.5])
    params, state = alg.server_update(params, state, upd)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from ..errors import ScenarioError
from ..factory_options import failure
from . import transforms as T
from .lr import StepLrs
from .spec import PART_KINDS, AlgoSpec, part
from .state import RoundUpdate, ServerState, shared_vhat

Tensors = dict[str, torch.Tensor]

__all__ = ["Algorithm", "Parts", "algorithm", "masked"]


@dataclass(frozen=True)
class Parts:
    """The registered parts a spec names, looked up once (:mod:`fedsim.algorithms.parts`)."""

    solver: Any  # parts.Solver
    correction: Any  # parts.Correction
    aggregation: Any  # parts.Aggregation
    server_opt: Any  # parts.ServerOpt
    staleness: Any  # parts.StalenessRule

    @classmethod
    def of(cls, spec: AlgoSpec) -> "Parts":
        """Each part ``spec`` names, from its registry (an unknown name: the registry's one-line
        error naming the field)."""
        return cls(*(part(kind, getattr(spec, kind)) for kind in PART_KINDS))


def _built(spec: AlgoSpec, kind: str, what: str, build: Callable[[AlgoSpec], Any], ok: Callable[[Any], bool],
           expected: str) -> Any:
    """``build(spec)`` of the part ``spec`` names as ``kind``; a builder that raises or returns
    something else than ``expected`` is one line naming the part (ScenarioError, exit 2)."""
    name = f"algorithm.{kind}: {getattr(spec, kind)!r}"
    try:
        out = build(spec)
    except ScenarioError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a part's builder failing is one line naming it
        raise ScenarioError(f"{name}: {what} raised {failure(err)}") from None
    if not ok(out):
        raise ScenarioError(f"{name}: {what} returned {type(out).__name__}, not {expected}")
    return out


def _transforms(out: Any) -> bool:
    return isinstance(out, (list, tuple)) and all(isinstance(t, T.Transform) for t in out)


def local_pieces(spec: AlgoSpec, parts: Parts) -> tuple[T.Transform, ...]:
    """The local solver's pieces, in order: clip -> weight decay -> the correction's ``before``
    pieces -> the solver's -> the correction's ``after`` pieces."""
    corr = parts.correction
    p: list[T.Transform] = []
    if spec.clip_norm is not None:
        p.append(T.clip_by_client_norm(spec.clip_norm))
    if spec.weight_decay:
        p.append(T.add_weight_decay(spec.weight_decay))
    seq = "a list of Transforms"
    p.extend(_built(spec, "correction", "before(spec)", corr.before, _transforms, seq))
    p.extend(_built(spec, "solver", "build(spec)", parts.solver.build, _transforms, seq))
    p.extend(_built(spec, "correction", "after(spec)", corr.after, _transforms, seq))
    return tuple(p)


def server_chain(spec: AlgoSpec, parts: Parts) -> T.Transform:
    """The server optimizer on the pseudo-gradient d; its output is added to x."""
    return _built(spec, "server_opt", "build(spec)", parts.server_opt.build, lambda t: isinstance(t, T.Transform),
                  "a Transform")


def masked(mask: torch.Tensor, new: Tensors, old: Tensors) -> Tensors:
    """Per client: ``new`` where mask is True, else ``old`` (mask has shape (clients,))."""
    return {k: torch.where(T.bcast(mask, v), v, old[k]) for k, v in new.items()}


@dataclass(frozen=True)
class Algorithm:
    """The parts and chains of one resolved spec (see the module docstring)."""

    spec: AlgoSpec
    parts: Parts
    pieces: tuple[T.Transform, ...]  # the local chain's pieces, in order
    local: T.Transform
    shadow: T.Transform
    server: T.Transform
    aggregate: Callable[[RoundUpdate], Tensors]
    staleness: Callable[[float], float] | None  # w(s) of an asynchronous spec (None for a synchronous one)

    @classmethod
    def build(cls, spec: AlgoSpec) -> "Algorithm":
        """Look every part of ``spec`` up (once) and build its chains; a builder that raises or
        returns the wrong kind of value is one line naming the part (exit 2)."""
        parts = Parts.of(spec)
        pieces = local_pieces(spec, parts)
        aggregate = _built(spec, "aggregation", "build(spec)", parts.aggregation.build, callable, "a function")
        staleness = None
        if spec.asynchronous is not None:
            staleness = _built(spec, "staleness", "build(spec)", parts.staleness.build, callable, "a function")
        return cls(spec, parts, pieces, T.chain(*pieces), T.shadow(*pieces), server_chain(spec, parts), aggregate,
                   staleness)

    @property
    def adaptive(self) -> bool:
        """The local solver is not linear in the gradients (Adam family): ||a_i||_1 is tau_i."""
        return not self.parts.solver.linear

    @property
    def keeps_vhat(self) -> bool:
        """The local solver keeps an AMSGrad v_hat (returned per client, seeded by the server's)."""
        return self.parts.solver.keeps_vhat

    @property
    def uses_control_variates(self) -> bool:
        """The correction keeps per-client control variates (a client uploads twice the model)."""
        return self.parts.correction.control_variates

    def check(self, params: Tensors) -> None:
        """Run each local piece and the server optimizer once on ``params``'s shapes (one client
        stacked) and check their state keeps its keys, shapes and dtypes
        (:func:`~fedsim.algorithms.transforms.check_transform`): a one-line StateError naming the
        piece otherwise, also when the piece raises. Torch's random state is not touched."""
        stacked = {k: v.unsqueeze(0).clone() for k, v in params.items()}
        zeros = {k: torch.zeros_like(v) for k, v in stacked.items()}
        ctx = T.Context(stacked, zeros, zeros, zeros)
        for i, piece in enumerate(self.pieces):
            _checked(piece, stacked, ctx, f"algorithm: local piece {i + 1} ({piece.name or 'transform'})")
        one = torch.ones(1, dtype=torch.float64)
        upd = RoundUpdate(clients=(0,), deltas=zeros, weights=one, a_norm=one, steps=one, lr=self.spec.lr, num_clients=1)
        _checked(self.server, params, T.Context(params, update=upd),
                 f"algorithm.server_opt: {self.spec.server_opt} ({self.server.name or 'transform'})")

    # -- clients ---------------------------------------------------------------------------------
    def client_init(self, params: Tensors, vhat0: Tensors | None = None) -> Tensors:
        """Local solver state for stacked ``params``; ``vhat0`` (unstacked) seeds AMSGrad's v_hat."""
        return self.local.init(params, vhat0)

    def client_step(self, params: Tensors, grads: Tensors, state: Tensors, lr: float | torch.Tensor, *,
                    x0: Tensors | None = None, corr=None, direction=None) -> tuple[Tensors, Tensors]:
        """One local step of stacked clients: u from the local chain, then x - lr * u. ``lr``: one
        float for every client, or a vector with one lr per client (broadcast over the leading
        client dimension; the same bits as the float where they are equal)."""
        u, st = self.local.update(grads, state, T.Context(params, x0, corr, direction))
        if isinstance(lr, torch.Tensor) and lr.dim() == 1:
            return {k: x - T.bcast(lr, x) * u[k] for k, x in params.items()}, st
        return {k: x - lr * u[k] for k, x in params.items()}, st

    def correction(self, state: ServerState, client: int, like: Tensors) -> Tensors | None:
        """Client ``client``'s additive gradient correction for the round (the registered
        correction's ``client`` rule; SCAFFOLD: c - c_i, unseen c_i = 0), or None."""
        rule = self.parts.correction.client
        return None if rule is None else rule(state, client, like)

    def a_norm(self, steps: Sequence[int] | torch.Tensor, lr_ratios, lr: float | None = None) -> torch.Tensor:
        """||a_i||_1 per client by the shadow run (float64): x0 = 0, every gradient 1, D = 1, the
        round's lr ratios; ||a_i||_1 = -x / lr after tau_i steps (FedNova eq. (6)). tau_i for the
        adaptive solvers, which are not linear in the gradients."""
        steps_t = torch.as_tensor(steps, dtype=torch.float64)
        if self.adaptive:
            return steps_t.clone()
        if self.spec.mu > 0 and lr is None:
            raise ValueError("a_norm: lr is needed when mu > 0 (the prox factor is 1 - lr * mu)")
        # Without prox the rule is linear in lr: run at lr 1 so ||a_i||_1 is exact (no rounding).
        eta = 1.0 if (lr is None or self.spec.mu == 0) else float(lr)
        n = steps_t.shape[0]
        x = {"x": torch.zeros(n, dtype=torch.float64)}
        x0 = {"x": torch.zeros(n, dtype=torch.float64)}
        one = {"x": torch.ones(n, dtype=torch.float64)}
        st = self.shadow.init(x, None)
        for k in range(int(steps_t.max().item()) if n else 0):
            u, ns = self.shadow.update(one, st, T.Context(x, x0, None, one))
            lr_k = eta * lr_ratios[k]
            nx = {"x": x["x"] - lr_k * u["x"]}
            mask = steps_t > k
            x, st = masked(mask, nx, x), masked(mask, ns, st)
        return -x["x"] / eta

    def client_update(
        self,
        params: Tensors,
        state: ServerState,
        grad: Callable[[Tensors, tuple[int, ...]], Tensors],
        steps: Sequence[int],
        lr: float,
        *,
        weights: Sequence[float],
        client_p: Sequence[float] | None = None,
    ) -> RoundUpdate:
        """One round of local work by clients ``0..len(steps)-1`` on a gradient oracle (no clock).

        Args:
            params: the global model x (unstacked).
            state: the server state (corrections, direction, v_hat come from it).
            grad: ``grad(x stacked, clients) -> gradients`` (row j belongs to ``clients[j]``).
            steps: tau_i per client; clients with 0 steps do not report.
            lr: the round's local lr (per-step decay from the spec).
            weights: w_i per client (those of reporting clients are used).
            client_p: p_i of every client (SCAFFOLD's c = sum p_i c_i); default 1/N.
        """
        ids = tuple(i for i, s in enumerate(steps) if s > 0)
        tau = torch.tensor([steps[i] for i in ids])
        n = len(ids)
        x0 = {k: v.unsqueeze(0).expand((n,) + v.shape) for k, v in params.items()}
        xs = {k: v.clone() for k, v in x0.items()}
        st = self.client_init(xs, state.vhat)
        corr = None
        cs = [self.correction(state, i, params) for i in ids]
        if cs and cs[0] is not None:
            corr = {k: torch.stack([c[k] for c in cs]) for k in params}
        lrs = StepLrs(lr, self.spec.lr_decay)
        for k in range(int(tau.max()) if n else 0):
            nx, ns = self.client_step(xs, grad(xs, ids), st, lrs[k], x0=x0, corr=corr, direction=state.direction)
            mask = tau > k
            xs, st = masked(mask, nx, xs), masked(mask, ns, st)
        p = client_p if client_p is not None else [1.0 / len(steps)] * len(steps)
        return RoundUpdate(
            clients=ids, deltas={k: xs[k] - x0[k] for k in params},
            weights=torch.tensor([float(weights[i]) for i in ids], dtype=torch.float64),
            a_norm=self.a_norm(tau.tolist(), lrs.ratios(), lr=lr), steps=tau.double(), lr=lr,
            num_clients=len(steps), client_p={i: float(q) for i, q in enumerate(p)},
            vhat={k: st["vhat." + k] for k in params} if self.keeps_vhat else None,
        )

    # -- server ----------------------------------------------------------------------------------
    def init(self, params: Tensors) -> ServerState:
        """Zero moments, zero control variates, zero global direction (round 1 of FedCM/FedLADA)."""
        corr = self.parts.correction
        fields = corr.init(params, self.spec) if corr.init is not None else {}
        return ServerState(opt=self.server.init(params, None), **fields)

    def server_step(self, params: Tensors, d: Tensors, opt: Tensors, lr_ratio: float = 1.0,
                    update: RoundUpdate | None = None) -> tuple[Tensors, Tensors]:
        """The server optimizer on pseudo-gradient ``d``: x + u; returns (params, optimizer state).
        ``update``: the round's updates, for server pieces that read them (``Context.update``)."""
        u, new = self.server.update(d, opt, T.Context(params, lr_ratio=lr_ratio, update=update))
        return {k: x + u[k] for k, x in params.items()}, new

    def server_update(self, params: Tensors, state: ServerState, upd: RoundUpdate) -> tuple[Tensors, ServerState]:
        """One synchronous server update. Pure: returns new params and a new state."""
        if len(upd.clients) == 0:
            return params, replace(state, version=state.version + 1)
        spec = self.spec
        d = self.aggregate(upd)
        ratio = upd.lr / state.lr if state.lr is not None and upd.lr != state.lr else 1.0
        new_params, opt = self.server_step(params, d, state.opt, ratio, upd)
        new = replace(state, opt=opt, version=state.version + 1, lr=upd.lr)
        rule = self.parts.correction.server
        if rule is not None:  # control variates, global direction, ...
            # a client computes its control variate from its own change and sends the c change
            # uncompressed (docs/compression.md); other rules see what the server received
            cv = self.uses_control_variates
            new = rule(new, upd.as_computed_by_clients() if cv else upd, d, spec)
        if spec.share_vhat and upd.vhat is not None:
            new = replace(new, vhat=shared_vhat(upd))
        return new_params, new


def _checked(piece: T.Transform, params: Tensors, ctx: T.Context, what: str) -> None:
    try:
        T.check_transform(piece, params, ctx, what=what)
    except ScenarioError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a piece failing on its first step is one line naming it
        raise T.StateError(f"{what}: raised {failure(err)} on one step") from None


def algorithm(spec: AlgoSpec) -> Algorithm:
    """``Algorithm.build(spec)``: a new algorithm, every part looked up now (a part registered again
    with ``replace=True`` is the one used)."""
    return Algorithm.build(spec)
