"""Run-folder safety (issue 12 items 1-7 and 18): exclusive use, refusals that leave the folder as
it was, names that stay inside ``--out``, exact-or-refused resume, one-line errors (exit 2)."""

import fcntl
import os
import pickle
import shutil
from argparse import Namespace

import pytest
import torch

from fedsim.cli import main

from _tiny_runs import QUAD

FILES = ("rounds.csv", "clients.csv", "model.pt")


def _snapshot(folder):
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_2(capsys, argv, *needles):
    """``fedsim argv`` exits 2 with one stderr line containing every needle; returns the line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    assert "weights_only" not in err and "Traceback" not in err
    return err


@pytest.fixture
def quad(write_yaml):
    return write_yaml(QUAD, name="quad.yaml")


@pytest.fixture
def finished(quad, tmp_path):
    """A finished run of QUAD (checkpoints after rounds 2 and 4)."""
    out = tmp_path / "ref"
    assert main(["run", str(quad), "--out", str(out), "--quiet"]) == 0
    return out


# --------------------------------------------------------------------------- 1: one run per folder
def test_a_held_folder_is_refused_and_left_alone(quad, tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    fd = os.open(out / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run holds the folder
    try:
        _one_line_2(capsys, ["run", str(quad), "--out", str(out), "--quiet"], str(out), "another fedsim run")
        assert [p.name for p in out.iterdir()] == ["run.lock"]
    finally:
        os.close(fd)
    assert main(["run", str(quad), "--out", str(out), "--quiet"]) == 0  # released: the folder is usable


def test_a_held_run_cannot_be_resumed_twice(quad, finished, capsys):
    before = _snapshot(finished)
    fd = os.open(finished / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "another fedsim run")
    finally:
        os.close(fd)
    assert _snapshot(finished) == before


# --------------------------------------------------------------------------- 2: divergence
DIVERGE = {**QUAD, "name": "div", "rounds": 40, "algorithm": {"name": "fedavg", "lr": 30.0, "batch_size": 1},
           "round": {"policy": "wait", "local_steps": 5}, "checkpoint": {"every": 1}}


def test_resumed_diverged_run_is_byte_identical(write_yaml, tmp_path):
    """(30 - 1)^5 per round overflows float64 after some rounds; the diverging round gets no
    checkpoint, so resuming replays it and writes the same single diverged row."""
    path = write_yaml(DIVERGE, name="div.yaml")
    ref = tmp_path / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    rounds = (ref / "rounds.csv").read_text().splitlines()
    last = len(rounds) - 2  # index of the diverged round (header + rows 0..last)
    assert last < 39
    ck = torch.load(ref / "checkpoint.pt", weights_only=True)
    assert ck["next_round"] == last  # the last finite round's checkpoint, not the diverged one's
    out = tmp_path / "resumed"
    shutil.copytree(ref, out)
    (out / "model.pt").unlink()
    assert main(["run", str(path), "--resume", str(out), "--quiet"]) == 0
    for name in FILES:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


# --------------------------------------------------------------------------- 3: strangers' folders
@pytest.mark.parametrize("stranger", ["model.pt", "info.yaml", "clients.csv", "theirs/notes.txt", "scenario.yaml"])
def test_a_folder_fedsim_did_not_write_is_refused(quad, tmp_path, capsys, stranger):
    out = tmp_path / "theirs"
    (out / stranger).parent.mkdir(parents=True)
    (out / stranger).write_text("not fedsim's\n")
    before = _snapshot(out)
    _one_line_2(capsys, ["run", str(quad), "--out", str(out), "--quiet"], str(out), "--force")
    assert _snapshot(out) == before


def test_force_deletes_only_fedsims_files(quad, tmp_path):
    out = tmp_path / "mixed"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    (out / "notes.txt").write_text("mine\n")
    (out / "model.pt").write_text("a fedsim name: replaced\n")
    assert main(["run", str(quad), "--out", str(out), "--quiet", "--force"]) == 0
    assert (out / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert (out / "notes.txt").read_text() == "mine\n"
    assert isinstance(torch.load(out / "model.pt", weights_only=True), torch.Tensor)


# --------------------------------------------------------------------------- 4: names stay inside
@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", "..", "nul\0name", "n" * 300])
def test_unsafe_name_never_becomes_a_path(write_yaml, tmp_path, monkeypatch, capsys, name):
    path = write_yaml({**QUAD, "name": name}, name="bad.yaml")
    work = tmp_path / "w" / "d"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert main(["run", str(path), "--quiet"]) == 2
    assert "name" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bad.yaml", "d", "w"]  # nothing written anywhere


@pytest.mark.parametrize("variant", ["../../../x", "a/b", ".."])
def test_unsafe_variant_name_never_becomes_a_path(write_yaml, tmp_path, capsys, variant):
    path = write_yaml({**QUAD, "variants": {"ok": {"seed": 1}, variant: {"seed": 2}}}, name="v.yaml")
    out = tmp_path / "a" / "b" / "c"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    assert "variants" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (out / "a").exists()


# --------------------------------------------------------------------------- 5: fail before touching
def test_bad_trace_leaves_no_folder(write_yaml, tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start,end,online,speed\n0,0,10,1,2.0\n7,0,10,1,2.0\n")  # client 7 of 2
    raw = {**QUAD, "system": {"trace": str(trace)}}
    path = write_yaml(raw, name="t.yaml")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    assert "trace" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_device_leaves_no_folder(write_yaml, tmp_path):
    path = write_yaml({**QUAD, "engine": {"device": "cuda"}}, name="cuda.yaml")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) != 0
    assert not out.exists()


# --------------------------------------------------------------------------- 6: resume trusts nothing
def test_resume_refuses_a_table_shorter_than_its_checkpoint(quad, finished, capsys):
    ck = torch.load(finished / "checkpoint.pt", weights_only=True)
    need = ck["table_sizes"]["rounds.csv"]
    with open(finished / "rounds.csv", "r+b") as f:
        f.truncate(need - 3)
    before = _snapshot(finished)
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "rounds.csv", "cannot resume")
    assert _snapshot(finished) == before  # no NUL padding, nothing cut


def test_resume_refuses_a_deleted_table(quad, finished, capsys):
    (finished / "clients.csv").unlink()
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "clients.csv", "missing")


def test_resume_refuses_rows_that_do_not_match_the_checkpoint(quad, finished, capsys):
    """Same byte length, one line fewer before the checkpoint's offset: not the rows it refers to."""
    text = (finished / "rounds.csv").read_text()
    lines = text.splitlines(keepends=True)
    merged = lines[0] + lines[1].rstrip("\n") + "," + lines[2] + "".join(lines[3:])
    (finished / "rounds.csv").write_text(merged)
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "rounds.csv", "does not match")


