"""Issue 21, run folders and the shared core-slot folder: a run touches only fedsim's own files
inside its folder, never follows a symbolic link out of it, checks everything before it deletes
anything, and never trusts (or waits forever on) a core-slot folder it does not own."""

import fcntl
import os
import threading

import pytest
import torch

from fedsim.cli import main

from _tiny_runs import QUAD, exit_2 as _exit2
from fedsim.engine import threads as T



def _tree(folder):
    """Every entry under ``folder`` (not following links): relative path -> bytes / link target / 'dir'."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


@pytest.fixture
def quad(write_yaml):
    return write_yaml(QUAD, name="quad.yaml")


# --------------------------------------------------------------------------- 1: --force through a symlinked table folder
def test_force_never_deletes_or_writes_through_a_symlinked_table_folder(quad, tmp_path, capsys):
    victim = tmp_path / "v"
    victim.mkdir()
    (victim / "part-00000.parquet").write_text("mine")
    run = tmp_path / "r"
    run.mkdir()
    os.symlink(victim, run / "rounds.parquet")
    before = _tree(victim), _tree(run)
    _exit2(capsys, ["run", str(quad), "--out", str(run), "--force", "--format", "parquet", "--quiet"],
           "rounds.parquet", "symbolic link")
    assert (_tree(victim), _tree(run)) == before


def test_a_symlinked_model_file_is_refused_even_with_force(quad, tmp_path, capsys):
    outside = tmp_path / "outside.pt"
    outside.write_text("keep")
    run = tmp_path / "r"
    assert main(["run", str(quad), "--out", str(run), "--quiet"]) == 0
    (run / "model.pt").unlink()
    os.symlink(outside, run / "model.pt")
    _exit2(capsys, ["run", str(quad), "--out", str(run), "--force", "--quiet"], "model.pt", "symbolic link")
    assert outside.read_text() == "keep" and (run / "scenario.yaml").is_file()


# --------------------------------------------------------------------------- 4: --resume through a symlinked rounds.csv
def test_resume_refuses_a_symlinked_table(quad, tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["run", str(quad), "--out", str(run), "--quiet", "--set", "rounds=6"]) == 0
    # make it resumable: cut the run back to its checkpoint after round 4 by hand is not needed;
    # any resume attempt reads and truncates rounds.csv, so the link must be refused first.
    outside = tmp_path / "outside.csv"
    outside.write_bytes((run / "rounds.csv").read_bytes() + b"stranger's line\n")
    (run / "rounds.csv").unlink()
    os.symlink(outside, run / "rounds.csv")
    before = outside.read_bytes()
    _exit2(capsys, ["run", str(quad), "--resume", str(run), "--quiet", "--set", "rounds=6"], "rounds.csv", "symbolic link")
    assert outside.read_bytes() == before


# --------------------------------------------------------------------------- 5: a symlinked run.lock
def test_a_symlinked_lock_file_is_refused_and_its_target_never_created(quad, tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    target = tmp_path / "elsewhere" / "new"
    target.parent.mkdir()
    os.symlink(target, run / "run.lock")
    _exit2(capsys, ["run", str(quad), "--out", str(run), "--quiet"], "run.lock", "symbolic link")
    assert not target.exists() and os.listdir(target.parent) == []


# --------------------------------------------------------------------------- 6: check everything, then delete
def test_force_checks_everything_before_deleting_anything(quad, tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["run", str(quad), "--out", str(run), "--quiet", "--format", "parquet"]) == 0
    (run / "rounds.parquet" / "part-00020.parquet").mkdir()  # a folder with a part's name
    before = _tree(run)
    _exit2(capsys, ["run", str(quad), "--out", str(run), "--force", "--quiet", "--format", "parquet"], "part-00020.parquet")
    assert _tree(run) == before  # scenario.yaml, model.pt, info.yaml, checkpoint.pt all still there


def test_force_leaves_files_that_only_look_like_parts(quad, tmp_path):
    run = tmp_path / "r"
    assert main(["run", str(quad), "--out", str(run), "--quiet", "--format", "parquet"]) == 0
    for name in ("part-notes.parquet", "part-1.parquet", "part-00000.parquet.bak"):
        (run / "rounds.parquet" / name).write_text("stranger")
    assert main(["run", str(quad), "--out", str(run), "--force", "--quiet", "--format", "parquet"]) == 0
    for name in ("part-notes.parquet", "part-1.parquet", "part-00000.parquet.bak"):
        assert (run / "rounds.parquet" / name).read_text() == "stranger"


# --------------------------------------------------------------------------- 2: the shared core-slot folder
@pytest.fixture
def slots(monkeypatch, tmp_path):
    folder = tmp_path / "slots"
    monkeypatch.setattr(T, "SLOTS", folder)
    monkeypatch.setattr(T, "_affinity", lambda: {0, 1})
    monkeypatch.setattr(T, "usable_cores", lambda: 2)
    monkeypatch.setattr(T, "_state", dict(T._state, cpus=None, files={}, held=False, waited=0.0, rounds=0,
                                          dir=None, bypass=None))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("FEDSIM_HOLD_CORES", raising=False)
    n0 = torch.get_num_threads()
    torch.set_num_threads(2)
    yield folder
    torch.set_num_threads(n0)


def _round_in_thread(timeout=10.0):
    done = threading.Event()

    def go():
        with T.hold_cores(torch.device("cpu")):
            done.set()

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(timeout)
    return done.is_set()


def test_a_symlinked_slot_folder_is_bypassed_and_nothing_created_through_it(slots, tmp_path):
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    os.symlink(target, slots)
    assert _round_in_thread()
    assert os.listdir(target) == []
    assert T.threads_info()["core_slots"].startswith("bypassed:")


def test_a_slot_folder_writable_by_others_is_bypassed(slots):
    slots.mkdir()
    os.chmod(slots, 0o777)
    assert _round_in_thread()
    assert os.listdir(slots) == [] and "writable by other users" in T.threads_info()["core_slots"]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the folder to another user")
def test_a_slot_folder_owned_by_another_user_is_bypassed(slots):
    slots.mkdir(mode=0o700)
    os.chown(slots, 65534, 65534)
    assert _round_in_thread()
    assert os.listdir(slots) == [] and "owned by uid 65534" in T.threads_info()["core_slots"]


def test_a_planted_link_in_the_slot_folder_is_never_followed(slots, tmp_path):
    slots.mkdir(mode=0o700)
    target = tmp_path / "planted-target"
    os.symlink(target, slots / "cpu-0")
    assert _round_in_thread()
    assert not target.exists() and T.threads_info()["core_slots"].startswith("bypassed:")


def test_a_slot_held_forever_is_waited_for_a_bounded_time_then_bypassed(slots, monkeypatch):
    monkeypatch.setattr(T.limits, "MAX_CORE_WAIT_S", 0.3)
    slots.mkdir(mode=0o700)
    holders = []
    for cpu in (0, 1):  # another process (here: other open files) holds every slot for good
        f = open(slots / f"cpu-{cpu}", "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        holders.append(f)
    try:
        assert _round_in_thread(timeout=10.0)  # today: waits forever
        info = T.threads_info()
        assert info["core_slots"].startswith("bypassed:") and "0.3 s" in info["core_slots"]
        assert _round_in_thread(timeout=2.0)  # later rounds no longer wait
    finally:
        for f in holders:
            f.close()


def test_slots_in_a_folder_of_ones_own_are_used(slots):
    assert _round_in_thread()
    # the slots and the queue's counter stay; the round's ticket file q-1 is gone once it had its slots
    assert sorted(os.listdir(slots)) == ["cpu-0", "cpu-1", "queue"] and T.threads_info()["core_slots"] == "turns"
    assert oct(os.stat(slots).st_mode & 0o777) == oct(0o700)
