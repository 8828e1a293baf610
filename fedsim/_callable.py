"""``fedsim.run(...)`` and ``fedsim.schedule(...)`` are functions of :mod:`fedsim.api`, while
``fedsim.run`` and ``fedsim.schedule`` are also modules (the runner package, the clock-only mode).
Importing a submodule sets the parent's attribute to the module, so the modules themselves are
made callable: calling one calls the API function. Nothing else changes for the module."""

from __future__ import annotations

import importlib
import sys
import types

__all__ = ["make_callable"]


def make_callable(module_name: str, target: str) -> None:
    """Calling module ``module_name`` calls ``target`` (``"package.module:function"``)."""
    mod_name, _, attr = target.partition(":")

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return getattr(importlib.import_module(mod_name), attr)(*args, **kwargs)

    _CallableModule.__call__.__doc__ = f"Call :func:`{mod_name}.{attr}`."
    sys.modules[module_name].__class__ = _CallableModule
