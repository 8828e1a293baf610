"""Client selection: whom the server asks to train (``round.selection: {name: NAME, ...}``).

A selection rule is a frozen value with explicit state (``init``, ``select``, ``observe``) that sees
only what a real server knows: the clients online at a pick (:class:`Request`) and what past jobs
reported (:class:`Observations`); the information boundary is stated in
:mod:`fedsim.clock.selection`, where the clock's own rules (``uniform``, ``weighted``) live. The
rules a scenario names are registered in ``fedsim.registries.SELECTORS``; each module here holds
one rule's scenario section (a subclass of :class:`fedsim.selection.section.SelectionSection`)
and its clock value.
"""

from ..clock.selection import Observations, Picked, Request, SelectionRule, check_picked, normalized_weights

__all__ = ["Observations", "Picked", "Request", "SelectionRule", "check_picked", "normalized_weights"]
