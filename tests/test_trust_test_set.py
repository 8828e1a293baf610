"""Issue 28 item 8: a plug-in dataset's shared test set is checked against its training data before
the run folder is touched (it failed at the first evaluation, exit 1, with rounds.csv and
info.yaml written)."""

import numpy as np
import pytest

import fedsim
from _tiny_runs import exit_2
from fedsim.registries import DATASETS

RNG = np.random.default_rng(0)
TRAIN = [(RNG.normal(size=(6, 4)).astype(np.float32), RNG.integers(0, 3, 6)) for _ in range(3)]
GOOD_TEST = (RNG.normal(size=(5, 4)).astype(np.float32), np.array([0, 1, 2, 0, 1]))


def _scenario(test):
    def factory(config, seed):
        return fedsim.FederatedData.from_clients(TRAIN, test=test, num_classes=3, name="plug")

    DATASETS.register("plug_test", factory, replace=True)
    return {"name": "p", "rounds": 2, "data": {"name": "plug_test"}, "model": {"name": "logreg"},
            "round": {"policy": "wait", "local_steps": 1}, "algorithm": {"name": "fedavg", "batch_size": 3}}


@pytest.fixture(autouse=True)
def _clean():
    yield
    DATASETS.unregister("plug_test")


@pytest.mark.parametrize("test, needle", [
    ((GOOD_TEST[0], np.array([0, 1, 2, 3, 1])), "data: the test set has labels outside 0..2"),
    ((GOOD_TEST[0], np.array([0, 1, -1, 0, 1])), "data: the test set has labels outside 0..2"),
    ((RNG.normal(size=(5, 7)).astype(np.float32), GOOD_TEST[1]),
     "data: the test set's examples have shape (7,); the clients' training examples have (4,)"),
    ((GOOD_TEST[0], GOOD_TEST[1].reshape(5, 1)), "data: the test set's targets have shape (1,)"),
    ((GOOD_TEST[0], GOOD_TEST[1][:4]), "data: the test set has 5 inputs and 4 targets"),
    ((np.array([["a"] * 4] * 5), GOOD_TEST[1]), "data: the test set holds arrays torch cannot take"),
    ((GOOD_TEST[0].astype(np.int64), GOOD_TEST[1]), "data: the test set's examples are int64, the clients' float32"),
])
def test_a_bad_shared_test_set_is_refused_before_the_folder(write_yaml, tmp_path, capsys, test, needle):
    sc = write_yaml(_scenario(test))
    exit_2(capsys, ["run", str(sc), "--out", str(tmp_path / "out"), "--quiet"], needle)
    assert not (tmp_path / "out").exists()


def test_a_good_shared_test_set_runs(write_yaml, tmp_path):
    from fedsim.cli import main

    assert main(["run", str(write_yaml(_scenario(GOOD_TEST))), "--out", str(tmp_path / "out"), "--quiet"]) == 0
