"""Batched image augmentation on the device: random crop with 4-pixel zero padding + flip.

Matches the papers' CIFAR pipeline (RandomCrop(32, padding=4), RandomHorizontalFlip, then
ToTensor + Normalize) for a whole (clients, batch, C, H, W) tensor of already-normalized images at
once, with draws from an explicit generator (no per-sample Python). torchvision pads the raw
image with black (0), which after normalization is ``-mean / std`` per channel: pass that as
``fill`` (the workload's ``pad_fill``) and the result equals Normalize(crop/flip(raw image)).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["augment_batch", "augment_draws"]


def augment_draws(rng, shape: tuple[int, ...], pad: int = 4):
    """Crop offsets and flips for ``shape`` images from a numpy Generator: (dx, dy, flip).

    dx, dy uniform on {0, ..., 2 pad}, flip with probability 1/2. All three come from one
    row-major stream of uniforms (three per image), so the draws are prefix-stable along the
    leading axis: the first k steps of ``shape = (steps, B)`` are the same whatever ``steps`` is.
    A client's augmentation therefore does not depend on the longest client of the chunk it is
    stepped with (chunking-invariant training).
    """
    u = rng.random(size=(*shape, 3))
    n = 2 * pad + 1
    dx = np.minimum((u[..., 0] * n).astype(np.int64), n - 1)
    dy = np.minimum((u[..., 1] * n).astype(np.int64), n - 1)
    flip = u[..., 2] < 0.5
    return dx, dy, flip


def augment_batch(
    x: torch.Tensor,
    dx: torch.Tensor,
    dy: torch.Tensor,
    flip: torch.Tensor,
    pad: int = 4,
    fill: torch.Tensor | None = None,
) -> torch.Tensor:
    """Crop (padding ``pad``, window at offsets dx, dy of the padded image) and flip ``x[..., C, H, W]``.

    ``dx``, ``dy``, ``flip`` have the leading shape of ``x`` (one draw per image). The padding is
    ``fill`` (one value per channel, shape (C,)) or zeros when None.
    """
    lead, (ch, h, w) = x.shape[:-3], x.shape[-3:]
    flat = x.reshape(-1, ch, h, w)
    n = flat.shape[0]
    dx, dy, flip = dx.reshape(n), dy.reshape(n), flip.reshape(n)
    if fill is None:
        padded = F.pad(flat, (pad, pad, pad, pad))
    else:
        padded = fill.to(dtype=x.dtype, device=x.device).view(1, ch, 1, 1).expand(n, ch, h + 2 * pad, w + 2 * pad)
        padded = padded.clone()
        padded[:, :, pad : pad + h, pad : pad + w] = flat
    rows = (dy.view(n, 1) + torch.arange(h, device=x.device).view(1, h)).view(n, 1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, w)
    cols = torch.where(flip.view(n, 1), w - 1 - cols, cols) + dx.view(n, 1)
    cols = cols.view(n, 1, 1, w)
    bidx = torch.arange(n, device=x.device).view(n, 1, 1, 1)
    cidx = torch.arange(ch, device=x.device).view(1, ch, 1, 1)
    out = padded[bidx, cidx, rows, cols]
    return out.reshape(*lead, ch, h, w)
