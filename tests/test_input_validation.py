"""Hostile and degenerate scenario input (issue 12): every case is exit 2 with one line, fast.

Expected messages and bounds are derived by hand from the rules in docs/reliability.md.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import fedsim.scenario_yaml as sy
from fedsim import limits
from fedsim.cli import main
from fedsim.scenario import ScenarioError, load_scenario, parse_scenario, read_yaml
from fedsim.scenario_yaml import YamlInputError, load_yaml
from fedsim.validate import check_device_available, check_name, check_target, parse_seeds

GOOD = {
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 1.0]]},
    "round": {"policy": "window", "window": 10.0},
    "system": {"speed": [1.0, 2.0]},
}


def _validate(tmp_path, text: str, *sets: str, capsys=None):
    """(exit code, stderr) of ``fedsim validate`` on ``text``."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    args = ["validate", str(path)]
    for s in sets:
        args += ["--set", s]
    code = main(args)
    err = capsys.readouterr().err if capsys is not None else ""
    return code, err


def _error(raw: dict) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(raw)
    return str(info.value)


def _with(**sections) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(GOOD))
    for dotted, value in sections.items():
        node = raw
        parts = dotted.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return raw


# --------------------------------------------------------------------------- 8: alias bombs
def _bomb(levels: int = 9, width: int = 9) -> str:
    # the classic "billion laughs": level k holds `width` aliases of level k-1 (9**9 leaves, ~650 bytes)
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast(tmp_path, capsys):
    text = _bomb()
    assert len(text) < 700
    t0 = time.perf_counter()
    code, err = _validate(tmp_path, text, capsys=capsys)
    assert code == 2
    assert time.perf_counter() - t0 < 5
    assert err.count("\n") == 1 and "expands to more than 1,000,000 nodes" in err


def test_node_count_includes_expanded_aliases(monkeypatch):
    # a: &x [1, 2, 3] -> the list is 1 + 3 nodes; b: [*x, *x] is 1 + 4 + 4 = 9; with the two keys
    # and the root mapping: 1 + (1 + 4) + (1 + 9) = 16 nodes.
    text = "a: &x [1, 2, 3]\nb: [*x, *x]\n"
    monkeypatch.setattr(sy, "MAX_YAML_NODES", 16)
    assert load_yaml(text) == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]]}
    monkeypatch.setattr(sy, "MAX_YAML_NODES", 15)
    with pytest.raises(YamlInputError, match="line 1: expands to more than 15 nodes"):
        load_yaml(text)


def test_recursive_alias_is_refused():
    with pytest.raises(YamlInputError, match="alias \\*a refers to a node that contains it"):
        load_yaml("a: &a [1, *a]\n")
    with pytest.raises(YamlInputError, match="alias \\*m refers to a node that contains it"):
        load_yaml("a: &m {b: *m}\n")


def test_ordinary_anchors_and_merge_keys_still_work():
    text = "base: &b {window: 5.0, policy: window}\nround:\n  <<: *b\n  window: 7.0\n"
    assert load_yaml(text) == {"base": {"window": 5.0, "policy": "window"}, "round": {"window": 7.0, "policy": "window"}}


def test_alias_bomb_in_set_value_is_refused(tmp_path, capsys):
    bomb = "{" + _bomb().replace("\n", ", ").rstrip(", ") + "}"
    code, err = _validate(tmp_path, yaml.safe_dump(GOOD), f"data.x={bomb}", capsys=capsys)
    assert code == 2 and err.startswith(f"--set data.x={bomb[:20]}") and "expands to more than" in err


def test_set_value_that_is_not_yaml_stays_a_string(tmp_path, capsys):
    # an undefined alias is a YAML error: the value is taken as text (then refused as a name)
    code, err = _validate(tmp_path, yaml.safe_dump(GOOD), "name=*x", capsys=capsys)
    assert code == 2 and err.startswith("name: '*x' is not a safe folder name")


@pytest.mark.parametrize("literal", ["1" * 5000, "1" + ":00" * 50000, "0x" + "f" * 101])
def test_long_integer_literals_are_refused_fast(tmp_path, capsys, literal):
    t0 = time.perf_counter()
    code, err = _validate(tmp_path, yaml.safe_dump(GOOD) + f"rounds: {literal}\n", capsys=capsys)
    assert code == 2 and err.strip().endswith("line 15: integer longer than 100 characters")
    assert time.perf_counter() - t0 < 5


def test_integer_literal_bound_is_exact():
    assert load_yaml("a: " + "1" * 100) == {"a": int("1" * 100)}
    with pytest.raises(YamlInputError, match="line 1: integer longer than 100 characters"):
        load_yaml("a: " + "1" * 101)


