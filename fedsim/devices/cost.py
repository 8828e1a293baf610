"""What one local step and one transfer cost, computed from the model itself.

* ``step_flops``: floating-point operations of one local step (forward and backward of one
  minibatch of ``batch_size`` examples), counted once per model by
  ``torch.utils.flop_counter.FlopCounterMode`` on a copy of the module on the ``meta`` device (no
  arithmetic is done, no random numbers are drawn). Its convention: a matrix product of an
  ``(m, k)`` by a ``(k, n)`` matrix counts ``2 m k n`` FLOPs (a multiply and an add), convolutions
  likewise; element-wise operations (activations, bias adds, the loss) count nothing.
* ``model_bytes``: the bytes of one copy of the parameters (sum of numel x element size), what a
  client downloads.
* ``upload_bytes``: what a client uploads: the model-sized delta, plus one more model-sized set
  of tensors for algorithms that send control variates (SCAFFOLD's c_i update, Karimireddy et al.
  2020, Alg. 1 line 17; VRL-SGD's and FedNova-VR's variates), read from
  :attr:`fedsim.algorithms.spec.AlgoSpec.uses_control_variates`.
* With compressors (``algorithm.compression`` / ``downlink_compression``, docs/compression.md):
  a download is the downlink compressor's declared payload for the model's parameter count n and
  element size b, an upload the uplink compressor's plus n b bytes of control-variate change
  (:func:`fedsim.compression.apply.upload_bytes`, ``download_bytes``); ``none`` is the raw rule.

Counting leaves nothing behind: the first ``FlopCounterMode`` pass imports ``torch._dynamo``, whose
import makes an (empty) ``torchinductor_<user>`` cache folder in the temporary directory and sets
``TORCHINDUCTOR_CACHE_DIR``; :func:`step_flops` imports it itself and removes that folder when the
import made it and it is still empty, and unsets the variable when it was unset
(:func:`_import_dynamo_tidily`).

The quadratic problem has no model and so no cost: :func:`work_cost` refuses it (ValueError naming
``model.name``), so compute- or network-based timing cannot be asked of it.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from typing import Callable, Mapping

import torch
from torch import nn

from ..clock.model import WorkCost

__all__ = ["WorkCost", "step_flops", "model_bytes", "upload_bytes", "work_cost", "compressed_cost", "cost_info"]


def step_flops(
    module: nn.Module,
    input_shape: tuple[int, ...],
    batch_size: int,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """FLOPs of one forward and backward pass of ``module`` on a ``(batch_size, *input_shape)`` batch.

    Counted by ``FlopCounterMode`` on a meta-device copy in eval mode (dropout draws nothing; its
    masks cost no FLOPs in the count either way), so ``module`` is left untouched. The backward
    pass covers every parameter's gradient and the gradients of intermediate activations, not the
    gradient of the input batch (it does not require one).

    Args:
        module: The model (not modified).
        input_shape: Shape of one example, e.g. ``(60,)`` or ``(3, 32, 32)``.
        batch_size: Examples per local step (``algorithm.batch_size``).
        loss: ``loss(logits, labels)``; default cross-entropy with integer labels.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    from torch.utils.flop_counter import FlopCounterMode

    _import_dynamo_tidily()
    loss = loss or nn.functional.cross_entropy
    meta = copy.deepcopy(module).to("meta").eval()
    x = torch.zeros((batch_size, *input_shape), device="meta")
    with FlopCounterMode(display=False) as counter:
        out = meta(x)
        y = torch.zeros(out.shape[0], dtype=torch.long, device="meta")
        loss(out, y).backward()
    return int(counter.get_total_flops())


