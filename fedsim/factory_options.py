"""A registered factory's options (``model.options``, ...) checked against its signature."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .errors import ScenarioError

__all__ = ["takes_option", "check_options", "call_factory", "failure"]


Factory = Callable[..., Any]


def takes_option(factory: Any, option: str) -> bool:
    """Whether ``factory``'s signature takes the keyword ``option`` (or ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return True
    return option in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_options(factory: Any, options: dict, what: str, path: str) -> None:
    """One-line :class:`~fedsim.errors.ScenarioError` naming ``path`` and the options ``factory``
    takes when its signature does not take one of ``options``."""
    bad = [k for k in options if not takes_option(factory, k)]
    if bad:
        try:
            params = inspect.signature(factory).parameters
            known = [p for p, v in params.items() if v.kind is v.KEYWORD_ONLY or v.default is not v.empty]
        except (TypeError, ValueError):
            known = []
        raise ScenarioError(f"{path}: {what} takes no option {bad[0]!r}; it takes: {', '.join(known) or 'none'}")


def call_factory(factory: Any, args: tuple, options: dict, what: str, path: str) -> Any:
    """``factory(*args, **options)`` after :func:`check_options`."""
    check_options(factory, options, what, path)
    return factory(*args, **options)


def failure(err: BaseException, limit: int = 200) -> str:
    """``TypeName: first line of the message`` (at most ``limit`` characters of it): how a foreign
    factory's exception is reported in one line."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
