"""Workload: a scenario's data and model as tensors on the training device.

The training data the run holds live on the device once (``x_train``, ``y_train``); clients are
index arrays into them, so a chunk's minibatches are one gather. ``loss`` is the per-client
objective on one minibatch as a pure function of the parameters (for ``torch.func``).

Populations at the cost of the participants: a real dataset is held whole (its partition is index
arrays). A generated dataset (Synthetic) holds only the evaluation sample's clients
(``eval.clients``, :func:`eval_sample`); :meth:`Workload.for_clients` returns a workload holding a
round's cohort, generating the clients it lacks (``fetch``), so a round costs its participants,
not the population.

Quadratic (FedNova Lemma 1): F_i(x) = 1/2 ||x - e_i||^2 with exact gradients; each client holds
its one "sample" e_i, so every local step is a full-gradient step. It is a workload like the others:
its closed forms are values of the workload (``batched_grad``, ``extra_metrics``), not a flag the
engine tests.

A user's own pieces (``build_workload(..., model=, data=, loss=)``): any ``nn.Module`` (factory or
instance), any loss ``loss(outputs, targets) -> scalar mean``, and a
:class:`~fedsim.data.FederatedData` whose clients are fetched on demand
(:mod:`fedsim.engine.from_data`). The engine path (``batched`` or ``per_client``) is decided once
on one batch before the run (:mod:`fedsim.engine.probe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..rng import seed_int, stream

Tensors = dict[str, torch.Tensor]

__all__ = ["Workload", "build_workload", "resolve_device", "dataset_for", "client_sizes", "eval_sample", "eval_info",
           "EVAL_CLIENTS"]

#: ``eval.clients`` default: every client when the population has at most this many, else a fixed
#: uniform sample of this many clients.
EVAL_CLIENTS = 1000


@dataclass
class Workload:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor | None
    y_test: torch.Tensor | None
    # the held clients' rows of x_train: a list over all clients, or {client: rows} for a subset
    client_indices: list[np.ndarray] | Mapping[int, np.ndarray]
    weights: np.ndarray  # p_i, sums to 1
    init_params: Tensors
    loss: Callable[[Tensors, torch.Tensor, torch.Tensor], torch.Tensor]
    predict: Callable[[Tensors, torch.Tensor], torch.Tensor] | None
    module: torch.nn.Module | None = None
    optimum: torch.Tensor | None = None  # quadratic: sum_i p_i e_i
    num_classes: int = 0  # 0: targets are not classes (no accuracy)
    class_counts: np.ndarray | None = None  # (clients, classes) for partition.csv; zero rows: not held
    augment: bool = False
    # Optional closed-form batched gradient: (stacked params, xb (C,B,..), yb) -> (grads, loss (C,)).
    batched_grad: Callable | None = None
    # Augmentation padding per channel: a black raw pixel after normalization (-mean / std), as
    # torchvision pads before Normalize. None: zeros.
    pad_fill: torch.Tensor | None = None
    # n_i of every client when not every client is held (None: from client_indices)
    sizes: np.ndarray | None = None
    # generated data: the listed clients' training rows (float32 x, int64 y), client after client
    fetch: Callable[[Sequence[int]], tuple[np.ndarray, np.ndarray]] | None = None
    # clients of the evaluation sample (sorted), None: all clients
    eval_clients: np.ndarray | None = None
    # the user's loss ``(outputs, targets) -> scalar mean``; None: cross-entropy over the last dim
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # the model's buffers (BatchNorm running statistics) at round 0; empty: a stateless model
    buffers: Tensors = field(default_factory=dict)
    # "batched": clients stacked (vmap / stacked kernels); "per_client": one client at a time
    engine_path: str = "batched"
    # closed-form metrics added to every evaluation (quadratic: train_loss, dist_to_opt)
    extra_metrics: Callable[[Tensors], dict] | None = None

    @property
    def is_quadratic(self) -> bool:
        """Whether the workload has a known optimum (the quadratic problem): its tables add
        ``dist_to_opt`` and its ``model.pt`` is the point x."""
        return self.optimum is not None

    @property
    def classes(self) -> bool:
        """Whether targets are class labels (accuracy is reported)."""
        return self.num_classes > 0

    @property
    def num_clients(self) -> int:
        return len(self.client_indices) if self.sizes is None else len(self.sizes)

    @property
    def client_sizes(self) -> np.ndarray:
        if self.sizes is not None:
            return self.sizes
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, e.g. ``(60,)`` or ``(3, 32, 32)``."""
        return tuple(int(d) for d in self.x_train.shape[1:])

    def _held(self) -> list[tuple[int, np.ndarray]]:
        ci = self.client_indices
        return list(ci.items()) if isinstance(ci, Mapping) else list(enumerate(ci))

    @cached_property
    def eval_rows(self) -> torch.Tensor | None:
        """Rows of ``x_train`` in the training objective (None: all rows, in order)."""
        if self.eval_clients is None or self.fetch is not None:  # generated: x_train holds the sample only
            return None
        rows = np.sort(np.concatenate([self.client_indices[int(c)] for c in self.eval_clients]))
        return torch.as_tensor(rows, device=self.x_train.device)

    @cached_property
    def sample_weights(self) -> torch.Tensor:
        """Per training sample p_i / n_i (over the evaluation sample, divided by its total p when it
        is not every client): the objective is sum_s w_s loss_s (built once)."""
        w = np.zeros(self.x_train.shape[0], dtype=np.float64)
        held = self._held()
        if self.eval_clients is not None:
            keep = set(self.eval_clients.tolist())
            held = [(c, ix) for c, ix in held if c in keep]
        for c, ix in held:
            w[ix] = self.weights[c] / len(ix)
        if self.eval_clients is not None:
            w /= sum(self.weights[c] for c, _ in held)
        return torch.as_tensor(w, device=self.x_train.device)

    def for_clients(self, clients: Sequence[int]) -> "Workload":
        """A workload holding the training data of ``clients`` (``self`` when nothing is generated
        on demand). Generated clients not held are generated from their own streams, so the result
        does not depend on which clients are held; the rows are the same values either way."""
        if self.fetch is None:
            return self
        held = dict(self._held())
        have = [c for c in clients if c in held]
        missing = [c for c in clients if c not in held]
        xs, ys, idx, start = [], [], {}, 0
        if have:
            rows = torch.as_tensor(np.concatenate([held[c] for c in have]), device=self.x_train.device)
            xs.append(self.x_train[rows])
            ys.append(self.y_train[rows])
            for c in have:
                idx[c] = np.arange(start, start + len(held[c]), dtype=np.int64)
                start += len(held[c])
        if missing:
            x, y = self.fetch(missing)
            xs.append(torch.as_tensor(x).to(device=self.x_train.device, dtype=self.x_train.dtype))
            ys.append(torch.as_tensor(y).to(device=self.x_train.device, dtype=self.y_train.dtype))
            for c in missing:
                n = int(self.client_sizes[c])
                idx[c] = np.arange(start, start + n, dtype=np.int64)
                start += n
        x = torch.cat(xs) if xs else self.x_train[:0]
        y = torch.cat(ys) if ys else self.y_train[:0]
        return replace(self, x_train=x, y_train=y, client_indices=idx, sizes=self.client_sizes)


