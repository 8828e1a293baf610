"""Reading scenario YAML defensively: safe tags only, bounded size, no duplicate keys.

:func:`load_yaml` reads what ``yaml.safe_load`` reads, with these changes, each refusing input
that used to run out of memory, crash, or mean something other than what it says:

- nesting deeper than ``MAX_YAML_DEPTH`` is refused while reading (no ``RecursionError``);
- a document whose nodes, counted with every alias expanded, exceed ``MAX_YAML_NODES`` is refused
  as soon as a node grows past the bound (an alias bomb is caught after reading its few hundred
  bytes), and so is an alias inside the node it names (a recursive structure);
- a mapping with the same key twice is refused, naming the key (merge keys ``<<`` may still be
  overridden, as YAML defines);
- only ``true`` / ``false`` (any case style YAML 1.2 allows) are booleans: ``yes``, ``no``,
  ``on``, ``off``, ``y``, ``n`` stay strings (YAML 1.1 read ``rounds: yes`` as 1);
- an integer literal longer than ``MAX_INT_LITERAL`` characters is refused before conversion
  (Python refuses decimal ones over 4,300 digits with a ValueError, and YAML 1.1's base-60
  integers ``1:00:00:...`` take quadratic time).

Speed (issue 28 item 10): PyYAML's own loader composes a node object per value in pure Python
(a 999,000-entry ``system.speed`` list took 26-140 s and 0.8 GB). Here libyaml's parser (PyYAML's
``CParser``, the pure-Python parser where libyaml is missing) only produces the events, and
:class:`_Builder` turns them straight into Python values, resolving and converting each scalar
as PyYAML's ``SafeLoader`` does (its regular expressions and constructors) with fast paths for
plain decimal numbers and strings. Merge keys follow the merge-key spec (yaml.org/type/merge.html):
the first merged mapping that has a key gives its value, the mapping's own keys override merged
ones (PyYAML 6 keeps the first only when the key strings happen to be one object).
tests/test_yaml_loader.py compares it with PyYAML's ``SafeLoader`` on random documents.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.composer import ComposerError
from yaml.events import (
    AliasEvent, DocumentEndEvent, DocumentStartEvent, MappingEndEvent, MappingStartEvent, ScalarEvent,
    SequenceEndEvent, SequenceStartEvent, StreamEndEvent, StreamStartEvent,
)
from yaml.nodes import ScalarNode

from .limits import MAX_INT_LITERAL, MAX_YAML_DEPTH, MAX_YAML_NODES

__all__ = ["YamlInputError", "load_yaml", "read_regular_file", "RESOLVERS"]

_TAG = "tag:yaml.org,2002:"
_BOOL, _MERGE, _VALUE = _TAG + "bool", _TAG + "merge", _TAG + "value"
_STR, _INT, _FLOAT, _NULL = _TAG + "str", _TAG + "int", _TAG + "float", _TAG + "null"
_SEQ, _MAP, _SET, _OMAP, _PAIRS = _TAG + "seq", _TAG + "map", _TAG + "set", _TAG + "omap", _TAG + "pairs"
_SCALAR_TAGS = frozenset({_NULL, _BOOL, _INT, _FLOAT, _STR, _TAG + "binary", _TAG + "timestamp"})

#: Implicit scalar resolution: SafeLoader's resolvers, with YAML 1.2's booleans only.
RESOLVERS: dict[str, list] = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    RESOLVERS.setdefault(_first, []).append((_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")))
_WILDCARD = tuple((tag, rx.match) for tag, rx in RESOLVERS.get(None, ()))
_MATCHERS = {first: tuple((tag, rx.match) for tag, rx in resolvers) + _WILDCARD
             for first, resolvers in RESOLVERS.items() if first is not None}

try:  # libyaml's parser when PyYAML was built with it
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class YamlInputError(ValueError):
    """YAML refused by :func:`load_yaml`; ``str(err)`` is ``line N: problem``."""


def _error(mark, problem: str) -> YamlInputError:
    return YamlInputError(f"line {mark.line + 1}: {problem}")


_CONSTRUCTOR = SafeConstructor()


def _scalar(tag: str, value: str, event) -> Any:
    """The value of a scalar of ``tag`` (SafeConstructor's conversion; long integers refused)."""
    if tag == _STR:
        return value
    if tag == _FLOAT:
        return _CONSTRUCTOR.construct_yaml_float(ScalarNode(tag, value))
    if tag == _INT:
        if len(value) > MAX_INT_LITERAL:
            raise _error(event.start_mark, f"integer longer than {MAX_INT_LITERAL} characters")
        if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
            return int(value)
        return _CONSTRUCTOR.construct_yaml_int(ScalarNode(tag, value))
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return _CONSTRUCTOR.construct_yaml_bool(ScalarNode(tag, value))
    if tag in _SCALAR_TAGS:
        return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, ScalarNode(tag, value, event.start_mark))
    if tag in (_SEQ, _MAP, _SET, _OMAP, _PAIRS):
        raise ConstructorError(None, None, f"expected a collection for the tag {tag!r}, but found a scalar",
                               event.start_mark)
    raise ConstructorError(None, None, f"could not determine a constructor for the tag {tag!r}", event.start_mark)