def _import_dynamo_tidily() -> None:
    """Import ``torch._dynamo`` (what a ``FlopCounterMode`` pass imports on first use) and undo what
    its import leaves behind: the ``torchinductor_<user>`` cache folder it creates in the temporary
    directory (a ``torchinductor_*`` folder there that the import made is removed while it is
    empty, empty sub-folders too; one that was there before stays) and ``TORCHINDUCTOR_CACHE_DIR``
    in the environment (unset again when it was unset; a folder it names is the user's and stays).
    A no-op once ``torch._dynamo`` is imported."""
    if "torch._dynamo" in sys.modules:
        return
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    tmp = tempfile.gettempdir()
    before = set(_inductor_folders(tmp))
    import torch._dynamo  # noqa: F401 - the import whose side effects are undone here

    if given is not None:
        return
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    for name in set(_inductor_folders(tmp)) - before:
        for root, _, _ in sorted(os.walk(os.path.join(tmp, name)), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(root)  # only empty folders: anything written there stays
            except OSError:
                pass


def _inductor_folders(tmp: str) -> list[str]:
    try:
        return [n for n in os.listdir(tmp) if n.startswith("torchinductor_")]
    except OSError:
        return []


def model_bytes(params: Mapping[str, torch.Tensor] | nn.Module) -> int:
    """Sum over parameters of numel x element size (bytes of one copy of the model)."""
    tensors = params.parameters() if isinstance(params, nn.Module) else params.values()
    return int(sum(t.numel() * t.element_size() for t in tensors))


def payload_size(module: nn.Module, payload: int | str) -> int:
    """``system.payload_bytes``: an explicit number of bytes, or ``fedscale_pickle``: FedScale's
    rule ``sys.getsizeof(pickle.dumps(model))`` applied to fedsim's module (FedScale pickles its
    model adapter, which adds its class names, its server optimizer and its whole argument
    namespace: about 2.7 KB more, e.g. 53.5 kbit against 31.9 kbit for a 60 -> 10 logistic
    regression; give the number explicitly to match a FedScale run exactly)."""
    if payload == "fedscale_pickle":
        import pickle
        import sys

        return int(sys.getsizeof(pickle.dumps(module)))
    return int(payload)


def upload_bytes(model_size: int, uses_control_variates: bool) -> int:
    """Bytes of one upload: the delta, plus a second model-sized set when control variates are sent."""
    return int(model_size) * (2 if uses_control_variates else 1)


def work_cost(
    module: nn.Module | None, input_shape: tuple[int, ...], batch_size: int, uses_control_variates: bool,
    *, count_flops: bool = True, payload: int | str | None = None, uplink=None, downlink=None,
) -> WorkCost:
    """The :class:`WorkCost` of training ``module`` (``None``: the quadratic problem, refused).

    ``count_flops=False`` leaves ``step_flops`` None: counting runs ``FlopCounterMode``, whose first
    use imports ``torch._dynamo`` (about 1 s of start-up), so runs count only when the clock needs
    the FLOPs (``system.compute``). ``uplink`` / ``downlink``: the links' compressors
    (:class:`fedsim.compression.Compressor`, None: the raw bytes); their declared payloads for the
    module's parameters replace ``model_bytes`` (the download) and the delta's share of the
    upload. ``payload`` (``system.payload_bytes``) is for raw links only (the scenario refuses it
    with a compressor other than ``none``)."""
    if module is None:
        raise ValueError("model.name: quadratic data has no model, so no FLOPs or bytes to time; use system.speed")
    size = model_bytes(module) if payload is None else payload_size(module, payload)
    cost = WorkCost(
        step_flops=step_flops(module, input_shape, batch_size) if count_flops else None,
        model_bytes=size,
        upload_bytes=upload_bytes(size, uses_control_variates),
        params=sum(p.numel() for p in module.parameters()),
    )
    return compressed_cost(cost, module, uses_control_variates, uplink=uplink, downlink=downlink)


def compressed_cost(cost: WorkCost, module: nn.Module, uses_control_variates: bool, *, uplink=None,
                    downlink=None) -> WorkCost:
    """``cost`` with each compressed link's bytes replaced by its compressor's declared payload
    for ``module``'s parameters (:func:`fedsim.compression.apply.download_bytes`, ``upload_bytes``:
    the latter with the control-variate change uncompressed); ``cost`` itself when neither link
    compresses (None or ``none``)."""
    if not (_compresses(downlink) or _compresses(uplink)):
        return cost
    from dataclasses import replace

    from ..compression import apply

    params = dict(module.named_parameters())
    down, up = cost.model_bytes, cost.upload_bytes
    if _compresses(downlink):
        down = _whole(apply.download_bytes(downlink, params))
    if _compresses(uplink):
        up = _whole(apply.upload_bytes(uplink, params, control_variates=uses_control_variates))
    return replace(cost, model_bytes=down, upload_bytes=up)


def _compresses(compressor) -> bool:
    """A compressor whose declared bytes replace the raw ones: any but None and ``none`` (the
    identity, whose payload is the raw n b bytes anyway)."""
    from ..compression.none import Identity

    return compressor is not None and not isinstance(compressor, Identity)


def _whole(b: float) -> int | float:
    """Declared bytes as an int when whole (what ``info.yaml`` shows), else as they are."""
    return int(b) if float(b).is_integer() else float(b)


def cost_info(cost: WorkCost) -> dict[str, int]:
    """The cost as ``info.yaml`` entries: ``step_flops`` (when counted), ``model_bytes``, ``upload_bytes``."""
    flops = {} if cost.step_flops is None else {"step_flops": cost.step_flops}
    return {**flops, "model_bytes": cost.model_bytes, "upload_bytes": cost.upload_bytes}
