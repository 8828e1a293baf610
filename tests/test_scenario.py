"""Scenario loading: defaults, overrides, and one-line exit-2 errors naming the field."""

import pytest
import yaml

from fedsim.cli import main
from fedsim.scenario import ScenarioError, dump_scenario, load_scenario, parse_scenario

GOOD = {
    "name": "t",
    "rounds": 2,
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]},
    "system": {"speed": [1.0, 2.0, 3.0], "latency": 0.5},
    "round": {"policy": "window", "window": 10.0},
    "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 1},
}


def _with(**over):
    raw = yaml.safe_load(yaml.safe_dump(GOOD))
    for key, value in over.items():
        node = raw
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return raw


def test_defaults_filled_and_round_trip():
    sc = parse_scenario(GOOD)
    assert sc.eval.every == 1 and sc.engine.clients_per_batch == "auto"
    again = parse_scenario(yaml.safe_load(dump_scenario(sc)))
    assert again == sc


def test_set_overrides_parse_yaml_values(write_yaml):
    path = write_yaml(GOOD)
    sc = load_scenario(path, ["algorithm.lr=0.5", "round.window=12", "system.speed=[1, 1, 1]", "name=x"])
    assert sc.algorithm.lr == 0.5 and sc.round.window == 12.0
    assert sc.system.speed == (1.0, 1.0, 1.0) and sc.name == "x"


def test_frozen():
    sc = parse_scenario(GOOD)
    with pytest.raises(Exception):
        sc.rounds = 3


@pytest.mark.parametrize(
    "raw, expected",
    [
        (_with(system__speed=0), "system.speed: must be > 0"),
        (_with(system__speed=[1.0, -1.0, 2.0]), "system.speed: must be > 0"),
        (_with(system__speed={"dist": "uniform", "low": 0, "high": 2}), "system.speed: must be > 0"),
        (_with(round__window=1.0), "round.window: must be longer than two latencies"),
        (_with(round__clients_per_round=4), "round.clients_per_round: must be <= data.clients (3)"),
        (_with(algorithm__lr=0), "algorithm.lr: must be > 0"),
        (_with(algorithm__lr=-0.1), "algorithm.lr: must be > 0"),
        (_with(algorithm__colour="red"), "algorithm.colour: unknown key"),
        (_with(bogus=1), "bogus: unknown key"),
        (_with(rounds="many"), "rounds: Input should be a valid integer"),
        (_with(algorithm__name="fedfoo"), "algorithm.name: unknown algorithm 'fedfoo'"),
        (_with(round__policy="wait"), "round.local_steps: policy wait needs local_steps or local_epochs"),
        (_with(system__speed=[1.0, 2.0]), "system.speed: needs one speed per client (3)"),
        (_with(algorithm__momentum=0.9, algorithm__solver="adam"), "algorithm.momentum:"),
    ],
)
def test_bad_input_one_line_exit_2(raw, expected, write_yaml, capsys):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(expected), str(err.value)
    path = write_yaml(raw)
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected)
    assert "Traceback" not in out.err


