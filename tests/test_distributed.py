"""Many processes (issue 5, item 4): ``torchrun --nproc_per_node=2 -m fedsim run X.yaml`` with gloo
on loopback gives the same run folder as one process, and rank 0 alone writes it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from fedsim.engine.distributed import lpt_assign

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)

SCENARIO = """\
name: dist
seed: 3
rounds: 4
data: {name: digits, clients: 10}
model: {name: mlp, hidden: 16}
system: {speed: {dist: lognormal, median: 3.0, sigma: 0.7}, latency: 0.1}
round: {policy: window, window: 2.0, max_local_steps: 8, clients_per_round: 7}
algorithm: {name: %(algo)s, lr: %(lr)s, batch_size: 4%(extra)s}
engine: {dtype: %(dtype)s}
checkpoint: {every: 2}
"""


def test_lpt_longest_first_to_least_loaded():
    assert lpt_assign([3, 9, 4, 4, 1], 2) == [[1, 4], [2, 3, 0]]
    assert lpt_assign([5, 5], 3) == [[0], [1], []]
    assert lpt_assign([], 2) == [[], []]
    groups = lpt_assign([7, 1, 8, 2, 2, 6, 3], 3)
    assert sorted(j for g in groups for j in g) == list(range(7))


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def _fedsim(args, cwd, nproc=1):
    if nproc == 1:
        cmd = [sys.executable, "-m", "fedsim", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "fedsim", *args]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


def test_torchrun_two_ranks_same_run_folder_refusal_and_resume(tmp_path):
    """One process vs ``torchrun --nproc_per_node=2`` (gloo, loopback): the same rounds.csv,
    clients.csv and model.pt (float64: bit for bit; SCAFFOLD with momentum, unequal tau_i);
    a second run into the folder is refused by every rank; ``--resume`` from the round-2
    checkpoint with two ranks finishes with the same files again."""
    (tmp_path / "d.yaml").write_text(SCENARIO % {"algo": "scaffold", "dtype": "float64", "lr": 0.2,
                                                  "extra": ", momentum: 0.5"})
    one = _fedsim(["run", "d.yaml", "--out", "one", "--quiet"], tmp_path)
    assert one.returncode == 0, one.stderr
    two = _fedsim(["run", "d.yaml", "--out", "two", "--quiet"], tmp_path, nproc=2)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("dist  digits") == 1  # only rank 0 prints the summary
    a, b = tmp_path / "one", tmp_path / "two"

    def same_folder():
        assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
        for name in ("rounds.csv", "clients.csv", "partition.csv", "scenario.yaml"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
        ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
        assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)

    same_folder()
    assert len((b / "rounds.csv").read_text().splitlines()) == 1 + 4  # one writer: no duplicated rows

    again = _fedsim(["run", "d.yaml", "--out", "two", "--quiet"], tmp_path, nproc=2)
    # every rank refuses (exit 2 each; torchrun then exits 1) instead of rank 1 waiting forever
    assert again.returncode != 0 and again.stderr.count("already holds this scenario's run") == 2
    res = _fedsim(["run", "d.yaml", "--resume", "two", "--quiet"], tmp_path, nproc=2)  # from round 2
    assert res.returncode == 0, res.stderr
    same_folder()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sharded_worker(rank, port, out_dir):
    import torch.distributed as dist

    from fedsim.algorithms.algorithm import algorithm
    from fedsim.algorithms.spec import resolve
    from fedsim.engine import distributed as D
    from fedsim.engine.train import Task, train_cohort
    from fedsim.engine.workload import build_workload
    from fedsim.scenario import AlgorithmConfig, parse_scenario

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    sc = parse_scenario({"data": {"name": "digits", "clients": 6}, "model": {"name": "mlp", "hidden": 8},
                         "round": {"policy": "wait", "local_steps": 1}})
    work = build_workload(sc, torch.device("cpu"), torch.float64)
    spec = resolve(AlgorithmConfig(name="localadam", batch_size=3))
    tasks = [Task(i, s, 0) for i, s in enumerate([2, 5, 1, 4, 3, 3])]
    kw = dict(round_lr=0.01, seed=0, chunk=4)
    got = D.train_cohort_sharded(work, algorithm(spec), dict(work.init_params), tasks, **kw)
    ref = train_cohort(work, algorithm(spec), dict(work.init_params), tasks, **kw)
    mine = D.lpt_assign([t.steps for t in tasks], 2)[rank]
    ok = (len(mine) > 0 and got.clients == ref.clients and torch.equal(got.a_norm, ref.a_norm)
          and all(torch.equal(got.deltas[k], ref.deltas[k]) for k in ref.deltas)
          and all(torch.equal(got.vhat[k], ref.vhat[k]) for k in ref.vhat))
    Path(out_dir, f"rank{rank}").write_text("ok" if ok else "mismatch")
    dist.destroy_process_group()


def test_train_cohort_sharded_equals_single_process(tmp_path):
    mp.start_processes(_sharded_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    assert (tmp_path / "rank0").read_text() == "ok"
    assert (tmp_path / "rank1").read_text() == "ok"


ASYNC_SCENARIO = """\
name: dist-async
seed: 3
rounds: 6
data: {name: digits, clients: 10}
model: {name: mlp, hidden: 16}
system: {speed: {dist: lognormal, median: 3.0, sigma: 0.7}, latency: 0.1}
round: {policy: async, concurrency: 6, buffer: 3, local_steps: 4}
algorithm: {name: fedbuff, lr: 0.2, batch_size: 4}
engine: {dtype: float64}
"""


def test_torchrun_async_splits_jobs_and_matches_one_process(tmp_path):
    """FedBuff under ``torchrun --nproc_per_node=2``: each buffer's jobs are split over the ranks
    (grouped by the model version they started from) and the run folder equals one process's."""
    (tmp_path / "a.yaml").write_text(ASYNC_SCENARIO)
    one = _fedsim(["run", "a.yaml", "--out", "one", "--quiet"], tmp_path)
    assert one.returncode == 0, one.stderr
    two = _fedsim(["run", "a.yaml", "--out", "two", "--quiet"], tmp_path, nproc=2)
    assert two.returncode == 0, two.stderr
    a, b = tmp_path / "one", tmp_path / "two"
    for name in ("rounds.csv", "clients.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in ma)
