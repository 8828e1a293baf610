"""Errors raised by the data loaders.

Both are :class:`fedsim.errors.ScenarioError` (the input is wrong: the command line exits 2 with
their one line, and the Python API raises them as the same type it raises for a bad scenario).
``DataNotFound`` is also a ``FileNotFoundError`` and ``DataCorrupted`` a ``RuntimeError``, as before.
"""

from __future__ import annotations

from fedsim.errors import ScenarioError


class DataNotFound(ScenarioError, FileNotFoundError):
    """Dataset files are missing; the message says where we looked and how to get them."""

    def __str__(self) -> str:  # one line, as ScenarioError's (OSError would format errno fields)
        return str(self.args[0]) if self.args else ""


class DataCorrupted(ScenarioError, RuntimeError):
    """Dataset files exist but fail torchvision's checks (e.g. md5) or cannot be parsed."""
