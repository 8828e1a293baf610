"""What a job's transfers cost: the one seam every clock path asks, shaped like an availability
model (plain values in, seconds out).

A transfer of b bits between the server and client i, started at t:

* alone (no ``system.server`` link in that direction): it ends at t + (L + b / c_i), L the
  latency and c_i the client's bandwidth (``system.network`` or a device trace);
* on a shared server link of capacity C (``system.server.up`` / ``down``): after the latency its
  bits enter the link at t + L and move at the client's share r_i = min(c_i, level) of C, the
  max-min fair share among the transfers in flight, recomputed whenever one starts, ends or is
  cut (:mod:`fedsim.clock.link`); it ends when its last bit is through.

The bits of a transfer come from the model (``WorkCost.model_bytes`` down, ``upload_bytes`` up,
which a compressor declares from the parameter count), so they are known before training.
Without a network, a transfer is the latency alone.
"""

from __future__ import annotations

import numpy as np

from .draws import PerClientDraws

__all__ = ["Transfers"]


class Transfers:
    """The transfers of one clock.

    Args:
        latency: L, seconds per transfer.
        down, up: the clients' bandwidths (:class:`~fedsim.clock.draws.PerClientDraws`), or None
            without a network (then a transfer is L alone).
        down_bits, up_bits: bits of one download / upload, in the bandwidths' units (a device
            trace's kbit for kbit/s).
        down_capacity, up_capacity: the server's link per direction in those units (None:
            unlimited, every transfer alone).
    """

    def __init__(self, latency: float, down: PerClientDraws | None = None, down_bits: float = 0.0,
                 up: PerClientDraws | None = None, up_bits: float = 0.0, *, down_capacity: float | None = None,
                 up_capacity: float | None = None):
        self.latency = float(latency)
        self.down, self.down_bits, self.up, self.up_bits = down, float(down_bits), up, float(up_bits)
        self.down_capacity = None if down is None else down_capacity
        self.up_capacity = None if up is None else up_capacity

    @property
    def network(self) -> bool:
        """Whether transfers carry bits (else each is the latency alone)."""
        return self.down is not None

    @property
    def shared(self) -> bool:
        """Whether a transfer's time depends on the others in flight (a server link)."""
        return self.down_capacity is not None or self.up_capacity is not None

    def solo(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(download, upload) seconds of ``clients`` each alone: L + bits / bandwidth (bandwidths
        from streams ``("down", c)`` and ``("up", c)``); L alone without a network."""
        L = self.latency
        if self.down is None:
            return np.full(len(clients), L), np.full(len(clients), L)
        return L + self.down_bits / self.down.take(clients), L + self.up_bits / self.up.take(clients)

    def caps(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(download, upload) bandwidths of ``clients`` (what each can use of a shared link)."""
        return self.down.take(clients), self.up.take(clients)

    def quickest(self, highest) -> float:
        """The quickest download plus upload any client can have: 2 L + bits / the highest
        bandwidths (``highest(draws)``: the largest value a draw can give; inf when unbounded)."""
        if self.down is None:
            return 2 * self.latency
        return 2 * self.latency + self.down_bits / highest(self.down) + self.up_bits / highest(self.up)

    def __repr__(self) -> str:
        cap = "" if not self.shared else f", server {self.down_capacity}/{self.up_capacity}"
        return f"Transfers(L={self.latency}, bits {self.down_bits}/{self.up_bits}{cap})"
