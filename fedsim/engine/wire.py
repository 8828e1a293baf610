"""What crosses the wire in a run: the uplink's compressor (with error feedback) and the downlink's
(docs/compression.md). The engine calls :class:`Wire` at two points and nowhere else:

- ``broadcast(x, version)``: the model the clients of ``version`` train from, C_down(x) (one draw
  per version); the server keeps x in full precision and adds the aggregate to it.
- ``upload(deltas, clients, keys, residuals)``: after local training, before aggregation, the
  updates the server receives, C_up(Delta_i + e_i), and the clients' new residuals e_i'
  (:func:`fedsim.compression.apply.compress_cohort`), which the engine keeps in
  :attr:`fedsim.algorithms.state.ServerState.residuals` (checkpointed with it).

A run without ``algorithm.compression`` and ``algorithm.downlink_compression`` has no Wire
(``None``) and makes neither call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from ..compression.apply import compress_cohort, compress_model
from ..compression.base import Compression, Compressor

Tensors = dict[str, torch.Tensor]

__all__ = ["Wire"]


@dataclass(frozen=True)
class Wire:
    """The two links of a run: ``uplink`` (None: the raw updates) and ``downlink`` (None: the raw
    model); ``seed``: the scenario seed (the random compressors' streams). A compressor that fails
    mid-run is a one-line :class:`fedsim.errors.PartError` naming it (exit 1)."""

    uplink: Compression | None
    downlink: Compressor | None
    seed: int
    #: the downlink compressor's registered name (``algorithm.downlink_compression.name``), for errors
    downlink_name: str | None = None

    def broadcast(self, params: Tensors, version: int) -> Tensors:
        """The model the clients that download ``version`` train from (``params`` itself without a
        downlink compressor)."""
        if self.downlink is None:
            return params
        return compress_model(self.downlink, params, seed=self.seed, version=version, name=self.downlink_name)

    def upload(self, deltas: Tensors, clients: Sequence[int], keys: Sequence[int],
               residuals: Mapping[int, Tensors]) -> tuple[Tensors, dict[int, Tensors]]:
        """``(applied, residuals)``: the decompressed updates of the rows ``clients`` (job keys
        ``keys``, row order = the order they report in) and the residuals after them; without an
        uplink compressor ``deltas`` and ``residuals`` as they are."""
        if self.uplink is None:
            return deltas, dict(residuals)
        return compress_cohort(self.uplink, deltas, clients, keys, residuals, seed=self.seed)
