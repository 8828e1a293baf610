"""Scenario loading under random input: never a traceback, always exit 0 or 2 with one line."""

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsim.cli import main
from fedsim.scenario import Scenario

SECTIONS = {
    name: list(field.annotation.model_fields) if hasattr(field.annotation, "model_fields") else []
    for name, field in Scenario.model_fields.items()
}
KEYS = sorted({k for ks in SECTIONS.values() for k in ks} | set(SECTIONS) | {"dist", "low", "high", "model"})

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["window", "wait", "deadline", "async", "fednova", "quadratic", "synthetic", "uniform",
                     "lognormal", "randint", "markov", "always", "auto", "", "x" * 3]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12,
)
trees = st.dictionaries(st.sampled_from(sorted(SECTIONS)), values, max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees)
def test_random_trees_exit_0_or_2(tree, tmp_path, capsys):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(tree))
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code in (0, 2), out.err
    assert "Traceback" not in out.err
    if code == 2:
        assert len(out.err.strip().splitlines()) == 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_random_text_exit_0_or_2(text, tmp_path, capsys):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text)
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code in (0, 2), out.err
    assert "Traceback" not in out.err


def test_unsafe_yaml_tags_rejected(tmp_path, capsys):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    assert main(["validate", str(path)]) == 2
    assert "pwned" not in capsys.readouterr().out


GOOD = {
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 1.0]]},
    "round": {"policy": "window", "window": 10.0},
    "system": {"speed": [1.0, 2.0]},
}
PATHS = [f"{s}.{k}" for s, ks in SECTIONS.items() for k in ks] + list(SECTIONS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
def test_mutated_valid_scenario_exit_0_or_2(changes, tmp_path, capsys):
    import copy

    raw = copy.deepcopy(GOOD)
    for path, value in changes:
        node = raw
        parts = path.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[parts[-1]] = value
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(raw))
    code = main(["validate", str(f)])
    out = capsys.readouterr()
    assert code in (0, 2), out.err
    if code == 2:
        assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
