"""Plug-ins: code that registers named pieces before a scenario is read.

Two ways in besides the Python API (:mod:`fedsim.api`):

- an installed package declares an entry point in the group ``fedsim.plugins`` (its
  ``pyproject.toml``: ``[project.entry-points."fedsim.plugins"] mine = "my_pkg.fedsim_plugin"``);
  the entry point is a module (importing it registers its pieces) or a callable run once with no
  arguments. Every installed plug-in loads when a command first reads a scenario.
- ``--plugin MODULE`` (repeatable) on ``fedsim run``, ``validate`` and ``compare`` imports MODULE
  before the scenario is read: from the current folder when it holds ``./MODULE.py`` or
  ``./MODULE/__init__.py`` (for a dotted name, its first part), loaded from that file alone;
  else from ``sys.path`` as it is. The current folder is never put on the import path, so no
  other file there (a ``torch.py``, a ``*.dist-info``) is imported or read in place of the real
  one, by this process or by ``compare`` workers (docs/reliability.md, "Plug-ins").

A scenario file alone never imports anything: it only names pieces that one of these registered.
Registrations made while a plug-in loads are recorded as that plug-in's
(:func:`fedsim.named_pieces.registering_as`). A plug-in that fails to import or to run, calls
``sys.exit``, registers a bad piece, or registers a name already taken, is one line (exit 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

from .errors import ScenarioError
from .named_pieces import RegistryError, registering_as

__all__ = ["GROUP", "PluginError", "load_entry_points", "load_modules", "load_plugins", "import_plugin"]

GROUP = "fedsim.plugins"
_loaded: set[str] = set()
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


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
        dist = getattr(ep, "dist", None)
        who = f"distribution {dist.name} {dist.version} (entry point {ep.name})" if dist else f"entry point {ep.name}"
        with registering_as(who):
            _run(key, lambda ep=ep: ep.load())
        done.append(ep.name)
    return done


def load_modules(modules) -> None:
    """Import each of ``modules`` (``--plugin MODULE``) once (:func:`import_plugin`)."""
    for name in modules:
        key = f"plugin {name}"
        if key in _loaded:
            continue
        _loaded.add(key)
        with registering_as(f"plugin module {name}"):
            _run(key, lambda name=name: import_plugin(name))


def import_plugin(name: str):
    """Module ``name``: its first part from the current folder when that holds ``./TOP.py`` or
    ``./TOP/__init__.py`` (loaded from that file; a package's submodules from its folder), else
    from ``sys.path`` as it is. ``sys.path`` is never changed, so nothing else in the current
    folder is importable through it. A first part already imported is not looked up again."""
    if not isinstance(name, str) or not _MODULE.fullmatch(name):
        raise ScenarioError("not a module name (dotted Python identifiers)")
    top = name.partition(".")[0]
    here = Path.cwd()
    if top not in sys.modules:
        for path, search in ((here / top / "__init__.py", [str(here / top)]), (here / f"{top}.py", None)):
            if path.is_file():
                spec = importlib.util.spec_from_file_location(top, path, submodule_search_locations=search)
                module = importlib.util.module_from_spec(spec)
                sys.modules[top] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(top, None)
                    raise
                break
    return importlib.import_module(name)


def load_plugins(modules=()) -> None:
    """The installed entry points, then ``modules``: what every command does before reading a scenario."""
    load_entry_points()
    load_modules(modules)


def _run(what: str, load) -> None:
    try:
        obj = load()
        if callable(obj) and not isinstance(obj, type(sys)):
            obj()
    except SystemExit as err:  # sys.exit() while loading: not a silent end of the command
        code = err.code if err.code is None or (isinstance(err.code, int) and abs(err.code) < 2**63) else "..."
        raise PluginError(f"{what}: called sys.exit({code}) while loading") from None
    except RegistryError as err:
        raise PluginError(f"{what}: {err}") from None
    except ScenarioError as err:
        raise PluginError(f"{what}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    except Exception as err:  # noqa: BLE001 - any failure of foreign code is one line, exit 2
        msg = str(err).splitlines()[0] if str(err) else ""
        raise PluginError(f"{what}: cannot load ({type(err).__name__}{': ' + msg if msg else ''})") from None
