"""The user's model and loss checked on one batch before the run starts, and the engine path chosen.

:func:`probe` runs the model forward and the loss on the first minibatch of the first held client
(torch's global random state is restored afterwards, so a run's numbers do not depend on it) and
turns every way this can go wrong into a one-line :class:`~fedsim.errors.ScenarioError` naming the
piece (exit 2, before the run folder is touched):

* the forward pass fails, or returns something other than a tensor (``model: ...``);
* class targets (``num_classes`` set) and outputs that do not fit: outputs must be
  ``(*target shape, num_classes)`` (``model: ...``);
* the loss fails on the model's outputs, returns a non-scalar, or a NaN / infinite value
  (``loss: ...``).

Engine path (recorded as ``engine_path`` in info.yaml):

* ``per_client`` when the model has buffers (BatchNorm running statistics: each client trains its
  own copy, docs/algorithms.md), or when the batched gradient (``vmap`` over two stacked clients)
  raises on the probe batch (``nn.LSTM``: torch has no batching rule for ``aten::lstm``);
* ``batched`` otherwise.

:func:`check_ranks` refuses a model with buffers under torchrun (more than one rank), which the
runner calls with the world size before the run folder is touched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..errors import ScenarioError
from .workload_value import Workload

__all__ = ["probe", "check_ranks", "PATHS"]

#: The engine paths.
PATHS = ("batched", "per_client")


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _first_batch(work: Workload, batch_size: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    held = work.held_clients()
    client, rows = held[0]
    pick = torch.as_tensor(np.asarray(rows[: max(1, min(batch_size, len(rows)))]), device=work.x_train.device)
    return client, work.x_train[pick], work.y_train[pick]


def probe(work: Workload, batch_size: int, *, path: str | None = None) -> Workload:
    """``work`` with its ``engine_path`` set, after checking its model and loss on one batch.

    Args:
        work: A workload with a model (``work.module``).
        batch_size: The run's minibatch size (the probe batch is at most this many examples).
        path: Force ``batched`` or ``per_client`` (tests); a model with buffers is always
            ``per_client``.
    """
    if work.module is None:
        return work
    if path is not None and path not in PATHS:
        raise ValueError(f"probe: path must be one of {PATHS}, got {path!r}")
    from .gradients import cohort_grad

    client, xb, yb = _first_batch(work, batch_size)
    devices = [work.x_train.device] if work.x_train.device.type == "cuda" else []
    was_training = work.module.training
    work.module.train()
    try:
        with torch.random.fork_rng(devices=devices):
            _check_forward(work, client, xb, yb)
            chosen = path or _choose_path(work, xb, yb, cohort_grad)
            if work.buffers:
                chosen = "per_client"
            out = replace(work, engine_path=chosen)
            if chosen == "per_client":  # the path the run takes must work
                _one_client_step(out, xb, yb, cohort_grad)
    finally:
        work.module.train(was_training)
    return out


def check_ranks(work: Workload, world_size: int) -> None:
    """Refuse what the engine cannot run on ``world_size`` ranks (torchrun), before the run folder
    is touched: a model with buffers (``model: ...``, one line)."""
    if world_size > 1 and work.buffers:
        raise ScenarioError("model: a model with buffers (BatchNorm statistics) is not supported under torchrun yet")


def _state(work: Workload) -> dict:
    return {**work.init_params, **{k: v.clone() for k, v in work.buffers.items()}}


def _check_forward(work: Workload, client: int, xb: torch.Tensor, yb: torch.Tensor) -> None:
    try:
        out = work.predict(_state(work), xb)
    except Exception as err:  # noqa: BLE001 -- any failure of the user's module is reported in one line
        raise ScenarioError(f"model: the forward pass on a batch of inputs {_shape(xb)} (client {client}) failed: "
                            f"{_one_line(err)}") from None
    if not isinstance(out, torch.Tensor):
        raise ScenarioError(f"model: the forward pass returned {type(out).__name__}, not a tensor")
    if work.classes:
        if tuple(out.shape[:-1]) != tuple(yb.shape) or out.shape[-1] != work.num_classes:
            raise ScenarioError(
                f"model: outputs of shape {_shape(out)} do not fit class targets of shape {_shape(yb)} with "
                f"{work.num_classes} classes (need {tuple(yb.shape) + (work.num_classes,)})")
    if work.loss_fn is None:
        if not work.classes:
            raise ScenarioError("loss: the default cross-entropy needs class targets (num_classes); give a loss "
                                "for these targets")
        return
    try:
        loss = work.loss_fn(out, yb)
    except Exception as err:  # noqa: BLE001
        raise ScenarioError(f"loss: failed on model outputs {_shape(out)} and targets {_shape(yb)}: "
                            f"{_one_line(err)}") from None
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise ScenarioError(f"loss: returned {_shape(loss)}, needs a scalar tensor (the minibatch mean)")
    if not bool(torch.isfinite(loss)):
        raise ScenarioError(f"loss: {float(loss)} on the first batch (client {client})")


def _stacked(work: Workload, c: int) -> dict:
    return {k: v.unsqueeze(0).expand((c,) + v.shape).clone() for k, v in work.init_params.items()}


def _choose_path(work: Workload, xb: torch.Tensor, yb: torch.Tensor, cohort_grad) -> str:
    if work.buffers:
        return "per_client"
    try:
        grads, loss, _ = cohort_grad(replace(work, engine_path="batched"))(_stacked(work, 2), torch.stack([xb, xb]),
                                                                          torch.stack([yb, yb]))
        ok = all(tuple(g.shape) == (2,) + tuple(work.init_params[k].shape) for k, g in grads.items())
        return "batched" if ok and loss.shape == (2,) else "per_client"
    except Exception:  # noqa: BLE001 -- vmap refuses the module or the loss: one client at a time
        return "per_client"


def _one_client_step(work: Workload, xb: torch.Tensor, yb: torch.Tensor, cohort_grad) -> None:
    try:
        bufs = {k: v.clone() for k, v in work.buffers.items()}
        cohort_grad(work)(_stacked(work, 1), xb.unsqueeze(0), yb.unsqueeze(0), None, bufs or None)
    except Exception as err:  # noqa: BLE001
        raise ScenarioError(f"model: the gradient on one batch failed: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")
