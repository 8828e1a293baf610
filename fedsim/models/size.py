"""A model whose size follows from the input's height and width, named before training (issue 27).

A CNN that flattens its last feature map into a dense layer (LEAF's ``leaf_cnn``: 64 x H/4 x W/4
-> 2048) grows with the images it is given: 6,603,710 parameters at LEAF's 28 x 28, 134,400,510 at
NIST's 128 x 128 (4.6 GB and about a minute a step on a CPU). When a model has more than
:data:`LARGE_MODEL_PARAMETERS` parameters and its count changes when the input's height and width
are halved (the model rebuilt on torch's ``meta`` device: no memory, no random draws), the run says
so in one line on stderr before training (:func:`size_note`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LARGE_MODEL_PARAMETERS", "size_note"]

#: Models above this many parameters are checked for a size that follows from the input shape.
LARGE_MODEL_PARAMETERS = 10_000_000


def _count(module: torch.nn.Module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def size_note(sc: Any, input_shape: tuple[int, ...], num_classes: int | None, module: torch.nn.Module,
              model: Any = None) -> str | None:
    """One line naming the model when its size follows from the image size, else None.

    Args:
        sc: The scenario (its ``model`` section builds the model again).
        input_shape: One example's shape, ``(C, H, W)`` for images (other shapes: None).
        num_classes: The classes the model was built for.
        module: The model built for ``input_shape``.
        model: The Python factory the run was given, if any (a module given from Python: None).
    """
    params = _count(module)
    if params <= LARGE_MODEL_PARAMETERS or len(input_shape) != 3 or min(input_shape[1:]) < 2:
        return None
    if isinstance(model, torch.nn.Module):
        return None
    from .make import make_model

    c, h, w = (int(d) for d in input_shape)
    half = (c, h // 2, w // 2)
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            smaller = _count(make_model(sc, half, num_classes, model))
    except Exception:  # noqa: BLE001 - a model that cannot take the smaller input: nothing to say
        return None
    if smaller == params:
        return None
    name = getattr(getattr(sc, "model", None), "name", None) or "the model"
    return (f"model {name}: {params:,} parameters ({params * 4 / 2**30:.1f} GiB as float32) for input {tuple(input_shape)}: "
            f"its size follows from the input's height and width ({smaller:,} at {half}); resize the images "
            "(e.g. FedScale's 32 x 32) if this is not the model you meant")
