"""The ``loss`` section: the training loss by name (``fedsim.registries.LOSSES``)."""

from __future__ import annotations

from pydantic import field_validator

from .. import registries
from ..section import Section, registered

__all__ = ["LossConfig", "DEFAULT_LOSS"]

#: ``loss.name`` when the section is left out: fedsim's cross-entropy (fedsim/losses.py).
DEFAULT_LOSS = "cross_entropy"


class LossConfig(Section):
    """``loss: {name: NAME}``: a loss ``(outputs, targets) -> scalar mean`` registered as ``NAME``
    (``fedsim.register_loss``, a plug-in); ``from_python``: the ``loss=`` given to ``fedsim.run``."""

    name: str = DEFAULT_LOSS

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return registered(registries.LOSSES, v)
