"""The base of an availability model's scenario section."""

from __future__ import annotations

from ..clock.availability import AvailabilityModel
from ..section import Section

__all__ = ["AvailabilitySection"]


class AvailabilitySection(Section):
    """``system.availability: {model: NAME, key: value, ...}``: subclass it, declare the keys as
    pydantic fields (frozen, unknown keys refused) and return the clock's value from
    :meth:`clock_value`. Errors name their key under ``system.availability``."""

    model: str

    def clock_value(self) -> AvailabilityModel:
        """The clock's availability value (plain, no pydantic)."""
        raise NotImplementedError

    def check_clients(self, m: int) -> None:
        """Refuse per-client values that do not fit ``m`` clients (raise ``ValueError``); called
        once the number of clients is known."""