# --------------------------------------------------------------------------- 9: deep nesting
@pytest.mark.parametrize("text", ["a: " + "[" * 20000 + "]" * 20000, "a:\n" + "- " * 20000 + "x\n",
                                  "a: " + "{b: " * 20000 + "1" + "}" * 20000])
def test_deep_nesting_is_one_line(tmp_path, capsys, text):
    code, err = _validate(tmp_path, text, capsys=capsys)
    assert code == 2
    assert err.count("\n") == 1 and "nested deeper than 32 levels" in err and "Recursion" not in err


def test_depth_bound_is_exact():
    # the root mapping is level 1, each [ one more, the scalar inside the innermost one more:
    # "a: " + n brackets -> n + 2 levels
    assert load_yaml("a: " + "[" * 30 + "1" + "]" * 30) is not None  # 32 levels
    with pytest.raises(YamlInputError, match="nested deeper than 32 levels"):
        load_yaml("a: " + "[" * 31 + "1" + "]" * 31)  # 33 levels


def test_deep_dotted_set_key_is_refused(tmp_path, capsys):
    key = ".".join(["a"] * 20000)
    code, err = _validate(tmp_path, yaml.safe_dump(GOOD), f"{key}=1", capsys=capsys)
    assert code == 2 and "key nested deeper than 32 levels" in err


# --------------------------------------------------------------------------- 19: duplicates, bools, targets
def test_duplicate_keys_are_refused_naming_the_key(tmp_path, capsys):
    code, err = _validate(tmp_path, "rounds: 5\nseed: 1\nrounds: 6\n", capsys=capsys)
    assert code == 2 and err.strip() == f"{tmp_path / 's.yaml'}: line 3: duplicate key 'rounds'"
    code, err = _validate(tmp_path, "round:\n  window: 5\n  policy: window\n  window: 6\n", capsys=capsys)
    assert code == 2 and err.strip().endswith("line 4: duplicate key 'window'")


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "NO"])
def test_yaml11_booleans_are_strings(word):
    assert load_yaml(f"a: {word}") == {"a": word}


@pytest.mark.parametrize("word,value", [("true", True), ("True", True), ("TRUE", True), ("false", False),
                                        ("False", False), ("FALSE", False)])
def test_yaml12_booleans(word, value):
    assert load_yaml(f"a: {word}") == {"a": value}


def test_rounds_yes_is_not_one(tmp_path, capsys):
    code, err = _validate(tmp_path, yaml.safe_dump(GOOD) + "rounds: yes\n", capsys=capsys)
    assert code == 2 and err.startswith("rounds: Input should be a valid integer")


@pytest.mark.parametrize("key,value,path", [
    ("rounds", True, "rounds"),
    ("seed", False, "seed"),
    ("system__speed", True, "system.speed"),
    ("system__speed", [1.0, True], "system.speed"),
    ("round__window", True, "round.window"),
    ("system__latency", False, "system.latency"),
    ("algorithm__lr", True, "algorithm.lr"),
    ("engine__clients_per_batch", True, "engine.clients_per_batch"),
])
def test_booleans_are_not_numbers(key, value, path):
    shown = yaml.safe_dump(value, default_flow_style=True).strip().replace("\n...", "")
    assert _error(_with(**{key: value})) == f"{path}: must not be true/false (got {shown})"


def test_boolean_fields_still_take_yes_and_no():
    raw = _with(data__download="yes", eval__train_loss="no")
    sc = parse_scenario(raw)
    assert sc.data.download is True and sc.eval.train_loss is False


@pytest.mark.parametrize("target", [float("nan"), 2.0, 0.0, -0.5, 1.0000001, float("inf")])
def test_bad_targets_are_refused(target):
    with pytest.raises(ScenarioError, match=r"must be a test accuracy in \(0, 1\]"):
        check_target(target)


@pytest.mark.parametrize("target", [None, 1.0, 0.7, 1e-9])
def test_good_targets(target):
    assert check_target(target) == target


