"""Issue 27 items 6 and 7: LEAF's per-epoch steps for LEAF datasets (a documented option), and
``DataNotFound`` as the Python API's one input-error type."""

from __future__ import annotations

import numpy as np
import pytest

import fedsim
from fedsim.data.errors import DataCorrupted, DataNotFound
from fedsim.errors import ScenarioError

from _leaf_files import femnist_user, write_leaf_folder

# writers of 3, 10 and 25 samples: LEAF's batch_data gives ceil(n / 10) batches an epoch -> 1, 1, 3
SIZES = {"w0": (3, 1), "w1": (10, 1), "w2": (25, 1)}


def _scenario(root, epochs, **data):
    return {
        "name": "leaf_epochs", "seed": 0, "rounds": 1,
        "data": {"name": "femnist", "root": str(root), **data},
        "model": {"name": "leaf_cnn"},
        "system": {"speed": 1.0, "latency": 0.0},
        "round": {"policy": "wait", "clients_per_round": 3, "local_epochs": epochs},
        "algorithm": {"name": "fedavg", "lr": 0.01, "batch_size": 10},
    }


@pytest.mark.parametrize("epochs, rule, steps", [
    (1, None, [1, 1, 3]),  # LEAF's rule by default: E ceil(n_i / B); today's: [0, 1, 2], w0 does nothing
    (2, None, [2, 2, 6]),
    (1, "floor", [0, 1, 2]),  # the option: fedsim's floor(E n_i / B)
    (2, "floor", [0, 2, 5]),
])
def test_leaf_datasets_count_an_epoch_as_leaf_does(tmp_path, epochs, rule, steps):
    write_leaf_folder(tmp_path / "data", femnist_user, SIZES)
    data = {} if rule is None else {"options": {"epoch_rule": rule}}
    res = fedsim.schedule(_scenario(tmp_path / "data", epochs, **data))
    clients = res.clients.sort_values("client")
    assert clients["client"].tolist() == [0, 1, 2]
    assert clients["steps"].tolist() == steps
    # floor: a writer with n_i < B has no step to do (LEAF's first FEMNIST round had 0 participants)
    assert clients["status"].tolist() == ["dropped" if s == 0 else "completed" for s in steps]


def test_epoch_rule_option_is_checked(tmp_path):
    write_leaf_folder(tmp_path / "data", femnist_user, SIZES)
    with pytest.raises(ScenarioError, match=r"^data.options.epoch_rule: must be 'ceil' or 'floor', got 'round'$"):
        fedsim.schedule(_scenario(tmp_path / "data", 1, options={"epoch_rule": "round"}))
    with pytest.raises(ScenarioError, match=r"^data.options.rule: femnist has no such option \(options: epoch_rule\)$"):
        fedsim.schedule(_scenario(tmp_path / "data", 1, options={"rule": "ceil"}))