def test_yaml_syntax_error(write_yaml, capsys):
    path = write_yaml("name: x\nrounds: [1, 2\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "YAML syntax error" in err[0] and str(path) in err[0]


def test_missing_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such scenario file" in err[0]


def test_bad_set_argument(write_yaml, capsys):
    path = write_yaml(GOOD)
    assert main(["validate", str(path), "--set", "algorithm.lr"]) == 2
    assert "--set algorithm.lr: expected dotted.key=value" in capsys.readouterr().err
    assert main(["validate", str(path), "--set", "algorithm.lr=-1"]) == 2
    assert "algorithm.lr: must be > 0" in capsys.readouterr().err


def test_unknown_command_exit_2(capsys):
    assert main(["fly"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_validate_ok(write_yaml, capsys):
    assert main(["validate", str(write_yaml(GOOD))]) == 0
    assert "ok" in capsys.readouterr().out


def test_variants_expand(write_yaml):
    from fedsim.scenario import expand_variants, read_yaml

    raw = _with(variants={"a": {"algorithm.name": "fedavg"}, "b": {"round.policy": "wait", "round.local_steps": 3}})
    path = write_yaml(raw)
    sc = load_scenario(path)
    vs = expand_variants(sc, read_yaml(path))
    assert [v for v, _ in vs] == ["a", "b"]
    assert vs[0][1].algorithm.name == "fedavg" and vs[0][1].name == "t/a"
    assert vs[1][1].round.policy == "wait" and vs[1][1].round.local_steps == 3 and vs[1][1].variants is None


def test_bad_variant_names_field(write_yaml):
    from fedsim.scenario import expand_variants, read_yaml

    raw = _with(variants={"a": {"algorithm.lr": 0}})
    path = write_yaml(raw)
    with pytest.raises(ScenarioError, match=r"^variants\.a\.algorithm\.lr: must be > 0"):
        expand_variants(load_scenario(path), read_yaml(path))


def test_paths_resolve_relative_to_scenario_file(tmp_path):
    sub = tmp_path / "exp"
    sub.mkdir()
    (sub / "t.csv").write_text("client,start,end,online,speed\n0,0,10,1,2.0\n1,0,10,1,3.0\n2,0,10,1,1.0\n")
    raw = _with(data__root="cache", system__trace="t.csv")
    del raw["system"]["speed"]
    path = sub / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    sc = load_scenario(path)
    assert sc.data.root == str(sub / "cache")
    assert sc.system.trace == str(sub / "t.csv")
    assert f"trace: {sub / 't.csv'}" in dump_scenario(sc)


def test_validate_reports_bad_trace(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("client,start,end,online,speed\n0,0,10,1,2.0\n0,5,12,1,2.0\n")
    raw = _with(system__trace="t.csv")
    del raw["system"]["speed"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "t.csv" in err[0] and "line 3" in err[0]


def test_set_into_a_variant_keeps_dotted_key(write_yaml):
    from fedsim.scenario import expand_variants, read_yaml, apply_overrides

    raw = _with(variants={"a": {"algorithm.name": "fedprox"}})
    path = write_yaml(raw)
    sets = ["variants.a.algorithm.mu=0.5"]
    sc = load_scenario(path, sets)
    (_, v), = expand_variants(sc, apply_overrides(read_yaml(path), sets))
    assert v.algorithm.mu == 0.5 and v.algorithm.lr == 0.05 and v.algorithm.batch_size == 1


@pytest.mark.parametrize(
    "raw, expected",
    [
        (_with(algorithm__lr=float("inf")), "algorithm.lr: Input should be a finite number"),
        (_with(system__window=float("nan")), "system.window: unknown key"),
        (_with(round__window=float("inf")), "round.window: Input should be a finite number"),
        (_with(data__centers=[[1.0, float("nan")], [0.0, 1.0], [1.0, 1.0]]), "data.centers"),
        ({**_with(), "data": {"name": "quadratic", "weights": [1, 2, 3]}}, "data.weights: need one weight per client (10)"),
        (_with(data__weights=[1, 2]), "data.weights: need one weight per client (3)"),
        (_with(algorithm__name="fedprox", algorithm__mu=20.0), "algorithm.mu: lr * mu must be < 1"),
        (_with(algorithm__normalize_async=True), "algorithm.normalize_async: only for asynchronous algorithms"),
        (_with(round__local_steps={"dist": "constant", "value": 2.5}), "round.local_steps: a constant number"),
        ({**_with(), "data": {"name": "synthetic"}, "model": {"name": "cnn"}, "system": {}},
         "model.name: cnn needs image data"),
        ({**_with(), "data": {"name": "digits"}, "model": {"name": "vgg11"}, "system": {}},
         "model.name: vgg11 needs images of at least 32x32"),
    ],
)
def test_more_bad_input(raw, expected):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(expected), str(err.value)


@pytest.mark.parametrize(
    "sets, expected",
    [
        (["data.clients=5000"], "data.clients: cannot split"),
        (["data.partition.name=dirichlet", "data.partition.min_size=500"], "data.partition: dirichlet"),
    ],
)
def test_infeasible_data_exit_2(write_yaml, tmp_path, capsys, sets, expected):
    raw = {"name": "d", "rounds": 1, "data": {"name": "digits", "clients": 4}, "model": {"name": "logreg"},
           "round": {"policy": "wait", "local_steps": 1}}
    args = ["run", str(write_yaml(raw)), "--out", str(tmp_path / "o"), "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err
