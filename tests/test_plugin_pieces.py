"""Registered pieces are checked and their registrants recorded (issue 30 mend 5, issue 28 item 16):
a piece of the wrong kind is one line naming it when it is registered, a factory that returns the
wrong kind or (when it is not fedsim's) raises is one line naming it before the run folder exists,
and "already registered" names the earlier and the new registrant."""

from __future__ import annotations

import pytest

import fedsim
from fedsim import registries
from fedsim.algorithms.parts import Aggregation, Correction, ServerOpt, Solver, StalenessRule
from fedsim.errors import ScenarioError
from fedsim.named_pieces import BUILTIN, Registry, RegistryError, registering_as

SCENARIO = {
    "name": "pieces", "rounds": 1, "data": {"name": "synthetic", "clients": 4},
    "system": {"speed": 2.0}, "round": {"policy": "window", "window": 2.0}, "algorithm": {"name": "fedavg"},
}
HERE = f"module {__name__}"


@pytest.fixture
def cleanup():
    names = []
    yield names
    for reg, name in names:
        reg.unregister(name)


def test_registrants_are_recorded_and_a_clash_names_both(cleanup):
    assert registries.MODELS.registrant("logreg") == BUILTIN
    assert registries.ALGORITHMS.registrant("fednova") == BUILTIN
    fedsim.register_model("reg_mine", lambda shape, k: None)
    cleanup.append((registries.MODELS, "reg_mine"))
    assert registries.MODELS.registrant("reg_mine") == HERE
    with registering_as("plugin module other"):
        with pytest.raises(RegistryError) as err:
            fedsim.register_model("reg_mine", len)
    assert str(err.value) == (f"model 'reg_mine' is already registered by {HERE}, not again by plugin module other "
                              "(replace=True replaces it)")
    with registering_as("distribution pkg 1.0 (entry point pkg)"):
        fedsim.register_model("reg_mine", len, replace=True)
    assert registries.MODELS.registrant("reg_mine") == "distribution pkg 1.0 (entry point pkg)"
    with pytest.raises(RegistryError, match="^model 'logreg' is already registered by fedsim, not again by " + HERE):
        fedsim.register_model("logreg", len)
    registries.MODELS.unregister("reg_mine")
    assert registries.MODELS.registrant("reg_mine") is None


@pytest.mark.parametrize("register,piece,message", [
    (fedsim.register_solver, 42, "local solver 'bad_piece': expected a fedsim.algorithms.parts.Solver, got int"),
    (fedsim.register_solver, Solver(42), "local solver 'bad_piece': Solver.build must be callable, got int"),
    (fedsim.register_solver, Solver(len, linear=1), "local solver 'bad_piece': Solver.linear must be True or False, got int"),
    (fedsim.register_correction, Correction(client=3), "correction 'bad_piece': Correction.client must be None or callable, got int"),
    (fedsim.register_correction, Correction(needs="fast"), "correction 'bad_piece': Correction.needs must be 'linear', 'adaptive' or None, got 'fast'"),
    (fedsim.register_aggregation, Solver(len), "aggregation 'bad_piece': expected a fedsim.algorithms.parts.Aggregation, got Solver"),
    (fedsim.register_server_opt, ServerOpt(None), "server optimizer 'bad_piece': ServerOpt.build must be callable, got NoneType"),
    (fedsim.register_staleness, "x", "staleness rule 'bad_piece': a lazy target is 'module:attribute', got 'x'"),
    (fedsim.register_algorithm, {"momentum": 5.0}, "algorithm 'bad_piece': momentum: Input should be less than 1"),
    (fedsim.register_algorithm, {"momentum": True}, "algorithm 'bad_piece': momentum: must not be true/false (got true)"),
    (fedsim.register_algorithm, {"solver": 3}, "algorithm 'bad_piece': solver: must be a registered solver's name, got int"),
    (fedsim.register_algorithm, {"mu": None}, "algorithm 'bad_piece': mu: must not be null in a preset (leave it out for "
                                              "the default, 0.0)"),
    (fedsim.register_algorithm, {"lr": 0.1}, "algorithm 'bad_piece': 'lr' is not a part of an algorithm (parts: solver, "),
    (fedsim.register_algorithm, ["sgd"], "algorithm 'bad_piece': a preset is a mapping of part keys to values, got list"),
    (fedsim.register_algorithm, {"asynchronous": "soon"}, "algorithm 'bad_piece': asynchronous: must be fedbuff, fedasync or null, got 'soon'"),
    (fedsim.register_model, 42, "model 'bad_piece': expected a factory (a callable, or 'module:attribute'), got int"),
    (fedsim.register_dataset, None, "dataset 'bad_piece': expected a factory (a callable, or 'module:attribute'), got NoneType"),
    (fedsim.register_availability, len, "availability model 'bad_piece': expected a subclass of fedsim.availability.AvailabilitySection, got "),
])
def test_a_piece_of_the_wrong_kind_is_refused_when_registered(register, piece, message):
    before = {kind: set(r.names()) for kind, r in registries.ALL.items()}
    with pytest.raises(RegistryError) as err:
        register("bad_piece", piece)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert {kind: set(r.names()) for kind, r in registries.ALL.items()} == before


