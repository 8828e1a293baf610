"""The base of every scenario section: frozen, ``extra="forbid"``, no true/false where a number is due.

Also :class:`_FieldError`, the one-line error a cross-field validator raises with its own field path.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, model_validator

class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        # pydantic reads true / false as 1 / 0 in number fields: wrap them so the field refuses them
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: _Boolean(v) if k in fields and _refuses_bool(v, fields[k].annotation) else v for k, v in data.items()}
        return data


class _Boolean:
    """A true / false given to a field that takes none (no type accepts it; see ``_format_error``)."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return json.dumps(self.value)


def _refuses_bool(value: Any, annotation: Any) -> bool:
    return _has_bool(value) and not _admits_bool(annotation)


def _has_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if not isinstance(value, (list, tuple)):
        return False
    for x in value:  # a loop, not a call per entry: per-client lists hold up to a million numbers
        if x is True or x is False or (type(x) in (list, tuple) and _has_bool(x)):
            return True
    return False


def _admits_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_admits_bool(a) for a in get_args(annotation))


class _FieldError(ValueError):
    def __init__(self, path: str, msg: str):
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg



def registered(registry, name: Any) -> Any:
    """``name`` if ``registry`` (:mod:`fedsim.registries`) knows it (nothing is imported), else a
    :class:`_FieldError` ``field: unknown kind 'name'; known: a, b, c``."""
    from ..errors import ScenarioError

    try:
        return registry.check(name)
    except ScenarioError as err:
        path, _, msg = str(err).partition(": ")
        raise _FieldError(path, msg) from None
