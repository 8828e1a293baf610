"""Client selection: whom the server asks to train (``round.selection: {name: NAME, ...}``).

A selection rule is a frozen value with explicit state (:class:`SelectionRule`: ``init``,
``select``, ``observe``) that sees only what a real server knows (:class:`Request`,
:class:`Observations`; the information boundary is stated in :mod:`fedsim.selection.base`).
"""

from .base import Observations, Picked, Request, SelectionRule, check_picked, normalized_weights

__all__ = ["Observations", "Picked", "Request", "SelectionRule", "check_picked", "normalized_weights"]