_OPEN = object()  # an anchor whose node is still being read
_MERGE_KEY = object()  # a mapping's key << (its value is merged)


class _Frame:
    """An open sequence or mapping: its items so far and its node count (aliases expanded)."""

    __slots__ = ("mapping", "tag", "anchor", "mark", "size", "items", "key", "has_key", "seen", "merges")

    def __init__(self, mapping: bool, tag: str, anchor, mark):
        self.mapping, self.tag, self.anchor, self.mark = mapping, tag, anchor, mark
        self.size = 1
        self.items: list = []
        self.key = None
        self.has_key = False
        self.seen: set = set()
        self.merges: list = []


class _Builder:
    """Python values from a stream of YAML events, with the limits of the module docstring."""

    def __init__(self, parser):
        self.get = parser.get_event
        self.anchors: dict[str, tuple] = {}  # name -> (value, size, (tag, raw) of a scalar or None)

    def document(self) -> Any:
        get = self.get
        event = get()
        if not isinstance(event, StreamStartEvent):  # pragma: no cover - the parser always starts so
            raise ComposerError(None, None, "expected a stream", getattr(event, "start_mark", None))
        event = get()
        if isinstance(event, StreamEndEvent):
            return None
        if not isinstance(event, DocumentStartEvent):  # pragma: no cover
            raise ComposerError(None, None, "expected a document", event.start_mark)
        value = self._node()
        event = get()
        if not isinstance(event, DocumentEndEvent):  # pragma: no cover
            raise ComposerError(None, None, "expected the end of the document", event.start_mark)
        event = get()
        if not isinstance(event, StreamEndEvent):
            raise ComposerError("expected a single document in the stream", None, "but found another document",
                                event.start_mark)
        return value

    def _node(self) -> Any:
        """Read one node (the document's root) and everything in it, without recursion."""
        get, anchors, matchers, wildcard = self.get, self.anchors, _MATCHERS, _WILDCARD
        max_depth, max_nodes = MAX_YAML_DEPTH, MAX_YAML_NODES  # module globals: tests lower them
        stack: list[_Frame] = []
        frame: _Frame | None = None  # stack[-1]
        while True:
            event = get()
            kind = type(event)
            if kind is ScalarEvent:
                if len(stack) >= max_depth:
                    raise _error(event.start_mark, f"nested deeper than {max_depth} levels")
                tag, raw = event.tag, event.value
                if tag is None or tag == "!":
                    tag = _STR
                    if event.implicit[0]:
                        for t, match in matchers.get(raw[:1], wildcard):
                            if match(raw):
                                tag = t
                                break
                if tag == _FLOAT and ":" not in raw and "_" not in raw and raw[-1] not in "fFnN":  # plain decimal
                    value = float(raw)
                elif tag == _STR:
                    value = raw
                elif (tag == _MERGE or tag == _VALUE) and frame is not None and frame.mapping and not frame.has_key:
                    value = raw  # a merge key << or a value key =: kept as written, resolved by the mapping
                else:
                    value = _scalar(tag, raw, event)
                if event.anchor is not None:
                    self._anchor(event, (value, 1, (tag, raw)))
                if frame is None:
                    return value
                if not frame.mapping:  # the common case: an entry of a sequence
                    frame.size += 1
                    if frame.size > max_nodes:
                        raise _error(frame.mark, f"expands to more than {max_nodes:,} nodes (aliases included)")
                    frame.items.append(value)
                    continue
                size, key_id = 1, (tag, raw)
            elif kind is AliasEvent:
                target = anchors.get(event.anchor)
                if target is None:
                    raise ComposerError(None, None, f"found undefined alias {event.anchor!r}", event.start_mark)
                if target is _OPEN:
                    raise _error(event.start_mark, f"alias *{event.anchor} refers to a node that contains it")
                value, size, key_id = target
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                if len(stack) >= max_depth:
                    raise _error(event.start_mark, f"nested deeper than {max_depth} levels")
                mapping = kind is MappingStartEvent
                tag = event.tag
                if tag is None or tag == "!":
                    tag = _MAP if mapping else _SEQ
                if event.anchor is not None:
                    self._anchor(event, _OPEN)
                frame = _Frame(mapping, tag, event.anchor, event.start_mark)
                stack.append(frame)
                continue
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                done = stack.pop()
                frame = stack[-1] if stack else None
                value = _collection(done)
                size, key_id = done.size, None
                if done.anchor is not None:
                    anchors[done.anchor] = (value, size, None)
            else:  # pragma: no cover - the parser emits nothing else inside a document
                raise ComposerError(None, None, f"unexpected {kind.__name__}", getattr(event, "start_mark", None))
            if frame is None:
                return value
            frame.size += size
            if frame.size > max_nodes:
                raise _error(frame.mark, f"expands to more than {max_nodes:,} nodes (aliases included)")
            if not frame.mapping:
                frame.items.append(value)
            elif not frame.has_key:
                tag = key_id[0] if key_id is not None else None
                if key_id is not None and tag != _MERGE:
                    if key_id in frame.seen:
                        raise _error(event.start_mark, f"duplicate key {key_id[1]!r}")
                    frame.seen.add(key_id)
                frame.key = _MERGE_KEY if tag == _MERGE else key_id[1] if tag == _VALUE else value
                frame.has_key = True
            else:
                if frame.key is _MERGE_KEY:
                    frame.merges.append((value, event.start_mark))
                else:
                    frame.items.append((frame.key, value, event.start_mark))
                frame.key, frame.has_key = None, False

    def _anchor(self, event, entry) -> None:
        if event.anchor in self.anchors:
            raise ComposerError(f"found duplicate anchor {event.anchor!r}", None, "second occurrence",
                                event.start_mark)
        self.anchors[event.anchor] = entry