def test_compare_target_nan_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert main(["compare", str(path), "--target", "nan", "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.strip() == "--target nan: must be a test accuracy in (0, 1]"
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- 4: names
UNSAFE = ["../../x", "/abs", "a/b", "", "x" * 101, "a\0b", "a\nb", "a\tb", ".", "..", ".hidden", "-x",
          "a\\b", "a b", "caf\u00e9", "\u00b2", "a:b", "a*b"]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_refused(name):
    with pytest.raises(ScenarioError) as info:
        check_name(name, "name")
    assert str(info.value).startswith("name: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["quickstart", "a.b_c-1", "X" * 100, "0", "fednova_fig2_quadratic", "lr=0.1+x"])
def test_safe_names_accepted(name):
    assert check_name(name, "name") == name


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/../../b", "x" * 101, "a\0b", "..", "a//b", "ok/-x"])
def test_unsafe_scenario_name_exit_2_writes_nothing(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**GOOD, "name": name, "rounds": 1}))
    assert main(["run", "s.yaml", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("name: ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("vname,shown", [("../../../x", "../../../x"), ("a/b", "a/b"), ("..", ".."), ("", ""),
                                         ("v\0", "'v\\x00'"), ("a\nb", "'a\\nb'")])
def test_unsafe_variant_names_refused(tmp_path, capsys, vname, shown):
    raw = {**GOOD, "variants": {"ok": {"rounds": 2}, vname: {"rounds": 3}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"variants.{shown}: ") and err.count("\n") == 1


def test_names_must_be_strings(tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**GOOD, "name": 12}))
    with pytest.raises(ScenarioError, match="^name: Input should be a valid string$"):
        load_scenario(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**GOOD, "variants": {12: {"rounds": 2}}}))
    with pytest.raises(ScenarioError, match="^variants.12: must be a string$"):
        load_scenario(tmp_path / "s.yaml")


def test_names_with_slashes_are_relative_paths_of_safe_names(tmp_path):
    # fedsim names its variant and compare runs base/variant and base/cell/seedN, and their stored
    # scenario.yaml loads back; each part is a safe folder name, so no traversal or absolute path
    name = "base/fedavg-window-algorithm.lr=0.1/seed0"
    assert parse_scenario({**GOOD, "name": name}).name == name
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**GOOD, "name": name}))
    assert load_scenario(tmp_path / "s.yaml").name == name
    assert _error({**GOOD, "name": "a/../b"}) == "name: 'a/../b': part '..' is not a safe folder name " \
        "(use letters, digits, '.', '_', '=', '+', '-'; start with a letter or digit)"
    assert _error({**GOOD, "name": "/abs"}) == "name: '/abs': part '' is empty"
    assert _error({**GOOD, "name": "a/" + "x" * 101}).endswith("is longer than 100 characters")
    assert _error({**GOOD, "name": ""}) == "name: must not be empty"


# --------------------------------------------------------------------------- 11, 12: bounds
def test_speed_bounds_are_inclusive():
    hi, lo = limits.MAX_SPEED, limits.MIN_SPEED
    assert parse_scenario(_with(system__speed=[lo, hi], round__max_local_steps=10)).system.speed == (lo, hi)
    up = math.nextafter(hi, math.inf)
    assert _error(_with(system__speed=[1.0, up])) == "system.speed: must be in [1e-06, 1e+06]"
    assert _error(_with(system__speed=1e300)) == "system.speed: must be in [1e-06, 1e+06]"
    assert _error(_with(system__speed={"dist": "uniform", "low": 1, "high": 1e7})) == "system.speed: must be in [1e-06, 1e+06]"
    assert _error(_with(system__speed={"dist": "lognormal", "median": 2e6, "sigma": 0.5})) == "system.speed.median: must be in [1e-06, 1e+06]"
    assert _error(_with(system__speed={"dist": "lognormal", "median": 2, "sigma": 11})) == "system.speed.sigma: must be <= 10"
    assert _error(_with(system__slowdown={"dist": "uniform", "low": 1e-7, "high": 1})) == "system.slowdown: must be in [1e-06, 1e+06]"


def test_rounds_bound():
    assert parse_scenario(_with(rounds=limits.MAX_ROUNDS)).rounds == 10**7
    assert _error(_with(rounds=limits.MAX_ROUNDS + 1)) == "rounds: must be <= 10,000,000"
    assert _error(_with(rounds=sys.maxsize + 1)) == "rounds: must be <= 10,000,000"


def test_seed_bounds():
    assert parse_scenario(_with(seed=2**63 - 1)).seed == 2**63 - 1
    assert _error(_with(seed=2**63)) == "seed: must be <= 9,223,372,036,854,775,807"
    assert _error(_with(seed=-1)) == "seed: must be >= 0"
    assert _error(_with(data__seed=-5)) == "data.seed: must be >= 0"


def test_times_bounded():
    assert _error(_with(round__window=2e9)) == "round.window: must be <= 1e+09"
    wait = {"policy": "wait", "local_steps": 2}
    assert _error(_with(system__latency=1e10, round=wait)) == "system.latency: must be <= 1e+09"
    av = {"model": "markov", "mean_online": 1e12, "mean_offline": 1.0}
    assert _error(_with(system__availability=av)) == "system.availability.mean_online: must be <= 1e+09"
    assert _error(_with(system__availability=[[[0, 1]], [[0, 1e300]]])) == "system.availability: interval ends must be <= 1e+09 s"