def test_good_pieces_and_presets_register(cleanup):
    fedsim.register_solver("ok_solver", Solver(lambda spec: [], linear=False))
    fedsim.register_correction("ok_corr", Correction(client=lambda *a: None, needs="linear"))
    fedsim.register_aggregation("ok_agg", Aggregation(lambda spec: lambda upd: upd.deltas, tau_eff=True))
    fedsim.register_server_opt("ok_sopt", ServerOpt(lambda spec: None, momentum=True))
    fedsim.register_staleness("ok_stale", StalenessRule(lambda spec: lambda s: 1.0))
    fedsim.register_algorithm("ok_alg", {"solver": "ok_solver", "momentum": 0.0, "server_betas": [0.9, 0.99]})
    fedsim.register_solver("ok_lazy", "fedsim.algorithms.parts:SGD")
    cleanup.extend([(registries.SOLVERS, "ok_solver"), (registries.CORRECTIONS, "ok_corr"),
                    (registries.AGGREGATIONS, "ok_agg"), (registries.SERVER_OPTS, "ok_sopt"),
                    (registries.STALENESS, "ok_stale"), (registries.ALGORITHMS, "ok_alg"), (registries.SOLVERS, "ok_lazy")])
    assert registries.SOLVERS.get("ok_lazy").linear  # a lazy target is checked when loaded, and passes


def test_a_lazy_target_of_the_wrong_kind_is_refused_when_loaded(cleanup):
    fedsim.register_solver("lazy_int", "math:pi")
    cleanup.append((registries.SOLVERS, "lazy_int"))
    with pytest.raises(RegistryError, match="^local solver 'lazy_int': expected a fedsim.algorithms.parts.Solver, got float$"):
        registries.SOLVERS.get("lazy_int")


def test_a_registry_without_a_check_takes_anything():
    r = Registry("widget", "widget.name")
    r.register("a", 42)
    assert r.get("a") == 42 and r.registrant("a") == HERE


def _boom(*args, **kwargs):
    raise RuntimeError("boom\nsecond line")


@pytest.mark.parametrize("kind,factory,message", [
    ("model", lambda shape, k: "x", "model.name: model 'fz_piece' (registered by {who}) returned str, not a torch.nn.Module"),
    ("model", lambda shape, k: None, "model.name: model 'fz_piece' (registered by {who}) returned NoneType, not a torch.nn.Module"),
    ("model", _boom, "model.name: model 'fz_piece' (registered by {who}) raised RuntimeError: boom"),
    ("data", lambda config, seed: (1, 2), "data.name: dataset 'fz_piece' (registered by {who}) returned tuple, not a "
                                          "fedsim.data.FederatedData (or Dataset)"),
    ("data", lambda config, seed: None, "data.name: dataset 'fz_piece' (registered by {who}) returned NoneType, not a "
                                        "fedsim.data.FederatedData (or Dataset)"),
    ("data", _boom, "data.name: dataset 'fz_piece' (registered by {who}) raised RuntimeError: boom"),
])
def test_a_factory_returning_the_wrong_kind_or_raising_is_one_line_before_the_folder(kind, factory, message, tmp_path,
                                                                                     cleanup):
    reg, register = (registries.MODELS, fedsim.register_model) if kind == "model" else (registries.DATASETS,
                                                                                        fedsim.register_dataset)
    register("fz_piece", factory)
    cleanup.append((reg, "fz_piece"))
    sc = {**SCENARIO, kind: {**SCENARIO.get(kind, {}), "name": "fz_piece"}}
    with pytest.raises(ScenarioError) as err:
        fedsim.run(sc, out=tmp_path / "out")
    assert str(err.value) == message.format(who=HERE)
    assert not (tmp_path / "out").exists()


def test_a_model_given_from_python_that_raises_is_one_line(tmp_path):
    with pytest.raises(ScenarioError) as err:
        fedsim.run(SCENARIO, model=_boom, out=tmp_path / "out")
    assert str(err.value) == "model: the model factory raised RuntimeError: boom"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("part,message", [
    (Solver(lambda spec: "junk"), "algorithm.solver: 'fz_solver': build(spec) returned str, not a list of Transforms"),
    (Solver(_boom), "algorithm.solver: 'fz_solver': build(spec) raised RuntimeError: boom"),
])
def test_a_part_whose_builder_fails_is_one_line_before_the_folder(part, message, tmp_path, cleanup):
    fedsim.register_solver("fz_solver", part)
    cleanup.append((registries.SOLVERS, "fz_solver"))
    with pytest.raises(ScenarioError) as err:
        fedsim.run({**SCENARIO, "algorithm": {"name": "fedavg", "solver": "fz_solver"}}, out=tmp_path / "out")
    assert str(err.value) == message
    assert not (tmp_path / "out").exists()
