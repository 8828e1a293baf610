"""Registries (issue 17 points 5, 6): the scenario's closed name lists became registry look-ups;
fedsim's built-ins are registered as a plug-in's are; unknown names are one line listing the known
ones; a model's options are checked against its factory's signature."""

from __future__ import annotations

import math

import pytest
import yaml

from fedsim import registries
from fedsim.cli import main
from fedsim.named_pieces import Registry, RegistryError
from fedsim.scenario import ScenarioError, dump_scenario, parse_scenario

BUILTIN_MODELS = ("cnn", "logreg", "mlp", "resnet18_gn", "vgg11")
BUILTIN_DATA = ("cifar10", "cifar100", "digits", "fashion_mnist", "mnist", "quadratic", "synthetic", "tinyimagenet")


def test_builtins_are_registered_as_lazy_targets():
    assert set(BUILTIN_MODELS) <= set(registries.MODELS.names())
    assert set(BUILTIN_DATA) <= set(registries.DATASETS.names())
    for name in BUILTIN_MODELS:
        assert registries.MODELS.loaded(name) is None or callable(registries.MODELS.loaded(name))


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_every_builtin_model_resolves_to_a_factory_of_the_contract(name):
    shape = (3, 32, 32) if name != "logreg" and name != "mlp" else (60,)
    module = registries.MODELS.get(name)(shape, 10)
    assert sum(p.numel() for p in module.parameters()) > 0


@pytest.mark.parametrize("path,value,message", [
    ("data.name", "emnist", "data.name: unknown dataset 'emnist'; known: cifar10, cifar100, digits, "),
    ("model.name", "my_cnn", "model.name: unknown model 'my_cnn'; known: char_lstm, cnn, "),
    ("algorithm.name", "feddyn", "algorithm.name: unknown algorithm 'feddyn'; known: fedadagrad, "),
    ("algorithm.solver", "lion", "algorithm.solver: unknown local solver 'lion'; known: adam, amsgrad, sgd"),
    ("algorithm.correction", "dyn", "algorithm.correction: unknown correction 'dyn'; known: "),
    ("algorithm.aggregation", "median", "algorithm.aggregation: unknown aggregation 'median'; known: avg, nova"),
    ("algorithm.server_opt", "lamb", "algorithm.server_opt: unknown server optimizer 'lamb'; known: "),
    ("algorithm.staleness", "exp", "algorithm.staleness: unknown staleness rule 'exp'; known: constant, hinge, "),
])
def test_unknown_names_are_one_line_listing_the_known_ones(path, value, message):
    section, key = path.split(".")
    raw = {"data": {"name": "synthetic"}, section: {key: value}}
    if section == "data":
        raw = {section: {key: value}}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_registry_refuses_a_second_registration_and_bad_names():
    r = Registry("widget", "widget.name")
    r.register("a", len)
    with pytest.raises(RegistryError, match=r"^widget 'a' is already registered by module test_registries, not again "
                                            r"by module test_registries \(replace=True replaces it\)$"):
        r.register("a", len)
    r.register("a", abs, replace=True)
    assert r.get("a") is abs
    with pytest.raises(RegistryError, match="widget name '1a'"):
        r.register("1a", len)
    with pytest.raises(RegistryError, match="lazy target is 'module:attribute'"):
        r.register("b", "math.sqrt")
    r.register("c", "math:sqrt")
    assert r.loaded("c") is None and r.get("c") is math.sqrt and r.loaded("c") is math.sqrt


def _scenario(**model):
    return {"name": "opts", "rounds": 1, "data": {"name": "synthetic", "clients": 4}, "model": model,
            "round": {"policy": "window", "window": 2.0}}


def test_model_options_are_checked_against_a_registered_factory_at_validation():
    def narrow(input_shape, num_classes, width=4):
        raise AssertionError("validation builds no model")

    registries.MODELS.register("narrow_test", narrow)
    try:
        assert parse_scenario(_scenario(name="narrow_test", options={"width": 3})).model.options == {"width": 3}
        with pytest.raises(ScenarioError) as err:
            parse_scenario(_scenario(name="narrow_test", options={"depth": 3}))
        assert str(err.value) == "model.options: model 'narrow_test' takes no option 'depth'; it takes: width"
    finally:
        registries.MODELS.unregister("narrow_test")


def test_an_option_a_builtin_model_does_not_take_fails_before_the_folder(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_scenario(name="logreg", options={"width": 3})))
    code = main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 2
    assert capsys.readouterr().err == "model.options: model 'logreg' takes no option 'width'; it takes: none\n"
    assert not (tmp_path / "out").exists()


def test_resolved_scenario_leaves_out_empty_options_and_keeps_given_ones():
    plain = dump_scenario(parse_scenario(_scenario(name="mlp")))
    assert "options" not in plain  # every run folder's scenario.yaml as before the key existed
    given = parse_scenario(_scenario(name="mlp", options={"hidden": 7}))
    again = parse_scenario(yaml.safe_load(dump_scenario(given)))
    assert again.model.options == {"hidden": 7} and again == given


def test_builtin_preset_names_are_the_presets():
    from fedsim.algorithms.presets import PRESETS
    from fedsim.registries import ALGORITHMS, PRESET_NAMES

    assert PRESET_NAMES == tuple(PRESETS)
    assert all(ALGORITHMS.get(n) is PRESETS[n] for n in PRESET_NAMES)
