"""docs/selection.md's reference of what a rule is handed and returns (issue 38 defect 4): the field
tables of ``Request``, ``Observations`` and ``Picked`` against the classes, and against the values
a rule is actually handed in a run (types, dtypes, read-only); the quoted messages against the
code."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import fedsim
from fedsim import registries
from fedsim.clock.feedback import SelectionError, SelectionFailed, Selector
from fedsim.clock.selection import Observations, Picked, Request, SelectionRule
from fedsim.selection.section import SelectionSection

DOC = (Path(__file__).resolve().parent.parent / "docs" / "selection.md").read_text()
ANNOTATION = {"int": "int", "float": "float", "int or None": "int | None", "bool": "bool"}
DTYPES = {"int64 array": "i8", "float64 array": "f8", "str array": "U"}  # numpy dtype.str without byte order


def table(after: str) -> list[tuple[str, str, str]]:
    """The rows ``| `field` | `type` | meaning |`` of the first table after the line starting ``after``."""
    text = DOC.split("\n" + after, 1)[1]
    block = text.split("\n\n", 2)[1]  # the table follows the heading line's paragraph
    return re.findall(r"^\| `(\w+)` \| `([^`]+)` \| (.+) \|$", block, flags=re.M)


def public(cls) -> list[str]:
    return [f.name for f in fields(cls) if not f.name.startswith("_")]


@pytest.mark.parametrize("cls, after", [(Request, "`Request` ("), (Observations, "`Observations` ("),
                                        (Picked, "`Picked(clients, counts, weights)` (")])
def test_each_table_lists_the_fields_in_order_with_their_types(cls, after):
    rows = table(after)
    assert [r[0] for r in rows] == public(cls)
    for name, typ, _ in rows:
        want = ANNOTATION.get(typ, "np.ndarray")
        assert typ in ANNOTATION or typ in DTYPES, typ
        assert {f.name: f.type for f in fields(cls)}[name] == want, name


@dataclass(frozen=True)
class Recorder(SelectionRule):
    uses_feedback: ClassVar[bool] = True

    def select(self, state, request):
        state.setdefault("request", request)
        state.setdefault("online", request.online())
        state.setdefault("is_online", request.is_online(request.online()))
        return state, Picked.of(request.online()[: request.k], request.p)

    def observe(self, state, obs):
        state.setdefault("obs", obs)
        return state


class RecorderSection(SelectionSection):
    def clock_value(self):
        return Recorder()


def _check(value, typ: str):
    if typ in DTYPES:
        code = value.dtype.str.lstrip("<>|=") if isinstance(value, np.ndarray) else ""
        assert code == DTYPES[typ] or (DTYPES[typ] == "U" and code.startswith("U")), (typ, value)
        assert not value.flags.writeable  # every array a rule is handed is read-only
    elif typ == "int or None":
        assert value is None or type(value) is int
    else:
        assert type(value) is {"int": int, "float": float, "bool": bool}[typ], (typ, type(value))


def test_a_rule_is_handed_what_the_tables_say():
    state = {}
    original_init = Recorder.init
    Recorder.init = lambda self, m, p, seed: state  # keep what the rule saw
    fedsim.register_selector("recorder", RecorderSection)
    try:
        fedsim.schedule({"data": {"name": "quadratic", "clients": 4}, "rounds": 2,
                         "round": {"policy": "wait", "local_steps": 1, "clients_per_round": 2,
                                   "selection": {"name": "recorder"}}})
    finally:
        registries.SELECTORS.unregister("recorder")
        Recorder.init = original_init
    req, obs = state["request"], state["obs"]
    for name, typ, _ in table("`Request` ("):
        _check(getattr(req, name), typ)
    for name, typ, _ in table("`Observations` ("):
        _check(getattr(obs, name), typ)
    assert "sorted, read-only\n`int64 array`" in DOC and "a `bool array`, one\nentry per id" in DOC
    _check(state["online"], "int64 array")
    assert state["is_online"].dtype == bool and state["is_online"].all()
    assert set(obs.status.tolist()) <= {"completed", "dropped", "failed"}
    assert "| `status` | `str array` | `completed`, `dropped` or `failed` per job |" in DOC
    assert obs.completed.dtype == bool and len(obs) == len(obs.client)


def test_quoted_messages_are_the_codes():
    quoted = re.search(r"refused \(`(Picked\.of: client ids must be integers[^`]*)`\)", DOC).group(1)
    with pytest.raises(ValueError) as err:
        Picked.of([0.5, 2.5], np.full(4, 0.25))
    assert str(err.value) == quoted

    @dataclass(frozen=True)
    class Raises(SelectionRule):
        def select(self, state, request):
            raise KeyError(3)

    example = re.search(r"\(`(round\.selection: my_rule\.select\(\) failed: [^`]*)`;", DOC).group(1)
    sel = Selector(Raises(), 2, np.array([0.5, 0.5]), 0, name="my_rule")
    with pytest.raises(SelectionFailed) as err:
        sel.pick(0, 0.0, 1, lambda: np.array([0, 1]))
    assert str(err.value) == example


def test_the_flags_are_class_variables_and_picked_is_three_arrays():
    assert not hasattr(SelectionRule, "__dataclass_fields__")  # the base holds no fields, only the flags
    assert (SelectionRule.uses_feedback, SelectionRule.uses_losses, SelectionRule.sync_only) == (False, False, False)
    assert "The base `SelectionRule` sets all three False" in DOC
    p = Picked(np.array([1]), np.array([1]), np.array([1.0]))
    assert public(Picked) == ["clients", "counts", "weights"] and p.weights.tolist() == [1.0]
