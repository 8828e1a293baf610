"""``system.coupling`` (issue 36 item 1): devices handed to clients by a rank correlation with
their data. Strength 0 is today's run byte for byte; strength 1 is an exact sort (worlds made by
hand); in between the Spearman correlation lies in a band derived below; every key is validated."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import spearmanr

from fedsim.cli import main
from fedsim.clock.coupling import coupled_devices, spearman_of_strength
from fedsim.data import FederatedData
from fedsim.devices.population import PopulationSpec, write_population
from fedsim.runner.clock import build_clock
from fedsim.runner.coupling import data_scores
from fedsim.scenario import parse_scenario

from _tiny_runs import exit_2

SYN = {
    "name": "cpl", "seed": 3, "rounds": 3,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 20},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5,
               "availability": {"model": "markov", "mean_online": 30.0, "mean_offline": 10.0}},
    "round": {"policy": "window", "window": 5.0, "max_local_steps": 30, "clients_per_round": 8},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
}


def _write(tmp_path: Path, raw: dict, name: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _with_coupling(raw: dict, **c) -> dict:
    out = yaml.safe_load(yaml.safe_dump(raw))
    out["system"]["coupling"] = c
    return out


# ----------------------------------------------------------------------------- strength 0
def test_strength_zero_run_folder_is_byte_identical(tmp_path):
    """A trained run (lognormal speeds, Markov availability) with coupling at strength 0 writes
    the same rounds, clients and model bytes as the run without the key."""
    plain = _write(tmp_path, SYN, "plain")
    zero = _write(tmp_path, _with_coupling(SYN, by="speed", to="label_axis", strength=0.0), "zero")
    one = _write(tmp_path, _with_coupling(SYN, by="speed", to="label_axis", strength=1.0), "one")
    for p in (plain, zero, one):
        assert main(["run", str(p), "--out", str(tmp_path / p.stem)]) == 0
    for f in ("rounds.csv", "clients.csv", "model.pt"):
        assert (tmp_path / "plain" / f).read_bytes() == (tmp_path / "zero" / f).read_bytes(), f
    # and the key is not a no-op: at strength 1 the clock's columns differ
    assert (tmp_path / "plain" / "clients.csv").read_bytes() != (tmp_path / "one" / "clients.csv").read_bytes()


def _trace_scenario(trace: Path, **coupling) -> dict:
    raw = {
        "name": "tr", "seed": 1, "rounds": 6,
        "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 40},
        "model": {"name": "logreg"},
        "system": {"trace": str(trace), "latency": 0.1},
        "round": {"policy": "deadline", "deadline": 400.0, "local_steps": 5, "clients_per_round": 10},
        "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
    }
    if coupling:
        raw["system"]["coupling"] = coupling
    return raw


def test_strength_zero_schedule_with_a_generated_device_trace_is_byte_identical(tmp_path):
    trace = tmp_path / "pop.csv"
    write_population(PopulationSpec(clients=40, seed=2, days=1), trace)
    a = _write(tmp_path, _trace_scenario(trace), "a")
    b = _write(tmp_path, _trace_scenario(trace, by="bandwidth", to="size", strength=0), "b")
    for p in (a, b):
        assert main(["run", str(p), "--schedule-only", "--out", str(tmp_path / p.stem)]) == 0
    for f in ("rounds.csv", "clients.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


# ----------------------------------------------------------------------------- strength 1
def _labelled(labels_per_client: list[list[int]]) -> FederatedData:
    clients = [(np.zeros((len(y), 2), np.float32), np.asarray(y, np.int64)) for y in labels_per_client]
    return FederatedData.from_clients(clients, test=clients[0], num_classes=5)


def _clock(raw: dict, data, sizes=None):
    sc = parse_scenario(raw)
    n = np.asarray(data.sizes if sizes is None else sizes)
    return build_clock(sc, n, n / n.sum(), data=data)


def _hand(system: dict, clients: int = 5) -> dict:
    return {"name": "h", "seed": 0, "rounds": 1,
            "data": {"name": "synthetic", "clients": clients, "alpha": 0.0, "beta": 0.0},
            "system": system, "round": {"policy": "window", "window": 100.0},
            "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1}}


def test_strength_one_sorts_speeds_by_dominant_label():
    """Five clients with dominant labels 4, 3, 2, 1, 0 and devices of speeds 3, 1, 4, 1.5, 9:
    the label-0 client gets the slowest device (1), label 1 the next (1.5), ... label 4 the
    fastest (9): speeds by client = 9, 4, 3, 1.5, 1."""
    data = _labelled([[4, 4, 1], [3], [2, 2, 0], [1, 1], [0]])
    raw = _hand({"speed": [3.0, 1.0, 4.0, 1.5, 9.0],
                 "coupling": {"by": "speed", "to": "dominant_label", "strength": 1}})
    clock = _clock(raw, data)
    assert clock.speeds.tolist() == [9.0, 4.0, 3.0, 1.5, 1.0]
    raw["system"]["coupling"]["direction"] = "opposite"
    assert _clock(raw, data).speeds.tolist() == [1.0, 1.5, 3.0, 4.0, 9.0]


def test_strength_one_moves_the_whole_device_with_its_speed():
    """Explicit offline intervals and bandwidths are the device's: coupling by bandwidth to
    label_axis (mean labels 2, 0, 1) puts the fastest link (device 0) on client 0, device 1 (slowest)
    on client 1, device 2 on client 2, and each device's outage goes with it."""
    data = _labelled([[2, 2], [0, 0], [1, 1]])
    raw = _hand({"speed": [1.0, 2.0, 3.0], "network": {"down": [900.0, 100.0, 300.0], "up": [900.0, 100.0, 300.0]},
                 "availability": [[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]]],
                 "coupling": {"by": "bandwidth", "to": "label_axis", "strength": 1}}, clients=3)
    from fedsim.clock import WorkCost

    sc = parse_scenario(raw)
    n = data.sizes
    clock = build_clock(sc, n, n / n.sum(), data=data, cost=WorkCost(None, 100.0, 100.0))
    # bandwidth ranks: device 1 (100) < device 2 (300) < device 0 (900); labels: client 1 < 2 < 0
    assert clock.devices.tolist() == [0, 1, 2]
    down, _ = clock.transfers_of(np.arange(3))
    assert (800.0 / down).round(6).tolist() == [900.0, 100.0, 300.0]
    assert clock.speeds.tolist() == [1.0, 2.0, 3.0]
    # now reversed: highest mean label on the slowest link
    raw["system"]["coupling"]["direction"] = "opposite"
    clock = build_clock(parse_scenario(raw), n, n / n.sum(), data=data, cost=WorkCost(None, 100.0, 100.0))
    down, _ = clock.transfers_of(np.arange(3))
    # opposite: client 0 (label 2) -> slowest (dev 1), client 1 (label 0) -> fastest (dev 0), client 2 -> dev 2
    assert (800.0 / down).round(6).tolist() == [100.0, 900.0, 300.0]
    assert clock.speeds.tolist() == [2.0, 1.0, 3.0]
    assert [tl.intervals for tl in clock.timelines] == [[(3.0, 4.0)], [(1.0, 2.0)], [(5.0, 6.0)]]


