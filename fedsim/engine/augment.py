"""Batched image augmentation on the device: random crop with 4-pixel zero padding + flip.

Matches the papers' CIFAR pipeline (RandomCrop(32, padding=4), RandomHorizontalFlip) applied to
already-normalized images, for a whole (clients, batch, C, H, W) tensor at once, with draws from
an explicit generator (no per-sample Python).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["augment_batch", "augment_draws"]


def augment_draws(rng, shape: tuple[int, ...], pad: int = 4):
    """Crop offsets and flips for ``shape`` images from a numpy Generator: (dx, dy, flip)."""
    dx = rng.integers(0, 2 * pad + 1, size=shape)
    dy = rng.integers(0, 2 * pad + 1, size=shape)
    flip = rng.random(size=shape) < 0.5
    return dx, dy, flip


def augment_batch(x: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor, flip: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Crop (zero padding ``pad``, offsets dx, dy) and flip images ``x[..., C, H, W]``.

    ``dx``, ``dy``, ``flip`` have the leading shape of ``x`` (one draw per image).
    """
    lead, (ch, h, w) = x.shape[:-3], x.shape[-3:]
    flat = x.reshape(-1, ch, h, w)
    n = flat.shape[0]
    dx, dy, flip = dx.reshape(n), dy.reshape(n), flip.reshape(n)
    padded = F.pad(flat, (pad, pad, pad, pad))
    rows = (dy.view(n, 1) + torch.arange(h, device=x.device).view(1, h)).view(n, 1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, w)
    cols = torch.where(flip.view(n, 1), w - 1 - cols, cols) + dx.view(n, 1)
    cols = cols.view(n, 1, 1, w)
    bidx = torch.arange(n, device=x.device).view(n, 1, 1, 1)
    cidx = torch.arange(ch, device=x.device).view(1, ch, 1, 1)
    out = padded[bidx, cidx, rows, cols]
    return out.reshape(*lead, ch, h, w)
