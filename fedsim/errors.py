"""The errors every layer may raise: :class:`ScenarioError` (bad input; the command line turns it
into exit 2 and one line) and :class:`PartError` (a plug-in part that passed its checks failed in
the middle of a run; exit 1 and one line naming the part)."""

from __future__ import annotations

__all__ = ["ScenarioError", "PartError"]


class ScenarioError(ValueError):
    """Invalid scenario or input file: ``str(err)`` is one line, ``field.path: problem`` (or
    ``FILE line N: problem``)."""


class PartError(RuntimeError):
    """A part (a compressor, a loss, ...) that raised, called ``sys.exit`` or broke its contract
    mid-run: ``str(err)`` is one line naming it by the scenario key and the name it was registered
    under (docs/reliability.md, "Plug-ins"). The command line exits 1."""
