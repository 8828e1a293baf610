"""Plug-ins: code that registers named pieces before a scenario is read.

Two ways in besides the Python API (:mod:`fedsim.api`):

- an installed package declares an entry point in the group ``fedsim.plugins`` (its
  ``pyproject.toml``: ``[project.entry-points."fedsim.plugins"] mine = "my_pkg.fedsim_plugin"``);
  the entry point is a module (importing it registers its pieces) or a callable run once with no
  arguments. Every installed plug-in loads when a command first reads a scenario.
- ``--plugin MODULE`` (repeatable) on ``fedsim run``, ``validate`` and ``compare`` imports MODULE
  (from the current directory or ``sys.path``) before the scenario is read.

A scenario file alone never imports anything: it only names pieces that one of these registered.
A plug-in that fails to import or to run, or a name registered twice, is one line (exit 2).
"""

from __future__ import annotations

import importlib
import sys

from .errors import ScenarioError
from .named_pieces import RegistryError

__all__ = ["GROUP", "PluginError", "load_entry_points", "load_modules", "load_plugins"]

GROUP = "fedsim.plugins"
_loaded: set[str] = set()


class PluginError(ScenarioError):
    """A plug-in that cannot be loaded (import error, failing registration, duplicate name)."""


def load_entry_points() -> list[str]:
    """Load every installed ``fedsim.plugins`` entry point once; returns the names loaded now."""
    from importlib.metadata import entry_points

    done = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        key = f"entry point {ep.name} ({ep.value})"
        if key in _loaded:
            continue
        _loaded.add(key)
        _run(key, lambda ep=ep: ep.load())
        done.append(ep.name)
    return done


def load_modules(modules) -> None:
    """Import each of ``modules`` (``--plugin MODULE``) once, the current directory first on the path."""
    for name in modules:
        key = f"plugin {name}"
        if key in _loaded:
            continue
        _loaded.add(key)
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")
        _run(key, lambda name=name: importlib.import_module(name))


def load_plugins(modules=()) -> None:
    """The installed entry points, then ``modules``: what every command does before reading a scenario."""
    load_entry_points()
    load_modules(modules)


def _run(what: str, load) -> None:
    try:
        obj = load()
        if callable(obj) and not isinstance(obj, type(sys)):
            obj()
    except RegistryError as err:
        raise PluginError(f"{what}: {err}") from None
    except ScenarioError as err:
        raise PluginError(f"{what}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    except Exception as err:  # noqa: BLE001 - any failure of foreign code is one line, exit 2
        msg = str(err).splitlines()[0] if str(err) else ""
        raise PluginError(f"{what}: cannot load ({type(err).__name__}{': ' + msg if msg else ''})") from None