def _collection(frame: _Frame) -> Any:
    """The value of a finished sequence or mapping of ``frame.tag`` (SafeConstructor's types)."""
    tag = frame.tag
    if not frame.mapping:
        if tag == _SEQ:
            return frame.items
        if tag in (_OMAP, _PAIRS):
            out = []
            for item in frame.items:
                if not isinstance(item, dict) or len(item) != 1:
                    raise ConstructorError(None, None, "expected a single-item mapping in an ordered map or pairs",
                                           frame.mark)
                out.append(next(iter(item.items())))
            return out
        raise ConstructorError(None, None, f"could not determine a constructor for the tag {tag!r} of a sequence",
                               frame.mark)
    if tag not in (_MAP, _SET):
        raise ConstructorError(None, None, f"could not determine a constructor for the tag {tag!r} of a mapping",
                               frame.mark)
    data: dict = {}
    for merged, mark in frame.merges:
        sources = merged if isinstance(merged, list) else [merged]
        for source in sources:
            if not isinstance(source, dict):
                raise ConstructorError("while constructing a mapping", frame.mark,
                                       "expected a mapping or list of mappings for merging", mark)
            for k, v in source.items():
                if k not in data:
                    data[k] = v
    for key, value, mark in frame.items:
        if not isinstance(key, Hashable):
            raise ConstructorError("while constructing a mapping", frame.mark, "found unhashable key", mark)
        data[key] = value
    return set(data) if tag == _SET else data


def load_yaml(text: str) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, with the limits in the module docstring.

    Raises:
        YamlInputError: a limit was hit (one line, with the line number).
        yaml.YAMLError: the text is not YAML.
    """
    parser = _Parser(text)
    try:
        return _Builder(parser).document()
    except yaml.MarkedYAMLError as err:
        # libyaml looks ahead through a flow collection (could it be a key?) and stops at its own
        # nesting bound (1,000) before the first event: the same refusal as ours
        if "maximum nesting depth" in str(err.problem) and err.problem_mark is not None:
            raise _error(err.problem_mark, f"nested deeper than {MAX_YAML_DEPTH} levels") from None
        raise
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so a FIFO
    never blocks, a device (``/dev/zero``) is never read, and a file swapped after a check cannot
    slip through.

    Raises:
        YamlInputError: not a regular file, or larger than ``limit``.
        OSError: it cannot be opened or read (``FileNotFoundError`` when missing).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise YamlInputError("not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise YamlInputError(f"larger than {limit:,} bytes")
    return data
