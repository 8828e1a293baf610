"""Availability models a scenario names: ``system.availability: {model: NAME, ...}``.

One module per model holds all of it: the section a scenario writes (a subclass of
:class:`AvailabilitySection`, its keys checked by pydantic) and the clock value its
``clock_value()`` returns (a :class:`fedsim.clock.availability.AvailabilityModel`: per-client
timelines for the SimPy path, arrays for the vectorised paths, its time scales). A model enters
through ``fedsim.registries.AVAILABILITY`` as fedsim's own do (``markov``, ``diurnal``), from
Python (``fedsim.register_availability``), a plug-in or ``--plugin``; docs/extending.md shows one.
``always`` and per-client offline intervals are forms of the key itself (fedsim.clock.availability).
"""

from .section import AvailabilitySection

__all__ = ["AvailabilitySection"]