def test_strength_one_by_availability_with_intervals():
    """Devices offline 1/16, 1/2 and 1/4 of [0, 8): to size (clients of 1, 3, 2 examples): the
    smallest client (0) gets the least available device (1), client 2 device 2, the largest
    (client 1) the most available device (0)."""
    data = _labelled([[0], [0, 0, 0], [0, 0]])
    raw = _hand({"speed": [1.0, 2.0, 3.0], "availability": [[[7.5, 8.0]], [[0.0, 4.0]], [[2.0, 4.0]]],
                 "coupling": {"by": "availability", "to": "size", "strength": 1}}, clients=3)
    clock = _clock(raw, data)
    # online shares of [0, 8): device 0 15/16, device 1 1/2, device 2 3/4
    assert clock.devices.tolist() == [1, 0, 2]
    assert clock.speeds.tolist() == [2.0, 1.0, 3.0]
    assert [tl.intervals for tl in clock.timelines] == [[(0.0, 4.0)], [(7.5, 8.0)], [(2.0, 4.0)]]


def _speed_trace(path: Path, speeds: list[float]) -> Path:
    path.write_text("client,start,end,online,speed\n" + "".join(f"{c},0,100,1,{s}\n" for c, s in enumerate(speeds)))
    return path


def test_strength_one_with_a_trace_uses_the_trace_speeds(tmp_path):
    trace = _speed_trace(tmp_path / "t.csv", [5.0, 2.0, 8.0, 1.0])
    data = _labelled([[0] * 4, [0] * 9, [0], [0] * 2])  # sizes 4, 9, 1, 2
    raw = _hand({"trace": str(trace), "coupling": {"by": "speed", "to": "size", "strength": 1}}, clients=4)
    clock = _clock(raw, data)
    # sizes rank: client 2 (1) < 3 (2) < 0 (4) < 1 (9); speeds sorted 1, 2, 5, 8
    assert clock.speeds.tolist() == [5.0, 8.0, 1.0, 2.0]


