"""The base of a selection rule's scenario section (``round.selection: {name: NAME, ...}``)."""

from __future__ import annotations

from ..section import Section
from ..clock.selection import SelectionRule

__all__ = ["SelectionSection"]


class SelectionSection(Section):
    """``round.selection: {name: NAME, key: value, ...}``: subclass it, declare the keys as pydantic
    fields (frozen, unknown keys refused) and return the clock's rule from :meth:`clock_value`.
    Errors name their key under ``round.selection``."""

    name: str

    def clock_value(self) -> SelectionRule:
        """The clock's selection rule (a plain frozen value, no pydantic)."""
        raise NotImplementedError
