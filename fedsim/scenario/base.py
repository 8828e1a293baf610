"""``Section`` and ``FieldError`` where plug-ins have imported them from; both live in
:mod:`fedsim.section`, below every package whose sections subclass them."""

from __future__ import annotations

from ..section import FieldError, Section, registered

__all__ = ["Section", "FieldError", "registered"]
