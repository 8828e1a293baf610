"""Issue 28 items 9 and 11: ``--resume`` reads evals.csv back; a damaged or oversized one is exit 2
in one line before anything in the folder changes."""

import pytest

import fedsim.runner.evals as evals_module
from _tiny_runs import QUAD, exit_2
from fedsim.cli import main
from fedsim.limits import MAX_EVAL_BYTES

RAW = {**QUAD, "eval": {"every_seconds": 0.5}}


@pytest.fixture(scope="module")
def _one_run(tmp_path_factory):
    import yaml

    base = tmp_path_factory.mktemp("evals")
    sc = base / "s.yaml"
    sc.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(sc), "--out", str(base / "run"), "--quiet"]) == 0
    return sc, base / "run"


@pytest.fixture
def finished(_one_run, tmp_path):
    """A copy of a finished 6-round run with evals.csv and a checkpoint at round 4."""
    import shutil

    sc, run = _one_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    assert (out / "checkpoint.pt").is_file() and (out / "evals.csv").stat().st_size > 100
    return sc, out


def _files(out):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and p.name != "run.lock"}


@pytest.mark.parametrize("damage, needle", [
    (lambda t: t.replace("\n", "\nabc,0,1,1,1\n", 1), "evals.csv: line 2 is not a row fedsim writes ('abc,0,1,1,1')"),
    (lambda t: t + "1.0,x,,,\n", "is not a row fedsim writes ('1.0,x,,,')"),
    (lambda t: t + "nan,1,,,\n", "is not a row fedsim writes"),
    (lambda t: t + "1.0,1,2\n", "is not a row fedsim writes"),
    (lambda t: "time,round\n" + t.split("\n", 1)[1], "evals.csv: its header is not sim_time,round,test_loss,test_acc,train_loss"),
])
def test_damaged_evals_is_refused_before_anything_changes(finished, capsys, damage, needle):
    sc, out = finished
    path = out / "evals.csv"
    path.write_text(damage(path.read_text()))
    before = _files(out)
    exit_2(capsys, ["run", str(sc), "--resume", str(out), "--quiet"], f"--resume {out}: evals.csv", needle)
    assert _files(out) == before


def test_oversized_evals_is_refused_before_it_is_read(finished, capsys, monkeypatch):
    sc, out = finished
    size = (out / "evals.csv").stat().st_size
    monkeypatch.setattr(evals_module, "MAX_EVAL_BYTES", size - 1)
    before = _files(out)
    exit_2(capsys, ["run", str(sc), "--resume", str(out), "--quiet"], f"larger than {size - 1:,} bytes (MAX_EVAL_BYTES)")
    assert _files(out) == before
    assert MAX_EVAL_BYTES == 2**28


def test_a_row_cut_by_a_kill_is_dropped_and_the_resume_is_exact(finished, capsys):
    sc, out = finished
    ref = (out / "evals.csv").read_bytes()
    (out / "evals.csv").write_bytes(ref + b"99.5,5,0.1")  # the half-written row of a killed run
    assert main(["run", str(sc), "--resume", str(out), "--quiet"]) == 0
    assert (out / "evals.csv").read_bytes() == ref
