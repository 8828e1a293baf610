"""``data.options`` of fedsim's named datasets: each key checked against the values it may take."""

from __future__ import annotations

from typing import Any

from fedsim.errors import ScenarioError

__all__ = ["dataset_options"]


def dataset_options(config: Any, name: str, allowed: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    """The dataset's options: ``config.options`` (a mapping, possibly absent) over the defaults.

    Args:
        config: The scenario's ``data`` section (or anything with an ``options`` mapping).
        name: The dataset (for messages).
        allowed: option -> its allowed values, the first being the default.

    Raises:
        ScenarioError: ``data.options.KEY: ...`` for an unknown key or a value not allowed.
    """
    given = getattr(config, "options", None) or {}
    out = {key: values[0] for key, values in allowed.items()}
    for key, value in given.items():
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise ScenarioError(f"data.options.{key}: {name} has no such option (options: {known})")
        if not isinstance(value, str) or value not in allowed[key]:
            choices = " or ".join(repr(v) for v in allowed[key])
            raise ScenarioError(f"data.options.{key}: must be {choices}, got {str(value)[:60]!r}")
        out[key] = value
    return out
