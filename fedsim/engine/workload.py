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

import numpy as np
import torch

from ..data.quadratic import QuadraticProblem
from ..rng import seed_int
from .workload_value import EVAL_CLIENTS, Tensors, Workload, eval_info, eval_sample, make_model, model_functions

__all__ = ["Workload", "build_workload", "resolve_device", "dataset_for", "client_sizes", "eval_sample", "eval_info",
           "EVAL_CLIENTS", "Tensors", "make_model", "model_functions"]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _quadratic(problem: QuadraticProblem, device, dtype) -> Workload:
    """FedNova's quadratic problem as a workload: client i holds its center e_i, F_i(x) =
    1/2 ||x - e_i||^2, weights p_i (the problem's)."""
    centers, p = problem.centers, problem.weights
    m = centers.shape[0]
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
    key (exit 2); so does a factory fedsim did not register that raises, or one that returns
    anything else (one line naming the dataset and its registrant)."""
    from ..data import Dataset, FederatedData, SyntheticPopulation
    from ..errors import ScenarioError
    from ..factory_options import failure
    from ..named_pieces import BUILTIN
    from ..registries import DATASETS

    name = sc.data.name
    factory = DATASETS.get(name)
    who = DATASETS.registrant(name)
    try:
        data = factory(sc.data, sc.data_seed)
    except ScenarioError:
        raise
    except ValueError as err:
        raise ScenarioError(f"{_data_error_path(str(err))}: {err}") from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a plug-in's factory failing is one line naming it
        if who == BUILTIN:
            raise
        raise ScenarioError(f"data.name: dataset {name!r} (registered by {who}) raised {failure(err)}") from None
    if not isinstance(data, (Dataset, SyntheticPopulation, FederatedData, QuadraticProblem)):
        raise ScenarioError(f"data.name: dataset {name!r} (registered by {who}) returned {type(data).__name__}, "
                            "not a fedsim.data.FederatedData (or Dataset)")
    return data


def client_sizes(sc) -> np.ndarray:
    """n_i of every client of scenario ``sc`` (quadratic: 1 each), without generating any features."""
    return np.asarray(dataset_for(sc).client_sizes, dtype=np.int64)


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

    if data is None:
        data = dataset_for(sc)  # a registered dataset may be a FederatedData or a QuadraticProblem too
    if isinstance(data, QuadraticProblem):
        return _quadratic(data, device, dtype)
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
        fetch_one=(lambda client: source.parts(client)[:2]) if subset else None,
        eval_clients=sample,
        loss_fn=loss_fn,
        buffers=buffers,
    )
