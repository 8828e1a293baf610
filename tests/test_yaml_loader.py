"""fedsim's YAML loader (libyaml's events -> values, issue 28 item 10) reads what PyYAML's SafeLoader
reads: compared on random documents, tags, anchors and merge keys, against PyYAML's own loader
with YAML 1.2's booleans (the reference below, an independent implementation: PyYAML's composer
and constructor over the same libyaml parser)."""

import math
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedsim.scenario_yaml as sy
from fedsim.scenario_yaml import YamlInputError, load_yaml


class _Reference(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (over libyaml's parser, as fedsim's: the two parsers differ on a few
    odd texts such as ``{a? }``), booleans true / false only (what fedsim reads)."""


_Reference.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Reference.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))


def reference(text: str):
    return yaml.load(text, Loader=_Reference)


def same(a, b) -> bool:
    """Equal values, NaN equal to NaN, and the same types (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


SCALARS = ["1", "-2", "+3", "0", "007", "0x1F", "0b101", "1_000", "1:30", "190:20:30", "1.5", "-1.", ".5", "1.0e+5",
           "1e5", "1.5E-3", "6.8523015e+5", "685.230_15e+03", "190:20:30.15", ".inf", "-.Inf", "+.INF", ".nan", ".NaN",
           "~", "null", "Null", "", "true", "False", "TRUE", "yes", "no", "on", "off", "y", "n", "2001-12-14",
           "2001-12-14t21:59:43.10-05:00", "a b", "'quoted'", '"dq \\t"', "=", "'1'", '"1.5"', "!!str 1", "!!int '7'",
           "!!float 3", "!!bool yes", "!!null ''", "!!binary aGVsbG8=", "!!timestamp 2002-12-14", "x: y", "é",
           "-", "0o17", "1__2", "._5", "12e03", "1.2.3", "1__0.5", "1._5", "1_.5", "1.e+5", "_1.5", "1:_5.5"]


@pytest.mark.parametrize("scalar", SCALARS)
def test_every_kind_of_scalar_reads_as_pyyaml_reads_it(scalar):
    for text in (f"a: {scalar}\n", f"- {scalar}\n", f"[{scalar}]\n" if ":" not in scalar and "-" != scalar else "[]"):
        try:
            want = reference(text)
        except yaml.YAMLError:
            with pytest.raises((yaml.YAMLError, YamlInputError)):
                load_yaml(text)
            continue
        assert same(load_yaml(text), want), text


plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=6), st.sampled_from(SCALARS)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=plain, flow=st.sampled_from([None, True, False]))
def test_random_documents_read_as_pyyaml_reads_them(value, flow):
    text = yaml.safe_dump(value, default_flow_style=flow, allow_unicode=True)
    assert same(load_yaml(text), reference(text))


snippets = st.lists(st.sampled_from(
    ["a", "b", ": ", "- ", "[", "]", "{", "}", ", ", "\n", "  ", "&x ", "*x", "&y ", "*y", "<<: ", "? ", "!!str ",
     "!!set ", "!!omap ", "!!pairs ", "!!map ", "!!seq ", "'q'", "1", "1.5", "true", "~", "#c", "--- ", "...", "|\n  t",
     "!foo "]), max_size=25).map("".join)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=snippets)
def test_random_text_reads_or_fails_as_pyyaml(text):
    """Random YAML-ish text: the same value, or both refuse (fedsim refuses more: duplicate keys,
    aliases inside their own node, odd merges)."""
    try:
        want = reference(text)
    except (yaml.YAMLError, RecursionError, TypeError, ValueError):
        with pytest.raises((yaml.YAMLError, YamlInputError)):
            load_yaml(text)
        return
    try:
        got = load_yaml(text)
    except YamlInputError as err:
        assert re.search("duplicate key|refers to a node that contains it", str(err)), (text, err)
        return
    except yaml.YAMLError as err:  # merges PyYAML 6 reads from odd nodes (a !!set or !!omap merged)
        assert "merg" in str(err) or "mapping" in str(err), (text, err)
        return
    assert same(got, want) or "<<" in text, text  # merges: the spec's order (test_anchors_aliases_and_merges)


def test_anchors_aliases_and_merges():
    text = ("base: &b {window: 5.0, policy: window}\nextra: &e {seed: 1, window: 9.0}\n"
            "r1: {<<: *b, window: 7.0}\nr2: {<<: [*b, *e]}\nr3: {<<: *b, <<: *e}\nl: &l [1, 2]\nm: [*l, *l]\n")
    got = load_yaml(text)
    want = reference(text)
    assert got["r1"] == want["r1"] and got["l"] == want["l"] and got["m"] == want["m"]
    assert got["r1"] == {"window": 7.0, "policy": "window"}
    # the first merged mapping that has a key gives it (the merge-key spec, yaml.org/type/merge.html;
    # PyYAML 6 keeps the first only when the key strings are one object, e.g. interned 1-letter keys)
    assert got["r2"] == {"window": 5.0, "policy": "window", "seed": 1}
    assert got["r3"] == got["r2"]


@pytest.mark.parametrize("text, message", [
    ("a: *nope\n", "found undefined alias 'nope'"),
    ("a: &x 1\nb: &x 2\n", "found duplicate anchor 'x'"),
    ("a: 1\n---\nb: 2\n", "expected a single document"),
    ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ("a: !!python/name:os.system\n", "could not determine a constructor"),
    ("a: {<<: 3}\n", "expected a mapping or list of mappings for merging"),
    ("? [1, 2]\n: x\n", "found unhashable key"),
    ("a: !!map x\n", "expected a collection"),
    ("a: !!str [1]\n", "could not determine a constructor"),
])
def test_what_is_refused(text, message):
    with pytest.raises((yaml.YAMLError, YamlInputError), match=re.escape(message)):
        load_yaml(text)


def test_an_empty_document_is_none():
    assert load_yaml("") is None and load_yaml("# a comment\n") is None and load_yaml("---\n") is None


def test_limits_are_read_when_called(monkeypatch):
    monkeypatch.setattr(sy, "MAX_YAML_DEPTH", 3)
    assert load_yaml("a: [1]") == {"a": [1]}
    with pytest.raises(YamlInputError, match="line 1: nested deeper than 3 levels"):
        load_yaml("a: [[1]]")


def test_a_long_list_is_read_in_linear_time():
    """999,000 numbers (issue 28 item 10): PyYAML's pure-Python loader took 26 s and more; the
    events take about a microsecond each."""
    import time

    text = "speed: [" + ", ".join(["1.5", "2", "0.25"] * 333_000) + "]\n"
    t = time.perf_counter()
    got = load_yaml(text)
    assert time.perf_counter() - t < 10
    assert len(got["speed"]) == 999_000 and got["speed"][:3] == [1.5, 2, 0.25]


def test_dump_scenario_writes_what_pyyaml_writes():
    """dump_scenario uses libyaml's emitter: byte for byte yaml.safe_dump's text of the same
    values on every scenario (stored scenario.yaml files, and --resume's comparison with them,
    are unchanged)."""
    from pathlib import Path

    from fedsim.scenario import dump_scenario
    from fedsim.scenario.loading import load_scenario_raw
    from fedsim.scenario.variants import expand_variants

    files = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("**/*.yaml"))
    assert len(files) > 10
    for f in files:
        sc, raw = load_scenario_raw(f)
        for _, v in expand_variants(sc, raw, f.parent):
            text = dump_scenario(v)
            assert yaml.safe_dump(yaml.safe_load(text), sort_keys=False) == text, f