def eval_info(work: Workload) -> dict[str, int]:
    """``info.yaml`` entries: ``eval_clients`` (clients in the training objective),
    ``train_samples`` (the population's training samples, held or not) and ``engine_path``
    (``batched``: clients stacked; ``per_client``: one client at a time, docs/algorithms.md)."""
    n = work.num_clients if work.eval_clients is None else len(work.eval_clients)
    return {"eval_clients": int(n), "train_samples": int(work.client_sizes.sum()), "engine_path": work.engine_path}


def eval_sample(num_clients: int, clients: int | None, seed: int) -> np.ndarray | None:
    """The clients of the evaluation sample: ``None`` (all) when ``clients`` (default
    ``EVAL_CLIENTS``) is at least ``num_clients``, else that many clients drawn uniformly without
    replacement from the stream ``(seed, "eval-clients")``, sorted."""
    k = EVAL_CLIENTS if clients is None else int(clients)
    if k >= num_clients:
        return None
    return np.sort(stream(seed, "eval-clients").choice(num_clients, size=k, replace=False)).astype(np.int64)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _quadratic(sc, device, dtype) -> Workload:
    d = sc.data
    if d.centers is not None:
        centers = np.asarray(d.centers, dtype=np.float64)
    else:
        m = d.num_clients
        centers = d.center_scale * stream(sc.data_seed, "centers").standard_normal((m, d.dim))
    m = centers.shape[0]
    p = np.full(m, 1.0 / m) if d.weights is None else np.asarray(d.weights, dtype=np.float64) / sum(d.weights)
    x = torch.as_tensor(centers, dtype=dtype, device=device)

    def loss(params: Tensors, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((params["x"] - xb) ** 2).sum(-1).mean()

    def batched_grad(params: Tensors, xb: torch.Tensor, yb: torch.Tensor):
        # exact gradient of 1/2 mean_b ||x - e_b||^2 for every client at once
        diff = params["x"].unsqueeze(1) - xb
        return {"x": diff.mean(1)}, 0.5 * (diff**2).sum(-1).mean(1)

    optimum = torch.as_tensor(p @ centers, dtype=torch.float64)
    w = torch.as_tensor(p, dtype=dtype, device=device)

    @torch.no_grad()
    def extra_metrics(params: Tensors) -> dict:
        # the exact objective sum_i p_i F_i(x) (always reported) and ||x - x*||
        per = 0.5 * ((params["x"].unsqueeze(0) - x) ** 2).sum(1)
        return {
            "train_loss": float((w * per).sum()),
            "dist_to_opt": float(torch.linalg.vector_norm(params["x"].double().cpu() - optimum)),
        }

    return Workload(
        name="quadratic",
        batched_grad=batched_grad,
        x_train=x,
        y_train=torch.zeros(m, dtype=torch.long, device=device),
        x_test=None,
        y_test=None,
        client_indices=[np.array([i]) for i in range(m)],
        weights=p,
        init_params={"x": torch.zeros(centers.shape[1], dtype=dtype, device=device)},
        loss=loss,
        predict=None,
        optimum=optimum,
        extra_metrics=extra_metrics,
    )


def _data_error_path(msg: str) -> str:
    if msg.startswith(("dirichlet", "shards", "powerlaw", "partition")):
        return "data.partition"
    if "clients" in msg:
        return "data.clients"
    return "data"


def dataset_for(sc):
    """The scenario's data, built by the factory registered as ``data.name``
    (:data:`fedsim.registries.DATASETS`, ``factory(config, seed)``): a partitioned
    :class:`~fedsim.data.Dataset`, a :class:`~fedsim.data.SyntheticPopulation` that generates
    clients when asked (its ``client_sizes`` draw no features), or a
    :class:`~fedsim.data.FederatedData`. Infeasible data settings raise ScenarioError naming the
    key (exit 2)."""
    from ..errors import ScenarioError
    from ..registries import DATASETS

    factory = DATASETS.get(sc.data.name)
    try:
        return factory(sc.data, sc.data_seed)
    except ScenarioError:
        raise
    except ValueError as err:
        raise ScenarioError(f"{_data_error_path(str(err))}: {err}") from None


def client_sizes(sc) -> np.ndarray:
    """n_i of every client of scenario ``sc`` (quadratic: 1 each), without generating any features."""
    if sc.data.name == "quadratic":
        return np.ones(sc.data.num_clients, dtype=np.int64)
    return np.asarray(dataset_for(sc).client_sizes, dtype=np.int64)


def make_model(sc, input_shape: tuple[int, ...], num_classes: int | None, model=None) -> torch.nn.Module:
    """The run's freshly initialized model: ``model`` (a factory ``(input_shape, num_classes,
    **options)``, or a module, deep-copied) when given from Python, else the factory registered as
    ``model.name``; either gets ``model.options`` (an option the factory does not take: one line)."""
    import copy

    from ..errors import ScenarioError
    from ..models import build_model, call_factory

    if model is None:
        return build_model(sc.model_name, input_shape, num_classes, **{"hidden": sc.model.hidden, **sc.model.options})
    if isinstance(model, torch.nn.Module):
        return copy.deepcopy(model)
    if not callable(model):
        raise ScenarioError(f"model: expected an nn.Module or a factory (input_shape, num_classes) -> nn.Module, "
                            f"got {type(model).__name__}")
    module = call_factory(model, (tuple(input_shape), num_classes), dict(sc.model.options), "the model factory",
                          "model.options")
    if not isinstance(module, torch.nn.Module):
        raise ScenarioError(f"model: the model factory returned {type(module).__name__}, not a torch.nn.Module")
    return module


def model_functions(module: torch.nn.Module, loss_fn=None):
    """``(predict, loss)`` over ``module`` for ``torch.func``: ``predict(state, xb) -> outputs``
    (``state``: parameters, and buffers when the model has any) and the per-client objective
    ``loss(state, xb, yb) -> scalar`` (``loss_fn`` or cross-entropy)."""

    def predict(params: Tensors, xb: torch.Tensor) -> torch.Tensor:
        return functional_call(module, params, (xb,))

    def loss(params: Tensors, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        out = predict(params, xb)
        if loss_fn is not None:
            return loss_fn(out, yb)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))

    return predict, loss