# --------------------------------------------------------------------------- 7: --out not a folder
@pytest.mark.parametrize("kind", ["file", "below_file", "device"])
def test_out_that_is_not_a_folder(quad, tmp_path, capsys, kind):
    target = tmp_path / "f.txt"
    target.write_text("keep\n")
    out = {"file": target, "below_file": target / "sub", "device": "/dev/null"}[kind]
    _one_line_2(capsys, ["run", str(quad), "--out", str(out), "--quiet"], str(out))
    assert target.read_text() == "keep\n"


# --------------------------------------------------------------------------- 18: bad checkpoints
def _foreign_pickle(path):
    path.write_bytes(pickle.dumps(Namespace(a=1)))  # refused by weights_only loading


def _foreign_torch(path):
    torch.save({"weights": torch.zeros(2)}, path)  # loads, but is no checkpoint


def _truncated(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damage", [lambda p: p.write_bytes(b""), _foreign_pickle, _foreign_torch, _truncated],
                         ids=["empty", "foreign-pickle", "foreign-torch", "truncated"])
def test_bad_checkpoint_is_one_line(quad, finished, capsys, damage):
    damage(finished / "checkpoint.pt")
    before = _snapshot(finished)
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "checkpoint.pt")
    assert _snapshot(finished) == before


def test_resume_without_checkpoint_restarts(quad, finished):
    """No checkpoint (deleted above, or never written): the run starts again from round 0."""
    ref = _snapshot(finished)
    (finished / "checkpoint.pt").unlink()
    assert main(["run", str(quad), "--resume", str(finished), "--quiet"]) == 0
    for name in FILES:
        assert (finished / name).read_bytes() == ref[name]


def test_checkpoint_of_another_model_is_refused_before_cutting(quad, finished, capsys):
    ck = torch.load(finished / "checkpoint.pt", weights_only=True)
    ck["sim"]["params"] = {"w": torch.zeros(1)}
    torch.save(ck, finished / "checkpoint.pt")
    before = _snapshot(finished)
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "another model")
    assert _snapshot(finished) == before


def test_tables_with_other_columns_are_refused(quad, finished, capsys):
    """A run started by a fedsim that wrote fewer columns (before ``available``) cannot be
    continued row for row."""
    lines = (finished / "rounds.csv").read_text().splitlines(keepends=True)
    old = "".join(",".join(line.rstrip("\n").split(",")[:-1]) + "\n" for line in lines)
    (finished / "rounds.csv").write_text(old)
    before = _snapshot(finished)
    _one_line_2(capsys, ["run", str(quad), "--resume", str(finished), "--quiet"], "rounds.csv", "other columns")
    assert _snapshot(finished) == before
