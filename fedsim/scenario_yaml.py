"""Reading scenario YAML defensively: safe tags only, bounded size, no duplicate keys.

:func:`load_yaml` is ``yaml.safe_load`` with four changes, each refusing input that used to run
out of memory, crash, or mean something other than what it says:

- nesting deeper than ``MAX_YAML_DEPTH`` is refused while composing (no ``RecursionError``);
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
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .limits import MAX_INT_LITERAL, MAX_YAML_DEPTH, MAX_YAML_NODES

__all__ = ["YamlInputError", "load_yaml", "read_regular_file"]

_BOOL = "tag:yaml.org,2002:bool"
_MERGE = "tag:yaml.org,2002:merge"


class YamlInputError(ValueError):
    """YAML refused by :func:`load_yaml`; ``str(err)`` is ``line N: problem``."""


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> node count with aliases expanded

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise _error(event.start_mark, f"alias *{event.anchor} refers to a node that contains it")
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _error(mark, f"nested deeper than {MAX_YAML_DEPTH} levels")
        node = super().compose_node(parent, index)
        self._depth -= 1
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._sizes[id(c)] for c in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        if size > MAX_YAML_NODES:
            raise _error(mark, f"expands to more than {MAX_YAML_NODES:,} nodes (aliases included)")
        self._sizes[id(node)] = size
        return node

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen = set()
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != _MERGE:
                if (key.tag, key.value) in seen:
                    raise _error(key.start_mark, f"duplicate key {key.value!r}")
                seen.add((key.tag, key.value))
        return node

    def construct_yaml_int(self, node):
        if len(node.value) > MAX_INT_LITERAL:
            raise _error(node.start_mark, f"integer longer than {MAX_INT_LITERAL} characters")
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _error(mark, problem: str) -> YamlInputError:
    return YamlInputError(f"line {mark.line + 1}: {problem}")


def load_yaml(text: str) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, with the limits in the module docstring.

    Raises:
        YamlInputError: a limit was hit (one line, with the line number).
        yaml.YAMLError: the text is not YAML.
    """
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


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