def build_workload(sc, device: torch.device, dtype: torch.dtype, *, model=None, data=None, loss=None,
                   source=None, check: bool = True) -> Workload:
    """Build data, partition and model for scenario ``sc`` on ``device``.

    Args:
        model: The user's model: a factory ``(input_shape, num_classes) -> nn.Module`` or a module
            (deep-copied); None: ``sc.model`` by name.
        data: The user's data, a :class:`~fedsim.data.FederatedData` (clients fetched on demand,
            :mod:`fedsim.engine.from_data`), or an already built Dataset / SyntheticPopulation;
            None: ``sc.data`` by name. ``source`` is the same argument under another name.
        loss: ``loss(outputs, targets) -> scalar mean``; None: cross-entropy.
        check: Check the model and loss on one batch and decide the engine path
            (:func:`fedsim.engine.probe.probe`; every model, fedsim's own included, so a registered
            model that ``vmap`` refuses runs per client too).
    """
    data = source if data is None else data
    from ..data.federated import FederatedData

    if data is None and sc.data.name == "quadratic":
        return _quadratic(sc, device, dtype)
    if data is None:
        data = dataset_for(sc)  # a registered dataset may be a FederatedData too
    if isinstance(data, FederatedData):
        from .from_data import federated_workload

        work = federated_workload(sc, data, device, dtype, model=model, loss=loss)
    else:
        work = _labelled_workload(sc, device, dtype, data, model, loss)
    if not check:
        return work
    from .probe import probe

    work = probe(work, sc.algorithm.batch_size)
    if work.buffers and getattr(sc.round, "policy", None) == "async":
        from ..errors import ScenarioError

        raise ScenarioError("model: a model with buffers (BatchNorm statistics) is not supported with round.policy "
                            f"async yet (buffers: {', '.join(sorted(work.buffers))})")
    return work


