"""The mechanism behind every named piece: :class:`Registry` (names -> pieces of one kind) and
:class:`RegistryError`. The registries themselves, one per kind, are :mod:`fedsim.registries`.

Registries are the one way a named piece (model, dataset, algorithm, algorithm part) enters fedsim.

A scenario file only *names* pieces (``model: {name: my_cnn}``); the name must have been registered
from Python (``fedsim.register_model``), by an installed plug-in (entry-point group
``fedsim.plugins``) or by a module given with ``--plugin``. fedsim's built-ins register through
these same registries. Reading YAML never imports anything: a lazy entry (``"module:attribute"``)
is only ever written by Python code, and resolved on first :meth:`Registry.get`.

Each name records who registered it (:meth:`Registry.registrant`): ``fedsim`` for the built-ins,
the plug-in being loaded (``distribution NAME VERSION (entry point E)``, ``plugin module M``;
:func:`registering_as`), else the Python module that called :meth:`Registry.register`.

Errors are one line: an unknown name lists the known ones; a second registration of a name names
the earlier registrant and the new one.
"""

from __future__ import annotations

import importlib
import re
import sys
from contextlib import contextmanager
from typing import Any, Callable, Generic, Iterator, TypeVar

from .errors import ScenarioError

__all__ = ["Registry", "RegistryError", "registering_as", "current_registrant", "BUILTIN"]

T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")

#: The registrant of fedsim's own pieces.
BUILTIN = "fedsim"
#: Who registers now, innermost last: the plug-ins being loaded (:func:`registering_as`).
_LOADING: list[str] = []
#: Modules whose frames are fedsim's registration machinery, not the registrant.
_MACHINERY = frozenset({__name__, "fedsim.api"})


@contextmanager
def registering_as(who: str) -> Iterator[None]:
    """Within the block, registrations are recorded as made by ``who`` (a plug-in being loaded)."""
    _LOADING.append(who)
    try:
        yield
    finally:
        _LOADING.pop()


def current_registrant() -> str:
    """Who is registering now: the plug-in being loaded, else the module calling the registry
    (``fedsim`` for fedsim's own modules, ``module NAME`` for any other)."""
    if _LOADING:
        return _LOADING[-1]
    frame = sys._getframe(1)
    module = ""
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module not in _MACHINERY:
            break
        frame = frame.f_back
    return BUILTIN if module == "fedsim" or module.startswith("fedsim.") else f"module {module or '?'}"


class RegistryError(ScenarioError):
    """A bad registration (invalid or duplicate name, unresolvable lazy target): one line."""


class _Lazy:
    __slots__ = ("target",)

    def __init__(self, target: str):
        self.target = target


class Registry(Generic[T]):
    """Names -> pieces of one kind.

    Args:
        kind: What the pieces are, for messages (``"model"``).
        path: The scenario field that names them, for messages (``"model.name"``).
    """

    def __init__(self, kind: str, path: str):
        self.kind = kind
        self.path = path
        self._items: dict[str, Any] = {}
        self._by: dict[str, str] = {}
        self._checks: dict[str, Callable[[Any], None]] = {}

    def register(self, name: str, obj: T | str | None = None, *, replace: bool = False,
                 check: Callable[[Any], None] | None = None) -> Any:
        """Register ``obj`` under ``name`` (returns it); without ``obj``, a decorator.

        ``obj`` may be a ``"package.module:attribute"`` string (or ``"package.module:MAPPING[key]"``,
        one entry of a mapping), imported on first use (how the built-ins avoid importing torch to
        validate a scenario). A name registered twice is an error naming both registrants
        (:func:`current_registrant`) unless ``replace`` is true.

        ``check(piece)`` raises ``ValueError`` (its message one line) when ``piece`` is not a piece
        of this kind: run here on an object, and on a lazy target when :meth:`get` loads it; its
        failure is a :class:`RegistryError` naming the piece.
        """
        if obj is None:
            return lambda o: self.register(name, o, replace=replace, check=check)
        if not isinstance(name, str) or not _NAME.match(name):
            raise RegistryError(f"{self.kind} name {name!r}: use letters, digits, '_', '.', '-' (at most 64, not starting with a digit)")
        who = current_registrant()
        if name in self._items and not replace:
            raise RegistryError(f"{self.kind} {name!r} is already registered by {self._by.get(name, '?')}, "
                                f"not again by {who} (replace=True replaces it)")
        if isinstance(obj, str):
            if ":" not in obj:
                raise RegistryError(f"{self.kind} {name!r}: a lazy target is 'module:attribute', got {obj!r}")
            item: Any = _Lazy(obj)
        else:
            self._check(name, obj, check)
            item = obj
        self._items[name] = item
        self._by[name] = who
        if check is None:
            self._checks.pop(name, None)
        else:
            self._checks[name] = check
        return obj

    def _check(self, name: str, obj: Any, check: Callable[[Any], None] | None) -> None:
        if check is None:
            return
        try:
            check(obj)
        except ValueError as err:
            raise RegistryError(f"{self.kind} {name!r}: {str(err).splitlines()[0] if str(err) else 'refused'}") from None

    def registrant(self, name: str) -> str | None:
        """Who registered ``name`` (``fedsim`` for the built-ins; None when it is not registered)."""
        return self._by.get(name)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a no-op when it is not registered)."""
        self._items.pop(name, None)
        self._by.pop(name, None)
        self._checks.pop(name, None)

    def get(self, name: str) -> T:
        """The piece registered as ``name``.

        Raises:
            ScenarioError: ``name`` is unknown (one line naming the field and the known names).
            RegistryError: a lazy target cannot be imported.
        """
        try:
            item = self._items[name]
        except (KeyError, TypeError):
            raise ScenarioError(f"{self.path}: unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None
        if isinstance(item, _Lazy):
            module, _, attr = item.target.partition(":")
            attr, _, key = attr.partition("[")  # "module:MAPPING[key]": one entry of a mapping
            try:
                item = getattr(importlib.import_module(module), attr)
                if key:
                    item = item[key.rstrip("]")]
            except (ImportError, AttributeError, KeyError) as err:
                raise RegistryError(f"{self.kind} {name!r}: cannot load {item.target} ({err})") from None
            self._check(name, item, self._checks.get(name))
            self._items[name] = item
        return item

    def loaded(self, name: str) -> Any:
        """The piece registered as ``name`` if it is already an object (not a lazy target), else None."""
        item = self._items.get(name)
        return None if item is None or isinstance(item, _Lazy) else item

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self._items))

    def check(self, name: str) -> str:
        """``name`` if registered (nothing is imported), else the :meth:`get` error."""
        if name not in self._items:
            self.get(name)
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self.names())})"
