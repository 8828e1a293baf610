"""Issue 28 item 7: a built-in model's options are checked when the scenario is validated (types,
bounds, the data it fits), and every model's size is capped (MAX_MODEL_PARAMETERS): validate and
run both exit 2 in one line, before the run folder exists."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsim
from _tiny_runs import exit_2
from fedsim.cli import main
from fedsim.limits import MAX_MODEL_LAYERS, MAX_MODEL_PARAMETERS, MAX_MODEL_WIDTH
from fedsim.registries import DATASETS, MODELS

SYN = {"name": "m", "rounds": 1, "data": {"name": "synthetic", "clients": 3},
       "round": {"policy": "wait", "local_steps": 1}, "algorithm": {"name": "fedavg", "batch_size": 4}}


def _tokens(config, seed):
    """Three clients of int64 token sequences (length 5, 6 symbols): what char_lstm reads."""
    rng = np.random.default_rng(seed)
    data = [(rng.integers(0, 6, (4, 5)), rng.integers(0, 6, 4)) for _ in range(3)]
    return fedsim.FederatedData.from_clients(data, test=data[0], num_classes=6, name="tokens")


@pytest.fixture
def tokens():
    fedsim.register_dataset("tokens_test", _tokens)
    yield
    DATASETS.unregister("tokens_test")


def _both(write_yaml, tmp_path, capsys, raw, *needles):
    sc = write_yaml(raw)
    line = exit_2(capsys, ["validate", str(sc)], *needles)
    assert exit_2(capsys, ["run", str(sc), "--out", str(tmp_path / "out"), "--quiet"], *needles) == line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model, needle", [
    ({"name": "mlp", "options": {"hidden": 100_000_000}}, "model.options.hidden: must be in [1, 16,384]"),
    ({"name": "mlp", "hidden": 100_000_000}, "model.hidden: Input should be less than or equal to 16384"),
    ({"name": "mlp", "options": {"hidden": -5}}, "model.options.hidden: must be in [1, 16,384]"),
    ({"name": "mlp", "options": {"hidden": "x"}}, "model.options.hidden: must be an integer in [1, 16,384]"),
    ({"name": "mlp", "options": {"hidden": True}}, "model.options.hidden: must be an integer"),
    ({"name": "mlp", "options": {"hidden": 2.5}}, "model.options.hidden: must be an integer"),
    ({"name": "logreg", "options": {"input_shape": [1]}}, "model.options: 'input_shape' is not an option"),
    ({"name": "mlp", "options": {"num_classes": 3}}, "model.options: 'num_classes' is not an option"),
    ({"name": "logreg", "options": {"width": 3}}, "model.options: model 'logreg' takes no option 'width'; it takes: none"),
    ({"name": "leaf_cnn"}, "model.name: leaf_cnn needs image data; synthetic has flat features"),
    ({"name": "char_lstm"}, "model.name: char_lstm needs token sequences"),
])
def test_bad_model_options_exit_2_at_validate_and_run(write_yaml, tmp_path, capsys, model, needle):
    _both(write_yaml, tmp_path, capsys, {**SYN, "model": model}, needle)


@pytest.mark.parametrize("options, needle", [
    ({"cell": "evil"}, "model.options.cell: must be one of leaf, torch"),
    ({"layers": MAX_MODEL_LAYERS + 1}, "model.options.layers: must be in [1, 64]"),
    ({"units": 0}, "model.options.units: must be in [1, 16,384]"),
    ({"vocab": "abc"}, "model.options.vocab: must be an integer"),
])
def test_char_lstm_options(write_yaml, tmp_path, capsys, tokens, options, needle):
    _both(write_yaml, tmp_path, capsys, {**SYN, "data": {"name": "tokens_test"},
                                          "model": {"name": "char_lstm", "options": options}}, needle)


def test_good_options_still_run(write_yaml, tmp_path, tokens):
    raw = {**SYN, "data": {"name": "tokens_test"},
           "model": {"name": "char_lstm", "options": {"vocab": None, "units": 4, "layers": 1, "embed": 2}}}
    assert main(["run", str(write_yaml(raw)), "--out", str(tmp_path / "o"), "--quiet"]) == 0


def test_a_model_too_large_for_its_data_is_counted_before_it_is_allocated(write_yaml, tmp_path, capsys):
    """mlp at the widest hidden layer on 12,288 features with 10**5 classes: 1.9e9 parameters (7.6
    GB), refused from the meta-device count in well under a second, nothing allocated."""
    import time

    from fedsim.models import build_model

    d, h, c = 12288, MAX_MODEL_WIDTH, 10**5
    n = d * h + h + h * h + h + h * c + c
    assert n > MAX_MODEL_PARAMETERS
    t = time.perf_counter()
    with pytest.raises(fedsim.ScenarioError, match=f"^model.name: model 'mlp' has {n:,} parameters for this data, "
                                                   f"more than 1,000,000,000"):
        build_model("mlp", (d,), c, hidden=h)
    assert time.perf_counter() - t < 5


def test_reliability_doc_states_the_size_refusal():
    from fedsim.models import build_model

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text().split())
    assert "`mlp` with `hidden: 16384` on 12,288 features and 100,000 classes:" in text
    with pytest.raises(fedsim.ScenarioError) as err:
        build_model("mlp", (12288,), 100_000, hidden=16384)
    assert f"`{err.value}`" in text


def test_the_meta_count_draws_no_random_number():
    from fedsim.models import build_model

    torch.manual_seed(3)
    built = build_model("mlp", (6,), 3, hidden=4)
    torch.manual_seed(3)
    plain = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 3))
    assert all(torch.equal(a, b) for a, b in zip(built.parameters(), plain.parameters()))


def test_a_registered_factory_is_capped_once_built():
    from fedsim.models import build_model

    def huge(input_shape, num_classes):  # 2 x 10**9 weights + 2 x 10**8 biases; on meta here
        return torch.nn.Linear(math.prod(input_shape), 2 * 10**9 // math.prod(input_shape), device="meta")

    MODELS.register("huge_test", huge)
    try:
        with pytest.raises(fedsim.ScenarioError, match="^model.name: model 'huge_test' has 2,200,000,000 parameters"):
            build_model("huge_test", (10,), 2)
    finally:
        MODELS.unregister("huge_test")


def test_a_user_mlp_registered_again_is_not_held_to_the_builtin_rules():
    from fedsim.scenario import parse_scenario

    def mlp(input_shape, num_classes, hidden=3, depth=1):
        return torch.nn.Linear(math.prod(input_shape), num_classes)

    MODELS.register("mlp", mlp, replace=True)
    try:
        sc = parse_scenario({**SYN, "model": {"name": "mlp", "options": {"depth": 2, "hidden": 50_000}}})
        assert sc.model.options == {"depth": 2, "hidden": 50_000}
    finally:
        MODELS.register("mlp", "fedsim.models:mlp", replace=True)


def test_a_python_model_factory_is_capped_too(tmp_path, monkeypatch):
    """fedsim.run(model=factory): the factory's module is counted against the same cap (lowered
    here to 20 so a Linear(60 -> 10) on the synthetic default, 610 parameters by hand, exceeds it); nothing is written."""
    import fedsim.models as models

    monkeypatch.setattr(models, "MAX_MODEL_PARAMETERS", 20)
    with pytest.raises(fedsim.ScenarioError, match=r"^model: the model factory has 610 parameters for this data, "
                                                   r"more than 20 \(MAX_MODEL_PARAMETERS\)$"):
        fedsim.run(SYN, model=lambda shape, k: torch.nn.Linear(shape[0], k), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
