"""The dropout plan: a model's dropout sites with their activation shapes, and how one client's
flat step noise is cut into per-site masks' noise (``fedsim.models.dropout``)."""

from __future__ import annotations

import math
import weakref

import torch
from torch import nn

from ..models.dropout import keyed_dropout_sites, site_shapes
from .workload_value import Workload

__all__ = ["Sites", "NOISE_BLOCK_BYTES", "dropout_plan", "noise_size", "split_noise"]

Sites = list  # [(KeyedDropout module, per-sample input shape)] in forward order


def split_noise(u: torch.Tensor, b: int, sites: Sites) -> dict:
    """One client's flat step noise (S,) -> {dropout module: noise (B, *shape)}, sites in order."""
    out, off = {}, 0
    for m, shape in sites:
        n = b * math.prod(shape)
        out[m] = u[off : off + n].view((b,) + tuple(shape))
        off += n
    return out


def noise_size(sites: Sites, batch_size: int) -> int:
    """Entries of one client's dropout noise for one step (all sites, whole minibatch)."""
    return batch_size * sum(math.prod(shape) for _, shape in sites)


#: Per client, dropout noise is drawn this many bytes' worth of steps at a time (at least one step).
NOISE_BLOCK_BYTES = 1 << 20

_SITES: "weakref.WeakKeyDictionary[nn.Module, Sites]" = weakref.WeakKeyDictionary()


def dropout_plan(work: Workload) -> Sites | None:
    """The workload model's dropout sites with their per-sample activation shapes, or None when it
    has no dropout in training mode. Plain ``nn.Dropout`` layers become ``KeyedDropout`` (in
    place); shapes come from one dry forward on one training sample (cached per module)."""
    mods = keyed_dropout_sites(work.module) if work.module is not None else []
    if not any(m.training for m in mods):
        return None
    sites = _SITES.get(work.module)
    if sites is None:
        state = {**work.init_params, **{k: v.clone() for k, v in work.buffers.items()}}
        sites = site_shapes(lambda xb: work.predict(state, xb), work.x_train[0])
        _SITES[work.module] = sites
    return sites or None
