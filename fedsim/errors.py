"""The input error every check raises (the CLI turns it into exit 2 with its one line)."""

from __future__ import annotations

__all__ = ["ScenarioError"]


class ScenarioError(ValueError):
    """Invalid scenario or arguments: ``str(err)`` is one line, ``field.path: problem``."""
