"""Dropout whose masks come from noise the engine supplies: per-client masks that do not depend on chunking.

Under ``vmap(..., randomness="different")`` every client gets its own masks, but from one
generator shared by the whole chunk, so a client's masks would depend on which clients share its
chunk. The engine instead draws, for each client, uniform noise from the client's own stream
(``(seed, "dropout", client, key)``) and passes it in as a batched input; inside the (vmapped or
direct) forward, :func:`dropout_noise` makes every :class:`KeyedDropout` read its noise and keep
the units with ``noise >= p``. Without noise a :class:`KeyedDropout` is a plain ``nn.Dropout``.

:func:`keyed_dropout_sites` turns a module's plain ``nn.Dropout`` layers into
:class:`KeyedDropout` in place (no parameters change) and returns them in forward order; the
activation shapes at those sites come from one dry forward on a single sample
(:func:`site_shapes`).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["KeyedDropout", "dropout_noise", "keyed_dropout_sites", "site_shapes"]

# module -> its noise (same shape as its input); a list while recording shapes; None: plain dropout
_NOISE: ContextVar[dict | list | None] = ContextVar("fedsim_dropout_noise", default=None)


class KeyedDropout(nn.Dropout):
    """``nn.Dropout`` that, inside :func:`dropout_noise`, keeps the units whose noise is ``>= p``
    (scaled by ``1 / (1 - p)``) instead of drawing from torch's generator. In eval mode it is the
    identity, as ``nn.Dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctx = _NOISE.get()
        if ctx is None or not self.training:
            return F.dropout(x, self.p, self.training, self.inplace)
        if isinstance(ctx, list):  # recording the site shapes (a dry run): identity
            ctx.append((self, tuple(x.shape)))
            return x
        u = ctx[self]
        if self.p >= 1.0:
            return x * 0.0
        return x * (u >= self.p) * (1.0 / (1.0 - self.p))


@contextmanager
def dropout_noise(noise: dict | list | None) -> Iterator[None]:
    """Within the block, ``KeyedDropout`` modules read their noise from ``noise[module]``."""
    token = _NOISE.set(noise)
    try:
        yield
    finally:
        _NOISE.reset(token)


def keyed_dropout_sites(module: nn.Module | None) -> list[KeyedDropout]:
    """Replace every plain ``nn.Dropout`` in ``module`` by a :class:`KeyedDropout` (in place) and
    return all ``KeyedDropout`` modules. Other dropout kinds (channel-wise ``Dropout2d``,
    ``AlphaDropout``, ...) are not supported: a ``ValueError`` says so."""
    if module is None:
        return []
    for parent in list(module.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Dropout:
                setattr(parent, name, KeyedDropout(child.p, child.inplace).train(child.training))
            elif isinstance(child, nn.modules.dropout._DropoutNd) and not isinstance(child, KeyedDropout):
                raise ValueError(
                    f"{type(child).__name__} at {name!r}: the engine supports elementwise nn.Dropout only "
                    "(per-client masks keyed by (seed, client, key, step))"
                )
    return [m for m in module.modules() if isinstance(m, KeyedDropout)]


def site_shapes(forward, sample: torch.Tensor) -> list[tuple[KeyedDropout, tuple[int, ...]]]:
    """``(module, per-sample input shape)`` of each dropout site reached by ``forward(sample[None])``,
    in call order (a dry run without gradients, dropout as identity)."""
    rec: list = []
    with torch.no_grad(), dropout_noise(rec):
        forward(sample.unsqueeze(0))
    out = []
    if len({id(m) for m, _ in rec}) < len(rec):
        raise ValueError("a dropout module is called more than once per forward; give each site its own module")
    for m, shape in rec:
        if not shape or shape[0] != 1:
            raise ValueError(f"dropout input {shape} does not lead with the batch dimension")
        out.append((m, shape[1:]))
    return out
