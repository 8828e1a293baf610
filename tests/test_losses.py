"""Losses by name (issue 28, the researcher's rough edges): ``loss: {name: ...}``,
``fedsim.register_loss``, ``LOSSES``, and the loss recorded in info.yaml."""

import pytest
import torch
import torch.nn.functional as F
import yaml

import fedsim
from _tiny_runs import exit_2
from fedsim.cli import main
from fedsim.registries import LOSSES
from fedsim.scenario import dump_scenario, parse_scenario

SYN = {"name": "syn", "rounds": 2, "data": {"name": "synthetic", "clients": 4}, "model": {"name": "logreg"},
       "round": {"policy": "wait", "local_steps": 2}, "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 5},
       "engine": {"threads": 1}}


def halved(outputs, targets):
    return 0.5 * F.cross_entropy(outputs, targets)


@pytest.fixture
def registered():
    fedsim.register_loss("halved", halved)
    yield
    LOSSES.unregister("halved")


def test_builtin_cross_entropy_is_the_mean_over_examples():
    from fedsim.losses import cross_entropy

    out, y = torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0])
    # -log softmax: log(1 + e^-2) and log(1 + e^1), averaged
    want = (torch.log1p(torch.exp(torch.tensor(-2.0))) + torch.log1p(torch.exp(torch.tensor(1.0)))) / 2
    assert torch.allclose(cross_entropy(out, y), want, atol=1e-7, rtol=0)
    assert LOSSES.names() == ("cross_entropy", "from_python")


def test_default_loss_is_left_out_of_the_stored_scenario():
    sc = parse_scenario(SYN)
    assert sc.loss.name == "cross_entropy" and "loss" not in yaml.safe_load(dump_scenario(sc))
    named = parse_scenario({**SYN, "loss": {"name": "cross_entropy"}})
    assert dump_scenario(named) == dump_scenario(sc)


def test_a_registered_loss_is_named_in_a_scenario_and_recorded(registered, tmp_path):
    by_name = fedsim.run({**SYN, "loss": {"name": "halved"}}, out=tmp_path / "named")
    assert by_name.info["loss"] == "halved"
    assert yaml.safe_load((tmp_path / "named" / "scenario.yaml").read_text())["loss"] == {"name": "halved"}
    given = fedsim.run(SYN, loss=halved)
    assert given.info["loss"] == "from_python"
    # the same loss by name or by object: the same run, row for row
    cols = ["train_loss", "test_loss", "test_acc"]
    assert by_name.rounds[cols].equals(given.rounds[cols])
    plain = fedsim.run(SYN)
    assert plain.info["loss"] == "cross_entropy"
    assert not plain.rounds["train_loss"].equals(by_name.rounds["train_loss"])  # the loss trained and reported


def test_loss_name_from_the_command_line(registered, write_yaml, tmp_path, capsys):
    sc = write_yaml(SYN)
    assert main(["run", str(sc), "--set", "loss.name=halved", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert yaml.safe_load((tmp_path / "o" / "info.yaml").read_text())["loss"] == "halved"


@pytest.mark.parametrize("raw, needles", [
    ({**SYN, "loss": {"name": "nope"}}, ["loss.name: unknown loss 'nope'; known: cross_entropy, from_python"]),
    ({**SYN, "loss": {"name": "from_python"}}, ["loss.name: 'from_python' stands for a loss given to fedsim.run(loss=...)"]),
    ({**SYN, "loss": {"name": "cross_entropy", "eps": 0.1}}, ["loss.eps"]),
    ({**SYN, "loss": "cross_entropy"}, ["loss"]),
    ({"data": {"name": "quadratic", "clients": 2}, "round": {"window": 5.0}, "loss": {"name": "from_python"}},
     ["loss.name: quadratic data has its own objective"]),
])
def test_bad_loss_sections_are_one_line(write_yaml, capsys, raw, needles):
    exit_2(capsys, ["validate", str(write_yaml(raw))], *needles)


def test_loss_given_with_quadratic_data_is_refused():
    with pytest.raises(fedsim.ScenarioError, match="^loss.name: quadratic data has its own objective"):
        fedsim.run({"data": {"name": "quadratic", "clients": 2}, "rounds": 1, "round": {"window": 5.0}}, loss=halved)


def test_register_loss_takes_a_callable():
    with pytest.raises(fedsim.ScenarioError, match="expected"):
        fedsim.register_loss("bad", 42)
    assert "bad" not in LOSSES


def test_the_named_loss_is_what_trains_and_evaluates(registered):
    """Half the cross-entropy at twice the learning rate takes the same steps (0.2 * g / 2 is
    0.1 * g exactly), so the models agree and the reported losses are half (to float32 rounding
    of the two cross-entropy paths)."""
    base = {**SYN, "eval": {"train_loss": True}}
    ce = fedsim.run(base).rounds
    half = fedsim.run({**base, "loss": {"name": "halved"}, "algorithm": {**SYN["algorithm"], "lr": 0.2}}).rounds
    for col in ("train_loss", "test_loss"):
        assert ((2 * half[col] - ce[col]).abs() < 1e-5 * ce[col]).all(), (half[col], ce[col])
    assert half["test_acc"].tolist() == ce["test_acc"].tolist()
