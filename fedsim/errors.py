"""The input error every layer may raise: the command line turns it into exit 2 and one line."""

from __future__ import annotations

__all__ = ["ScenarioError"]


class ScenarioError(ValueError):
    """Invalid scenario or input file: ``str(err)`` is one line, ``field.path: problem`` (or
    ``FILE line N: problem``)."""
