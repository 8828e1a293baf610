"""A checkpoint is checked fully before ``--resume`` uses it (issue 38 item 7): it carries the
fingerprint of its run's resolved scenario, and the observations a feedback selection rule
replays must be well formed and be what the tables show. Before: ``observed`` client ids set to
-1, or an emptied entry, resumed with exit 0 into other tables, and a ``fastest`` run's checkpoint
planted in an ``oort`` folder resumed."""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch
import yaml

from fedsim.cli import main

from _tiny_runs import exit_2

BASE = {
    "name": "ck",
    "seed": 3,
    "rounds": 4,
    "data": {"name": "synthetic", "clients": 8},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 2.0, "high": 6.0}, "latency": 0.1,
               "availability": {"model": "markov", "mean_online": 8.0, "mean_offline": 2.0}},
    "round": {"policy": "window", "window": 2.0, "clients_per_round": 4, "selection": {"name": "oort"}},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8},
    "checkpoint": {"every": 2},
}
FILES = ("rounds.csv", "clients.csv", "model.pt")


def _with(**sections) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def _run(tmp_path, raw, name, fmt=None):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), "--quiet"] + (["--format", fmt] if fmt else [])) == 0
    return path, out


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def oort(tmp_path_factory):
    """A finished oort run: its last checkpoint (after round 2) is in the folder."""
    tmp = tmp_path_factory.mktemp("oort")
    return _run(tmp, BASE, "oort")


def _resumed_copy(tmp_path, finished, edit=None):
    path, ref = finished
    out = tmp_path / "copy"
    shutil.copytree(ref, out)
    if edit is not None:
        ck = torch.load(out / "checkpoint.pt", weights_only=True)
        edit(ck)
        torch.save(ck, out / "checkpoint.pt")
    return path, ref, out


def test_the_checkpoint_carries_the_sha256_of_scenario_yaml(oort):
    _, out = oort
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ck["scenario_sha256"] == hashlib.sha256((out / "scenario.yaml").read_bytes()).hexdigest()
    assert ck["next_round"] == 2 and len(ck["observed"]) == 2


@pytest.mark.parametrize("edit, needle", [
    (lambda ck: ck["observed"][1]["client"].fill_(-1), "name a client outside 0..7 (plan 1)"),
    (lambda ck: ck["observed"][0]["client"].fill_(8), "name a client outside 0..7 (plan 0)"),
    (lambda ck: ck["observed"][1].update({n: v[:0] for n, v in ck["observed"][1].items() if torch.is_tensor(v)}),
     "do not match the tables at plan 1"),
    (lambda ck: ck["observed"][0]["client"].add_(1).remainder_(8), "do not match the tables at plan 0"),
    (lambda ck: ck["observed"][0]["status"].fill_(2), "hold a status no job ends with (plan 0)"),
    (lambda ck: ck["observed"][1].update(time=ck["observed"][1]["time"] + 0.5), "do not match the tables at plan 1"),
    (lambda ck: ck["observed"][0].update(round=1), "are out of order (entry 0 is for plan 1)"),
    (lambda ck: ck["observed"][1].update(steps=ck["observed"][1]["steps"][:-1]),
     "are malformed (plan 1: arrays of different lengths)"),
    (lambda ck: ck["observed"][1].update(steps=ck["observed"][1]["steps"].double()),
     "are malformed (plan 1: arrays of other shapes or types)"),
    (lambda ck: ck["observed"][0].update(download=ck["observed"][0]["download"].reshape(-1, 1)),
     "are malformed (plan 0: arrays of other shapes or types)"),
    (lambda ck: ck["observed"].pop(), "are not one per plan (2 plans)"),
])
def test_edited_observations_are_refused_before_anything_changes(oort, tmp_path, capsys, edit, needle):
    path, _, out = _resumed_copy(tmp_path, oort, edit)
    before = _snapshot(out)
    exit_2(capsys, ["run", str(path), "--resume", str(out), "--quiet"], f"--resume {out}: checkpoint.pt holds "
           "observations that ", needle, "delete it to resume from the start")
    assert _snapshot(out) == before


def test_another_runs_checkpoint_planted_in_the_folder_is_refused(oort, tmp_path, capsys):
    """A fastest run's checkpoint (same model, same rounds) copied into the oort folder."""
    path, _, out = _resumed_copy(tmp_path, oort)
    _, fastest = _run(tmp_path, _with(round={"selection": {"name": "fastest"}}), "fastest")
    shutil.copy(fastest / "checkpoint.pt", out / "checkpoint.pt")
    before = _snapshot(out)
    exit_2(capsys, ["run", str(path), "--resume", str(out), "--quiet"],
           f"--resume {out}: checkpoint.pt belongs to another scenario's run (its fingerprint is not this "
           "scenario.yaml's); delete it to resume from the start")
    assert _snapshot(out) == before


def test_a_checkpoint_without_a_fingerprint_is_refused(oort, tmp_path, capsys):
    """Checkpoints of a fedsim before fingerprints: refused in one line (docs/long-runs.md)."""
    path, _, out = _resumed_copy(tmp_path, oort, lambda ck: ck.pop("scenario_sha256"))
    before = _snapshot(out)
    exit_2(capsys, ["run", str(path), "--resume", str(out), "--quiet"],
           f"--resume {out}: checkpoint.pt carries no scenario fingerprint (written by an older fedsim, "
           "docs/long-runs.md); delete it to resume from the start")
    assert _snapshot(out) == before


@pytest.mark.parametrize("raw, fmt", [
    (BASE, "parquet"),
    (_with(round={"policy": "async", "concurrency": 3, "buffer": 2, "local_steps": 3, "selection": {"name": "fastest"}},
           algorithm={"name": "fedbuff"}), None),
    (_with(round={"policy": "overcommit", "local_steps": 3}, system={"server": {"aggregate": 0.3}}), None),
    (_with(round={"selection": {"name": "fastest"}}, eval={"every": 2}), None),
])
def test_untouched_checkpoints_pass_the_checks_and_resume_byte_identical(tmp_path, raw, fmt):
    """The checks hold on every kind of run whose rule replays observations (async plans, the
    server's aggregation time in the close, Parquet tables): resuming a finished run from its last
    checkpoint rewrites the same bytes."""
    path, ref = _run(tmp_path, raw, "ref", fmt)
    out = tmp_path / "again"
    shutil.copytree(ref, out)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["observed"]
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    for name in (FILES if fmt is None else ("model.pt",)):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    if fmt == "parquet":
        for table in ("rounds.parquet", "clients.parquet"):
            assert sorted(p.name for p in (out / table).iterdir()) == sorted(p.name for p in (ref / table).iterdir())
            for p in (ref / table).iterdir():
                assert (out / table / p.name).read_bytes() == p.read_bytes()
