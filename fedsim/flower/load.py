"""``module:attr`` -> the object (the CLI's explicit ``--server-app`` / ``--client-app``)."""

from __future__ import annotations

import importlib

from fedsim.errors import ScenarioError

__all__ = ["load_app"]


def load_app(ref: str, kind: type, flag: str):
    """Import ``module`` and return its ``attr`` (dots allowed), which must be a ``kind``."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ScenarioError(f"{flag}: give MODULE:ATTR (got {ref!r})")
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ScenarioError(f"{flag}: cannot import {module!r} ({err})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ScenarioError(f"{flag}: {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, kind):
        raise ScenarioError(f"{flag}: {ref} is a {type(obj).__name__}, not a {kind.__name__}")
    return obj