# ----------------------------------------------------------------------------- in between
def test_intermediate_strength_spearman_band():
    """For a bivariate normal of correlation rho, Spearman's rho_s = (6/pi) arcsin(rho/2)
    (0.4826 at 0.5, 0.8915 at 0.9). Under independence the sample Spearman has standard deviation
    1/sqrt(m-1); with dependence it is smaller (its variance falls with |rho_s|), so 4/sqrt(m-1)
    bounds every seed's deviation at m = 2,000 (0.089). The mean over 8 seeds is within
    4/sqrt(8(m-1)) (0.032)."""
    m = 2000
    rng = np.random.default_rng(123)
    data = rng.permutation(m).astype(float)
    dev = rng.lognormal(0.0, 1.0, m)
    assert abs(spearman_of_strength(0.5) - 0.4826) < 1e-4 and abs(spearman_of_strength(0.9) - 0.8915) < 1e-4
    for strength in (0.5, 0.9):
        got = []
        for seed in range(8):
            devices = coupled_devices(data, dev, strength, seed)
            assert np.array_equal(np.sort(devices), np.arange(m))
            got.append(spearmanr(data, dev[devices]).statistic)
        target = spearman_of_strength(strength)
        assert max(abs(g - target) for g in got) < 4 / math.sqrt(m - 1), (strength, got)
        assert abs(np.mean(got) - target) < 4 / math.sqrt(8 * (m - 1)), (strength, got)
    # strength 1: exact sort (Spearman 1); and deterministic from the seed
    assert spearmanr(data, dev[coupled_devices(data, dev, 1.0, 0)]).statistic == pytest.approx(1.0)
    assert np.array_equal(coupled_devices(data, dev, 0.5, 7), coupled_devices(data, dev, 0.5, 7))
    assert not np.array_equal(coupled_devices(data, dev, 0.5, 7), coupled_devices(data, dev, 0.5, 8))


def test_data_scores_by_hand():
    data = FederatedData.from_clients(
        [(np.array([[1.0, 3.0], [5.0, 7.0]], np.float32), np.array([1, 3])),
         (np.array([[0.0, 0.0]], np.float32), np.array([2])),
         (np.array([[2.0, 2.0]] * 3, np.float32), np.array([0, 4, 4]))],
        test=(np.zeros((1, 2), np.float32), np.zeros(1, np.int64)), num_classes=5)
    assert data_scores("size", data).tolist() == [2, 1, 3]
    assert data_scores("label_axis", data).tolist() == [2.0, 2.0, 8 / 3]
    assert data_scores("dominant_label", data).tolist() == [1, 2, 4]
    assert data_scores("feature_shift", data).tolist() == [4.0, 0.0, 2.0]


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("override, needle", [
    ("system.coupling.strength=nan", "system.coupling.strength"),
    ("system.coupling.strength=-0.1", "system.coupling.strength"),
    ("system.coupling.strength=1.01", "system.coupling.strength"),
    ("system.coupling.strength=true", "system.coupling.strength"),
    ("system.coupling.by=cpu", "system.coupling.by"),
    ("system.coupling.to=colour", "system.coupling.to"),
    ("system.coupling.direction=up", "system.coupling.direction"),
    ("system.coupling.by=flops", "system.coupling.by: flops needs system.compute"),
    ("system.coupling.by=bandwidth", "system.coupling.by: bandwidth needs"),
    ("system.coupling.by=availability", "system.coupling.by: availability needs"),
    ("system.coupling.colour=1", "system.coupling.colour"),
])
def test_bad_coupling_keys_are_one_line(tmp_path, capsys, override, needle):
    p = _write(tmp_path, _with_coupling(SYN, by="speed", to="size", strength=0.5), "s")
    exit_2(capsys, ["validate", str(p), "--set", override], needle)


def test_labels_needed_for_label_scores(tmp_path, capsys):
    raw = {"name": "q", "seed": 0, "rounds": 1, "data": {"name": "quadratic", "centers": [[1.0], [2.0]]},
           "system": {"speed": [1.0, 2.0], "coupling": {"by": "speed", "to": "label_axis", "strength": 1}},
           "round": {"policy": "wait", "local_steps": 1}, "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1}}
    p = _write(tmp_path, raw, "q")
    exit_2(capsys, ["run", str(p), "--out", str(tmp_path / "o")], "system.coupling.to: label_axis needs class labels")


def test_docs_state_the_keys_and_numbers():
    """docs/devices.md states the keys' names and the Spearman values the code aims at."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "devices.md").read_text()
    section = text.split("## Who is slow", 1)[1].split("\n## ", 1)[0]
    from fedsim.scenario.system import COUPLING_BY, COUPLING_TO, CouplingConfig

    for name in (*COUPLING_BY, *COUPLING_TO):
        assert f"`{name}`" in section, name
    assert set(CouplingConfig.model_fields) == {"by", "to", "strength", "direction"}
    assert f"{spearman_of_strength(0.5):.3f} at 0.5" in section
    assert f"{spearman_of_strength(0.9):.3f} at 0.9" in section
    assert (root / "docs" / "img" / "coupling.png").is_file()


def test_mid_ranks_and_normal_scores_against_scipy():
    """The clock's own mid-ranks and normal scores (no scipy import at run time) equal scipy's."""
    from scipy.special import ndtri
    from scipy.stats import rankdata

    from fedsim.clock.coupling import mid_ranks, normal_scores

    x = np.array([3.0, 1.0, 3.0, 2.0, 3.0, 0.5, 2.0])
    assert mid_ranks(x).tolist() == rankdata(x).tolist() == [6.0, 2.0, 6.0, 3.5, 6.0, 1.0, 3.5]
    y = np.random.default_rng(0).integers(0, 20, 500).astype(float)
    assert np.allclose(normal_scores(y), ndtri((rankdata(y) - 0.5) / len(y)), rtol=0, atol=1e-12)
