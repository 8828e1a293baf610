"""The base of every scenario section: frozen, ``extra="forbid"``, no true/false where a number is due.

It sits below the packages whose sections subclass it (``fedsim.scenario``, ``availability``,
``selection``, ``compression``), so each of them imports it and none imports the others back.

:class:`Section` is public: fedsim's sections and a plug-in's (an availability model's
``AvailabilitySection``, a selection rule's ``SelectionSection``) subclass it. :class:`FieldError`
is the one-line error a validator raises with its own field path (fedsim's or a plug-in's).
"""

from __future__ import annotations

import json
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["Section", "FieldError", "registered", "BoolGiven", "has_bool"]


class Section(BaseModel):
    """A scenario section: frozen, unknown keys refused, no NaN or infinity, and no true / false
    where a number is due."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        # pydantic reads true / false as 1 / 0 in number fields: wrap them so the field refuses them
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: BoolGiven(v) if k in fields and _refuses_bool(v, fields[k].annotation) else v for k, v in data.items()}
        return data


class BoolGiven:
    """A true / false given to a field that takes none (no type accepts it; see ``_format_error``)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return json.dumps(self.value)


def _refuses_bool(value: Any, annotation: Any) -> bool:
    return has_bool(value) and not _admits_bool(annotation)


def has_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if not isinstance(value, (list, tuple)):
        return False
    for x in value:  # a loop, not a call per entry: per-client lists hold up to a million numbers
        if x is True or x is False or (type(x) in (list, tuple) and has_bool(x)):
            return True
    return False


def _admits_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_admits_bool(a) for a in get_args(annotation))


class FieldError(ValueError):
    """``path: msg`` in one line, raised inside a section's validator when the error belongs to
    another field than the one validated (a cross-field rule); the scenario loader reports
    ``path``."""

    def __init__(self, path: str, msg: str):
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg



def registered(registry, name: Any) -> Any:
    """``name`` if ``registry`` (:mod:`fedsim.registries`) knows it (nothing is imported), else a
    :class:`FieldError` ``field: unknown kind 'name'; known: a, b, c``."""
    from .errors import ScenarioError

    try:
        return registry.check(name)
    except ScenarioError as err:
        path, _, msg = str(err).partition(": ")
        raise FieldError(path, msg) from None