def test_epoch_sizes_make_the_clocks_floor_count_leafs_batches():
    from fedsim.data.epochs import epoch_sizes

    n = np.array([1, 9, 10, 11, 25, 100])
    np.testing.assert_array_equal(epoch_sizes(n, 10, "floor"), n)
    padded = epoch_sizes(n, 10, "ceil")
    np.testing.assert_array_equal(padded, [10, 10, 10, 20, 30, 100])
    for e in (1, 2, 7):  # the clock's floor(E m_i / B) over the padded sizes is E ceil(n_i / B)
        np.testing.assert_array_equal(e * padded // 10, e * np.ceil(n / 10).astype(int))
    with pytest.raises(ValueError, match="epoch_rule must be one of floor, ceil"):
        epoch_sizes(n, 10, "round")


def test_weights_stay_n_i_over_n_under_leafs_rule(tmp_path):
    write_leaf_folder(tmp_path / "data", femnist_user, SIZES)
    sc = _scenario(tmp_path / "data", 1)
    sc["round"] = {"policy": "wait", "clients_per_round": 1, "local_epochs": 1, "sampling": "weighted"}
    sc["rounds"] = 200
    picks = fedsim.schedule(sc).clients["client"].value_counts(normalize=True).sort_index()
    expect = np.array([3, 10, 25]) / 38  # not the padded 10, 10, 30
    assert np.abs(picks.to_numpy() - expect).max() < 0.1


def test_data_not_found_is_the_api_input_error(tmp_path):
    """Issue 27 item 7: ``fedsim.run`` with a missing root raises ScenarioError, as exit 2 on the CLI."""
    assert issubclass(DataNotFound, ScenarioError) and issubclass(DataNotFound, FileNotFoundError)
    assert issubclass(DataCorrupted, ScenarioError)
    sc = _scenario(tmp_path / "nowhere", 1)
    with pytest.raises(ScenarioError) as err:
        fedsim.run(sc)
    assert isinstance(err.value, DataNotFound)
    msg = str(err.value)
    assert msg.startswith("femnist: no LEAF JSON files in ") and "\n" not in msg
    assert str(DataNotFound("one line")) == "one line"


# ---------------------------------------------------------------- issue 27 item 3: a model sized by its input
def _leaf_cnn_parameters(c: int, h: int, w: int, classes: int = 62, dense: int = 2048) -> int:
    """LEAF's models/femnist/cnn.py by hand: two 5x5 'same' convs (32, 64) with 2x2 pools, dense, out."""
    conv = (25 * c * 32 + 32) + (25 * 32 * 64 + 64)
    flat = 64 * (h // 4) * (w // 4)
    return conv + flat * dense + dense + dense * classes + classes


def test_a_model_whose_size_follows_from_the_image_size_is_named():
    from fedsim.models.leaf import leaf_cnn
    from fedsim.models.size import size_note
    from fedsim.scenario import parse_scenario

    sc = parse_scenario({"data": {"name": "digits", "clients": 2}, "model": {"name": "leaf_cnn"},
                         "round": {"policy": "window", "window": 5.0}})
    big = leaf_cnn((3, 128, 128), 62)  # FedScale's stored images, converted to RGB, not resized
    n = _leaf_cnn_parameters(3, 128, 128)
    assert n == 134_400_510  # the count
    assert size_note(sc, (3, 128, 128), 62, big) == (
        f"model leaf_cnn: 134,400,510 parameters (0.5 GiB as float32) for input (3, 128, 128): its size follows from "
        f"the input's height and width ({_leaf_cnn_parameters(3, 64, 64):,} at (3, 64, 64)); resize the images "
        "(e.g. FedScale's 32 x 32) if this is not the model you meant")
    assert size_note(sc, (1, 28, 28), 62, leaf_cnn((1, 28, 28), 62)) is None  # LEAF's 6,603,710: small
    assert size_note(sc, (3, 32, 32), 62, leaf_cnn((3, 32, 32), 62)) is None  # FedScale's transform


def test_the_run_names_it_on_stderr_before_training(monkeypatch, capsys):
    from fedsim.data.federated import FederatedData
    from fedsim.models import size

    monkeypatch.setattr(size, "LARGE_MODEL_PARAMETERS", 1000)
    rng = np.random.default_rng(0)
    parts = [(rng.random((4, 1, 16, 16), dtype=np.float32), rng.integers(0, 3, 4)) for _ in range(2)]
    fd = FederatedData.from_clients(parts, client_test=parts, num_classes=3, name="tiny")
    sc = {"rounds": 1, "model": {"name": "leaf_cnn", "options": {"dense": 8}},
          "round": {"policy": "wait", "clients_per_round": 1, "local_steps": 1},
          "algorithm": {"name": "fedavg", "lr": 0.01, "batch_size": 2}, "engine": {"threads": 1}}
    fedsim.run(sc, data=fd)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("model leaf_cnn:")]
    n = _leaf_cnn_parameters(1, 16, 16, classes=3, dense=8)
    assert lines == [f"model leaf_cnn: {n:,} parameters (0.0 GiB as float32) for input (1, 16, 16): its size follows "
                     f"from the input's height and width ({_leaf_cnn_parameters(1, 8, 8, 3, 8):,} at (1, 8, 8)); resize "
                     "the images (e.g. FedScale's 32 x 32) if this is not the model you meant"]
