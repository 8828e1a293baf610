"""Workload: a scenario's data and model as tensors on the training device.

The training set lives on the device once (``x_train``, ``y_train``); clients are index lists
into it, so a chunk's minibatches are one gather. ``loss`` is the per-client objective on one
minibatch as a pure function of the parameters (for ``torch.func``).

Quadratic (FedNova Lemma 1): F_i(x) = 1/2 ||x - e_i||^2 with exact gradients; each client holds
its one "sample" e_i, so every local step is a full-gradient step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..rng import seed_int, stream

Tensors = dict[str, torch.Tensor]

__all__ = ["Workload", "build_workload", "resolve_device"]


@dataclass
class Workload:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor | None
    y_test: torch.Tensor | None
    client_indices: list[np.ndarray]
    weights: np.ndarray  # p_i, sums to 1
    init_params: Tensors
    loss: Callable[[Tensors, torch.Tensor, torch.Tensor], torch.Tensor]
    predict: Callable[[Tensors, torch.Tensor], torch.Tensor] | None
    module: torch.nn.Module | None = None
    optimum: torch.Tensor | None = None  # quadratic: sum_i p_i e_i
    num_classes: int = 0
    class_counts: np.ndarray | None = None  # (clients, classes) for partition.csv
    augment: bool = False
    is_quadratic: bool = False
    # Optional closed-form batched gradient: (stacked params, xb (C,B,..), yb) -> (grads, loss (C,)).
    batched_grad: Callable | None = None
    # Augmentation padding per channel: a black raw pixel after normalization (-mean / std), as
    # torchvision pads before Normalize. None: zeros.
    pad_fill: torch.Tensor | None = None

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def client_sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

    @cached_property
    def sample_weights(self) -> torch.Tensor:
        """Per training sample p_i / n_i: the global objective is sum_s w_s loss_s (built once)."""
        w = np.zeros(self.x_train.shape[0], dtype=np.float64)
        for p, ix in zip(self.weights, self.client_indices):
            w[ix] = p / len(ix)
        return torch.as_tensor(w, device=self.x_train.device)


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
        optimum=torch.as_tensor(p @ centers, dtype=torch.float64),
        is_quadratic=True,
    )


def _data_error_path(msg: str) -> str:
    if msg.startswith(("dirichlet", "shards", "powerlaw", "partition")):
        return "data.partition"
    if "clients" in msg:
        return "data.clients"
    return "data"


def dataset_for(sc):
    """The scenario's partitioned :class:`~fedsim.data.Dataset` (not quadratic); infeasible data
    settings raise ScenarioError naming the key (exit 2)."""
    from ..data import build_dataset
    from ..data.partition import PartitionSpec
    from ..scenario import ScenarioError

    d = sc.data
    try:
        return _build(build_dataset, sc, PartitionSpec(**d.partition.model_dump()))
    except ValueError as err:
        raise ScenarioError(f"{_data_error_path(str(err))}: {err}") from None


def _build(build_dataset, sc, part):
    d = sc.data
    return build_dataset(
        d.name,
        clients=d.num_clients,
        partition=part,
        seed=sc.data_seed,
        root=d.root,
        download=d.download,
        standin=d.standin,
        alpha=d.alpha,
        beta=d.beta,
        n_train=d.n_train,
        n_test=d.n_test,
        test_fraction=d.test_fraction,
        **({"iid": d.iid} if d.name == "synthetic" else {}),
    )


def build_workload(sc, device: torch.device, dtype: torch.dtype) -> Workload:
    """Build data, partition and model for scenario ``sc`` on ``device``."""
    if sc.data.name == "quadratic":
        return _quadratic(sc, device, dtype)
    from ..data import class_counts
    from ..models import build_model

    d = sc.data
    ds = dataset_for(sc)
    augment = ds.augment if d.augment is None else d.augment
    if augment and ds.x_train.ndim != 4:
        from ..scenario import ScenarioError

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
    module = build_model(sc.model_name, tuple(ds.input_shape), ds.num_classes, hidden=sc.model.hidden)
    module = module.to(device=device, dtype=dtype)
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    buffers = {k: v for k, v in module.named_buffers()}
    if buffers:
        raise ValueError(f"model {sc.model_name} has buffers {sorted(buffers)}; fedsim needs stateless models")

    def predict(params: Tensors, xb: torch.Tensor) -> torch.Tensor:
        return functional_call(module, params, (xb,))

    def loss(params: Tensors, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(predict(params, xb), yb)

    sizes = ds.client_sizes.astype(np.float64)
    return Workload(
        name=ds.name,
        x_train=xtr,
        y_train=torch.as_tensor(ds.y_train, dtype=torch.long, device=device),
        x_test=xte,
        y_test=torch.as_tensor(ds.y_test, dtype=torch.long, device=device),
        client_indices=[np.asarray(ix, dtype=np.int64) for ix in ds.client_indices],
        weights=sizes / sizes.sum(),
        init_params=params,
        loss=loss,
        predict=predict,
        module=module,
        num_classes=ds.num_classes,
        class_counts=class_counts(ds.y_train, ds.client_indices, ds.num_classes),
        augment=bool(augment),
        pad_fill=pad_fill,
    )
