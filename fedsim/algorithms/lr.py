"""Learning-rate schedules: per round (decay, milestones) and per local step, never stored per step.

See docs/algorithms.md (learning rates).
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["round_lr", "StepLrs"]


def round_lr(lr: float, round_decay: float, milestones: Sequence[float], factor: float,
             round_index: int, total_rounds: int) -> float:
    """Local lr at the start of round ``round_index`` (0-based).

    ``lr * round_decay**round_index``, times ``factor`` once for every milestone fraction f
    already passed: rounds ``>= ceil(f * total_rounds)`` (FedNova: /10 after 50% and /100 after
    75% of the rounds with ``[0.5, 0.75]`` and factor 0.1).
    """
    out = lr * round_decay**round_index
    for frac in milestones:
        if round_index >= math.ceil(frac * total_rounds - 1e-9):
            out *= factor
    return out


class StepLrs:
    """The local learning rates of a round's steps, computed when read (never stored per step).

    ``StepLrs(round_lr, decay)[k] = round_lr * decay**k`` (per-step decay ``lr_decay``) for any
    step ``k >= 0``: no list of 10**12 learning rates for a round of 10**12 steps. ``ratios()`` reads
    ``lr_k / round_lr`` (what ``a_norm`` takes), computed as that quotient, not as ``decay**k``,
    so it rounds exactly as the per-step lists of earlier versions did.
    """

    def __init__(self, round_lr: float, decay: float, *, ratio: bool = False):
        self.round_lr, self.decay, self.ratio = round_lr, decay, ratio

    def __getitem__(self, k: int) -> float:
        if k < 0:
            raise IndexError(k)
        lr = self.round_lr * self.decay**k
        return lr / self.round_lr if self.ratio else lr

    def ratios(self) -> "StepLrs":
        return StepLrs(self.round_lr, self.decay, ratio=True)
