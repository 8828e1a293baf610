"""How many local steps an epoch is: the rule a dataset states (:attr:`FederatedData.epoch_rule`).

``round.local_epochs`` E gives client i tau_i = floor(E n_i / B) local steps (fedsim's rule: E
passes over a running stream of B-example batches). LEAF counts an epoch as ceil(n_i / B)
minibatches (``models/utils/model_utils.py`` ``batch_data`` yields a last, smaller batch), so
tau_i = E ceil(n_i / B) and a writer with fewer than B samples still takes E steps.

The clock computes floor(E m_i / B) from the sizes m_i it is given; :func:`epoch_sizes` gives it
m_i = ceil(n_i / B) B under the ``ceil`` rule, for which floor(E m_i / B) = E ceil(n_i / B)
exactly for every whole E (a fractional E gives whole_steps(E ceil(n_i / B))). The clock reads
these sizes only to count epochs; the weights p_i stay n_i / n.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EPOCH_RULES", "epoch_sizes"]

EPOCH_RULES = ("floor", "ceil")


def epoch_sizes(sizes, batch_size: int, rule: str = "floor") -> np.ndarray:
    """The sizes the clock counts ``local_epochs`` over: n_i (``floor``) or ceil(n_i / B) B (``ceil``)."""
    n = np.asarray(sizes, dtype=np.int64)
    if rule == "floor":
        return n
    if rule != "ceil":
        raise ValueError(f"epoch_rule must be one of {', '.join(EPOCH_RULES)}, got {rule!r}")
    b = int(batch_size)
    return -(-n // b) * b