def test_huge_integers_anywhere_are_refused():
    assert _error(_with(algorithm__batch_size=10**30)) == "algorithm.batch_size: 1000000000000000000000000000000 does not fit in 64 bits"


def test_clients_bounded():
    raw = {**_with(), "data": {"name": "synthetic", "clients": limits.MAX_CLIENTS + 1}, "system": {"speed": 1.0}}
    assert _error(raw) == "data.clients: must be <= 1,000,000"


def test_local_steps_bounded():
    wait = {"policy": "wait", "local_steps": 10**12}
    assert _error(_with(round=wait)) == "round.local_steps: must be <= 10,000,000"
    wait = {"policy": "wait", "local_steps": {"dist": "randint", "low": 1, "high": 10**7 + 1}}
    assert _error(_with(round=wait)) == "round.local_steps: must be <= 10,000,000"
    wait = {"policy": "wait", "local_steps": 10**7}
    assert parse_scenario(_with(round=wait)).round.local_steps == 10**7
    assert _error(_with(round__max_local_steps=10**8)) == "round.max_local_steps: must be <= 10,000,000"
    raw = {**_with(round={"policy": "wait", "local_epochs": 10**4 + 1}), "data": {"name": "synthetic", "clients": 2}}
    assert _error(raw) == "round.local_epochs: must be <= 10,000"


def test_window_steps_bounded():
    # speed 1000 steps/s, latency 0.5 s: (W - 1) * 1000 steps fit; W = 10001 gives exactly 10**7
    base = _with(system__speed=[1.0, 1000.0], system__latency=0.5)
    assert parse_scenario({**base, "round": {"policy": "window", "window": 10001.0}}).round.window == 10001.0
    msg = _error({**base, "round": {"policy": "window", "window": 10001.5}})
    assert msg.startswith("round.window: fits 1e+07 local steps per job at the fastest speed, more than 10,000,000")
    # a cap makes it runnable; slowdown below 1 speeds steps up
    assert parse_scenario({**base, "round": {"policy": "window", "window": 1e6, "max_local_steps": 100}})
    slow = {**base, "system": {**base["system"], "slowdown": {"dist": "uniform", "low": 0.5, "high": 1}}}
    assert _error({**slow, "round": {"policy": "window", "window": 10001.0}}).startswith("round.window: fits 2e+07")


def test_issue_examples_exit_2(tmp_path, capsys):
    text = yaml.safe_dump(GOOD)
    for sets, start in [
        (["system.speed=1e300"], "system.speed: "),
        ([f"rounds={sys.maxsize + 1}"], "rounds: "),
        (["system.speed=1e9", "round.window=1e6"], "system.speed: "),
        (["round.policy=wait", "round.local_steps=1000000000000"], "round.local_steps: "),
    ]:
        code, err = _validate(tmp_path, text, *sets, capsys=capsys)
        assert code == 2 and err.startswith(start) and err.count("\n") == 1, (sets, err)


# --------------------------------------------------------------------------- 15: compare --seeds
@pytest.mark.parametrize("text,seeds", [("0,1,2", [0, 1, 2]), ("0-4", [0, 1, 2, 3, 4]), ("3, 7-8", [3, 7, 8]),
                                        ("5-5", [5]), (None, None), ("", None)])
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text,problem", [
    ("5-1", "range 5-1 is empty"), ("-1", "expected seeds like"), ("a", "expected seeds like"),
    ("\u00b2", "expected seeds like"), ("1-2-3", "expected seeds like"), ("0-10000", "more than 10,000 seeds"),
    ("0-100000000", "more than 10,000 seeds"), ("0-5000,6000-11000", "more than 10,000 seeds"),
    (f"{2**63}", "seeds must be <= 9223372036854775807"), ("1" * 5000, "seeds must be <= 9223372036854775807"),
    (f"0-{'9' * 5000}", "seeds must be <= 9223372036854775807"),
])
def test_bad_seeds_refused(text, problem):
    with pytest.raises(ScenarioError, match=f"^--seeds {text}: .*{problem}"):
        parse_seeds(text)


def test_seed_bound_is_exact_and_lazy():
    assert len(parse_seeds("0-9999")) == limits.MAX_SEEDS
    t0 = time.perf_counter()
    with pytest.raises(ScenarioError):
        parse_seeds(f"0-{10**18}")
    assert time.perf_counter() - t0 < 0.1  # the range is counted, not built


