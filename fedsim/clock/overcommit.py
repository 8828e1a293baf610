"""How many clients an over-committed round selects, as fedsim and as FedScale count them.

Pure functions of the factor F (``round.overcommit``) and K (``round.clients_per_round``); no
imports, so the clock may use them (it never imports torch or pydantic).

- fedsim (``trace_semantics: fedsim``): ceil(F K) with F read as the decimal it was written as,
  so 1.3 x 10 selects 13 (:func:`fedsim.clock.policy.overcommit_size`).
- FedScale (``trace_semantics: fedscale``): ``int(select_num_participants * overcommitment)``
  in its aggregator's ``select_participants`` (fedscale/cloud/aggregation/aggregator.py): the
  float product truncated, so K = 7, F = 1.3 selects int(9.1) = 9 where ceil gives 10, and K = 10
  selects int(13.000000000000002) = 13.
"""

from __future__ import annotations

__all__ = ["fedscale_overcommit_size"]


def fedscale_overcommit_size(factor: float, k: int) -> int:
    """FedScale's number of clients selected for K uploads: ``int(K * F)`` in floating point (at
    least K for F >= 1: the product of K by a number >= 1 never rounds below K)."""
    return int(int(k) * float(factor))