def _labelled_workload(sc, device, dtype, source, model, loss_fn) -> Workload:
    from ..data import class_counts

    from ..data import SyntheticPopulation

    d = sc.data
    all_sizes = np.asarray(source.client_sizes, dtype=np.int64)
    m = len(all_sizes)
    sample = eval_sample(m, sc.eval.clients, sc.data_seed)
    subset = isinstance(source, SyntheticPopulation) and sample is not None
    # generated data: only the evaluation sample is held; a real dataset is held whole
    ds = source.dataset(sample.tolist() if subset else None) if isinstance(source, SyntheticPopulation) else source
    augment = ds.augment if d.augment is None else d.augment
    if augment and ds.x_train.ndim != 4:
        from ..errors import ScenarioError

        raise ScenarioError(f"data.augment: random crop and flip need images; {ds.name} has flat features")
    # Move first, then normalize once on the device (on CUDA this keeps a single host copy).
    xtr = torch.as_tensor(ds.x_train).to(device=device, dtype=dtype)
    xte = torch.as_tensor(ds.x_test).to(device=device, dtype=dtype)
    if ds.mean is not None:
        mean = torch.as_tensor(ds.mean, dtype=dtype, device=device).view(1, -1, 1, 1)
        std = torch.as_tensor(ds.std, dtype=dtype, device=device).view(1, -1, 1, 1)
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    pad_fill = (-mean / std).view(-1) if ds.mean is not None and augment else None
    torch.manual_seed(seed_int(sc.seed, "init"))
    module = make_model(sc, tuple(ds.input_shape), ds.num_classes, model)
    module = module.to(device=device, dtype=dtype)
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    buffers = {k: v.detach().clone() for k, v in module.named_buffers()}
    predict, loss = model_functions(module, loss_fn)

    held = [np.asarray(ix, dtype=np.int64) for ix in ds.client_indices]
    counts = class_counts(ds.y_train, ds.client_indices, ds.num_classes)
    if subset:
        full = np.zeros((m, ds.num_classes), dtype=counts.dtype)
        full[sample] = counts
        counts = full
    sizes = all_sizes.astype(np.float64)
    return Workload(
        name=ds.name,
        x_train=xtr,
        y_train=torch.as_tensor(ds.y_train, dtype=torch.long, device=device),
        x_test=xte,
        y_test=torch.as_tensor(ds.y_test, dtype=torch.long, device=device),
        client_indices=dict(zip(sample.tolist(), held)) if subset else held,
        weights=sizes / sizes.sum(),
        init_params=params,
        loss=loss,
        predict=predict,
        module=module,
        num_classes=ds.num_classes,
        class_counts=counts,
        augment=bool(augment),
        pad_fill=pad_fill,
        sizes=all_sizes if subset else None,
        fetch=(lambda clients: source.gather(clients)[:2]) if subset else None,
        eval_clients=sample,
        loss_fn=loss_fn,
        buffers=buffers,
    )