def test_compare_reversed_seeds_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert main(["compare", str(path), "--seeds", "5-1", "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.startswith("--seeds 5-1: range 5-1 is empty")
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- 16: devices
@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_device_names_accepted(device):
    assert parse_scenario(_with(engine__device=device)).engine.device == device


@pytest.mark.parametrize("device", ["banana", "CUDA", "cuda:", "cuda:x", "cuda:-1", "gpu", "cpu:0", "", "cuda:12345"])
def test_device_names_refused(device):
    assert _error(_with(engine__device=device)) == (
        f"engine.device: {device!r} is not a device (use auto, cpu, cuda, cuda:N or mps)"
    )


def test_validation_does_not_import_torch(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_with(engine__device="cuda:3")))
    code = (
        "import sys\n"
        "from fedsim.scenario import load_scenario\n"
        f"load_scenario({str(path)!r})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})


def test_check_device_available(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for spec in ("auto", "cpu"):
        check_device_available(spec)
    with pytest.raises(ScenarioError, match="^engine.device: cuda requested but this machine has no CUDA device$"):
        check_device_available("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device_available("cuda:1")
    with pytest.raises(ScenarioError, match=r"^engine.device: cuda:2 requested but this machine has 2 CUDA device\(s\)$"):
        check_device_available("cuda:2")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ScenarioError, match="^engine.device: mps requested but this machine has no MPS device$"):
        check_device_available("mps")


# --------------------------------------------------------------------------- 17: distributions
@pytest.mark.parametrize("speed,message", [
    ({"dist": "uniform", "lo": 1}, "system.speed.lo: unknown key"),
    ({"dist": "uniform", "high": 2}, "system.speed.low: Field required"),
    ({"dist": "randint", "low": 5, "high": 1}, "system.speed: low must be <= high"),
    ({"dist": "uniform", "low": 5, "high": 1}, "system.speed: low must be <= high"),
    ({"dist": "lognormal", "median": -1, "sigma": 1}, "system.speed.median: Input should be greater than 0"),
    ({"dist": "banana"}, "system.speed.dist: 'banana' is not one of 'uniform', 'lognormal', 'randint', 'constant', 'exponential'"),
    ({"low": 1}, "system.speed.dist: missing (which distribution?)"),
    ("fast", "system.speed: Input should be a valid number, unable to parse string as a number"),
    ([1.0, "x"], "system.speed.1: Input should be a valid number, unable to parse string as a number"),
])
def test_distribution_errors_name_the_real_problem(speed, message):
    assert _error(_with(system__speed=speed)) == message


def test_int_distribution_errors():
    rnd = {"policy": "wait", "local_steps": {"dist": "randint", "low": 5, "high": 1}}
    assert _error(_with(round=rnd)) == "round.local_steps: low must be <= high"
    rnd = {"policy": "wait", "local_steps": {"dist": "randint", "low": 1, "hi": 3}}
    assert _error(_with(round=rnd)) == "round.local_steps.hi: unknown key"


def test_markov_error_is_inside_the_markov_member():
    av = {"model": "markov", "mean_online": -1, "mean_offline": 1}
    assert _error(_with(system__availability=av)) == "system.availability.mean_online: Input should be greater than 0"


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize("key,path", [("data__root", "data.root"), ("system__trace", "system.trace")])
def test_paths_with_nul_are_refused(tmp_path, capsys, key, path):
    code, err = _validate(tmp_path, yaml.safe_dump(_with(**{key: "a\0b"})), capsys=capsys)
    assert code == 2 and err.strip() == f"{path}: must not contain a NUL character"


def test_scenario_must_be_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        read_yaml(fifo)  # would block forever if opened
    with pytest.raises(ScenarioError, match="^/dev/zero: not a regular file$"):
        read_yaml("/dev/zero")
    with pytest.raises(ScenarioError, match="not a regular file"):
        read_yaml(tmp_path)
    with pytest.raises(ScenarioError, match="no such scenario file"):
        read_yaml(tmp_path / "missing.yaml")


def test_scenario_size_bound(tmp_path, monkeypatch):
    import fedsim.scenario.loading as scenario  # where read_yaml reads MAX_SCENARIO_BYTES

    path = tmp_path / "s.yaml"
    path.write_text("a: 1\n" + "#" * 95)  # 100 bytes
    monkeypatch.setattr(scenario, "MAX_SCENARIO_BYTES", 100)
    assert read_yaml(path) == {"a": 1}
    path.write_text("a: 1\n" + "#" * 96)
    with pytest.raises(ScenarioError, match="larger than"):
        read_yaml(path)
