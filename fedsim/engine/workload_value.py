"""The Workload value (a scenario's data and model as tensors on the training device) and the
model functions over it; :mod:`fedsim.engine.workload` builds it (see there)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..models.make import make_model  # re-exported: the engine builds its workload with it
from ..rng import stream
from .palette import PaletteRows

Tensors = dict[str, torch.Tensor]

__all__ = ["Workload", "Tensors", "EVAL_CLIENTS", "eval_info", "eval_sample", "make_model", "model_functions"]

#: ``eval.clients`` default: every client when the population has at most this many, else a fixed
#: uniform sample of this many clients.
EVAL_CLIENTS = 1000


@dataclass
class Workload:
    name: str
    # inputs: a tensor, or PaletteRows (k / 255 values held as uint8 codes, indexing to the same
    # values) for rows held throughout: a FederatedData run's evaluation sample and test set
    x_train: torch.Tensor | PaletteRows
    y_train: torch.Tensor
    x_test: torch.Tensor | PaletteRows | None
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
    # generated data (instead of ``fetch``), one client: its training rows (x, y), read only;
    # for_clients copies each straight into the result (no concatenation of the listed clients first)
    fetch_one: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None
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
    # issue 27 (data helper): a FederatedData's epoch rule (fedsim.data.epochs) and reader notes (info.yaml)
    epoch_rule: str = "floor"
    data_notes: tuple[str, ...] = ()

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

    @property
    def on_demand(self) -> bool:
        """Whether clients' training rows are fetched when asked for (``fetch`` or ``fetch_one``),
        ``x_train`` holding only the evaluation sample's."""
        return self.fetch is not None or self.fetch_one is not None

    def held_clients(self) -> list[tuple[int, np.ndarray]]:
        """``(client, its rows of x_train)`` for every client whose training data this workload
        holds (all clients, or the held subset when clients are generated on demand)."""
        ci = self.client_indices
        return list(ci.items()) if isinstance(ci, Mapping) else list(enumerate(ci))

    @cached_property
    def eval_rows(self) -> torch.Tensor | None:
        """Rows of ``x_train`` in the training objective (None: all rows, in order)."""
        if self.eval_clients is None or self.on_demand:  # generated: x_train holds the sample only
            return None
        rows = np.sort(np.concatenate([self.client_indices[int(c)] for c in self.eval_clients]))
        return torch.as_tensor(rows, device=self.x_train.device)

    @cached_property
    def sample_weights(self) -> torch.Tensor:
        """Per training sample p_i / n_i (over the evaluation sample, divided by its total p when it
        is not every client): the objective is sum_s w_s loss_s (built once)."""
        w = np.zeros(self.x_train.shape[0], dtype=np.float64)
        held = self.held_clients()
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
        if not self.on_demand:
            return self
        held = dict(self.held_clients())
        if self.fetch_one is not None:
            return self._copied_in(clients, held)
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

    def _copied_in(self, clients: Sequence[int], held: dict) -> "Workload":
        """:meth:`for_clients` by ``fetch_one``: the listed clients' rows (held ones from
        ``x_train``) concatenated client after client straight into the one result tensor."""
        xs, ys, idx, start = [], [], {}, 0
        for c in clients:
            if c in held:
                rows = torch.as_tensor(held[c], device=self.x_train.device)
                xc, yc = self.x_train[rows].cpu().numpy(), self.y_train[rows].cpu().numpy()
            else:
                xc, yc = self.fetch_one(c)
            xs.append(xc)
            ys.append(yc)
            idx[c] = np.arange(start, start + len(yc), dtype=np.int64)
            start += len(yc)
        x = torch.empty((start, *self.x_train.shape[1:]), dtype=self.x_train.dtype)
        y = torch.empty(start, dtype=self.y_train.dtype)
        if xs:
            np.concatenate(xs, out=x.numpy(), casting="same_kind")
            np.concatenate(ys, out=y.numpy(), casting="same_kind")
        dev = self.x_train.device
        return replace(self, x_train=x.to(dev), y_train=y.to(dev), client_indices=idx, sizes=self.client_sizes)


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
