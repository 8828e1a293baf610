"""The FEMNIST and Shakespeare scenario files: settings as LEAF's and FedScale's code publish them
(transcribed here from the cited files, not from the YAML), the dataset factories they name, and --
once the names are registered (issue 17's registries, wired at merge) -- a run on generated files
and the exit-2 message when the files are missing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fedsim.data.errors import DataNotFound
from fedsim.data.femnist import femnist, femnist_fedscale
from fedsim.data.shakespeare import shakespeare
from fedsim.scenario_yaml import load_yaml

from _leaf_files import femnist_user, shakespeare_user, write_leaf_folder

SCEN = Path(__file__).resolve().parent.parent / "scenarios"


def _raw(name: str) -> dict:
    return load_yaml((SCEN / name).read_text())


def test_femnist_leaf_settings():
    # leaf/paper_experiments/femnist.sh: fedavg_lr="0.004", num_rounds="2000",
    # fedavg_vals=("3 1" "3 100" "35 1"); models/utils/args.py: --batch_size default 10;
    # baseline_constants.py MAIN_PARAMS femnist large: (400, 20, 2) -> eval every 20
    raw = _raw("femnist_leaf.yaml")
    assert raw["data"]["name"] == "femnist" and raw["model"]["name"] == "leaf_cnn"
    assert raw["rounds"] == 2000 and raw["eval"]["every"] == 20
    assert raw["algorithm"] == {"name": "fedavg", "lr": 0.004, "batch_size": 10}
    assert raw["round"]["policy"] == "wait"
    grid = {(v["round.clients_per_round"], v["round.local_epochs"]) for v in raw["variants"].values()}
    assert grid == {(3, 1), (3, 100), (35, 1)}


def test_shakespeare_leaf_settings():
    # leaf/paper_experiments/shakespeare.sh: --num-rounds 80 --clients-per-round 10 -lr 0.8,
    # local_epochs=("20" "1"), --seed 0; MAIN_PARAMS shakespeare large: (20, 1, 2) -> eval every 1
    raw = _raw("shakespeare_leaf.yaml")
    assert raw["data"]["name"] == "shakespeare" and raw["model"]["name"] == "char_lstm"
    assert raw["rounds"] == 80 and raw["seed"] == 0 and raw["eval"]["every"] == 1
    assert raw["algorithm"] == {"name": "fedavg", "lr": 0.8, "batch_size": 10}
    assert raw["round"]["clients_per_round"] == 10 and raw["round"]["policy"] == "wait"
    assert {v["round.local_epochs"] for v in raw["variants"].values()} == {1, 20}


def test_femnist_fedscale_settings():
    # FedScale/benchmark/configs/femnist/conf.yml: num_participants 50, local_steps 5,
    # learning_rate 0.05, batch_size 20, rounds 1000, eval_interval 10
    raw = _raw("femnist_fedscale.yaml")
    assert raw["data"]["name"] == "femnist_fedscale"
    assert raw["rounds"] == 1000 and raw["eval"]["every"] == 10
    assert raw["round"]["clients_per_round"] == 50 and raw["round"]["local_steps"] == 5
    assert raw["algorithm"] == {"name": "fedavg", "lr": 0.05, "batch_size": 20}


def test_factories_read_the_root_of_the_data_section(tmp_path):
    write_leaf_folder(tmp_path / "f", femnist_user, {"a": (2, 1), "b": (3, 1)})
    write_leaf_folder(tmp_path / "s", shakespeare_user, {"R": (2, 1)})
    assert femnist(SimpleNamespace(root=str(tmp_path / "f")), 0).sizes.tolist() == [2, 3]
    assert shakespeare(SimpleNamespace(root=str(tmp_path / "s")), 0).client_ids == ("R",)
    with pytest.raises(DataNotFound, match=r"femnist_fedscale: no client_data_mapping/train\.csv in .*FedScale"):
        femnist_fedscale(SimpleNamespace(root=str(tmp_path)), 0)


def _registered() -> bool:
    try:
        from fedsim.registries import DATASETS, MODELS
    except ImportError:
        return False
    return {"femnist", "shakespeare"} <= set(DATASETS) and {"leaf_cnn", "char_lstm"} <= set(MODELS)


needs_wiring = pytest.mark.skipif(not _registered(), reason="femnist/shakespeare/leaf_cnn/char_lstm not registered yet "
                                                            "(fedsim/registries.py, wired at merge)")


@needs_wiring
@pytest.mark.parametrize("name", ["femnist_leaf.yaml", "shakespeare_leaf.yaml"])
def test_scenario_runs_on_generated_leaf_files(tmp_path, name):
    from fedsim.cli import main

    make = femnist_user if name.startswith("femnist") else shakespeare_user
    write_leaf_folder(tmp_path / "data", make, {"a": (4, 2), "b": (3, 1), "c": (5, 1)})
    sets = [f"data.root={tmp_path / 'data'}", "variants=null", "rounds=1", "round.clients_per_round=2", "round.local_epochs=null",
            "round.local_steps=1", "engine.threads=1", "eval.train_loss=false"]
    args = ["run", str(SCEN / name), "--out", str(tmp_path / "run"), "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0


@needs_wiring
@pytest.mark.parametrize("name", ["femnist_leaf.yaml", "shakespeare_leaf.yaml", "femnist_fedscale.yaml"])
def test_missing_files_exit_2_naming_dataset_source_and_folder(tmp_path, name, capsys):
    from fedsim.cli import main

    root = tmp_path / "empty"
    root.mkdir()
    out = tmp_path / "run"
    rc = main(["run", str(SCEN / name), "--out", str(out), "--quiet", "--set", f"data.root={root}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert str(root) in err and ("TalwalkarLab/leaf" in err or "SymbioticLab/FedScale" in err)
    assert not out.exists()


@needs_wiring
def test_natural_partition_decides_data_clients(tmp_path, capsys):
    from fedsim.cli import main

    write_leaf_folder(tmp_path / "data", femnist_user, {"a": (4, 2), "b": (3, 1), "c": (5, 1)})
    base = ["run", str(SCEN / "femnist_leaf.yaml"), "--quiet", "--set", f"data.root={tmp_path / 'data'}", "--set",
            "variants=null", "--set", "rounds=1", "--set", "round.local_epochs=null", "--set", "round.local_steps=1",
            "--set", "eval.train_loss=false"]
    # three writers in the files: 4 per round is refused against their count, before any folder exists
    assert main(base + ["--out", str(tmp_path / "r4"), "--set", "round.clients_per_round=4"]) == 2
    assert capsys.readouterr().err.strip() == "round.clients_per_round: must be <= data.clients (3)"
    assert not (tmp_path / "r4").exists()
    # a data.clients that disagrees with the files is refused too
    assert main(base + ["--out", str(tmp_path / "r2"), "--set", "data.clients=2", "--set", "round.clients_per_round=2"]) == 2
    assert capsys.readouterr().err.strip().startswith("data.clients: femnist has 3 clients; got 2")
    # unset: the files decide, and scenario.yaml records their count
    assert main(base + ["--out", str(tmp_path / "ok"), "--set", "round.clients_per_round=3"]) == 0
    import yaml

    assert yaml.safe_load((tmp_path / "ok" / "scenario.yaml").read_text())["data"]["clients"] == 3
