"""``train_rows``: a cohort whose rows carry their own start model, lr, seed, correction, direction
and v_hat (the rows of several runs of a comparison's stack) trains each row as ``train_cohort``
trains it alone: bit for bit with one intra-op thread."""

from __future__ import annotations

import pytest
import torch

from fedsim.algorithms.algorithm import algorithm
from fedsim.algorithms.spec import resolve
from fedsim.engine.train import Rows, Task, train_cohort, train_rows
from fedsim.runner.build import build_run
from fedsim.scenario import AlgorithmConfig, parse_scenario

RAW = {"name": "rows", "seed": 0, "rounds": 2, "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 12},
       "model": {"name": "mlp", "hidden": 16}, "round": {"policy": "wait", "local_steps": 3, "clients_per_round": 4},
       "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 8}, "engine": {"threads": 1}}


@pytest.fixture(scope="module")
def work():
    return build_run(parse_scenario(RAW)).engine.work


def _tensors(like, scale, shift):
    return {k: (torch.arange(v.numel(), dtype=v.dtype).reshape(v.shape) % 7 - 3) * scale + shift
            for k, v in like.items()}


# three runs of one stack: their own start, lr, seed and tasks (client 3 is in all three)
RUNS = [
    dict(lr=0.05, seed=0, tasks=[Task(3, 5, 0), Task(0, 2, 0), Task(7, 4, 0)]),
    dict(lr=0.1, seed=1, tasks=[Task(3, 1, 1), Task(5, 6, 1)]),
    dict(lr=0.05, seed=2, tasks=[Task(3, 3, 2), Task(9, 5, 2), Task(1, 4, 2), Task(11, 2, 2)]),
]


@pytest.mark.parametrize("name, extra", [
    ("fedavg", {}), ("fedavg", {"momentum": 0.9, "lr_decay": 0.9}), ("fedprox", {}), ("scaffold", {}),
    ("fedcm", {}), ("localadam", {}),
])
def test_each_row_is_what_it_is_alone(work, one_thread, name, extra):
    alg = algorithm(resolve(AlgorithmConfig(name=name, lr=0.05, batch_size=8, **extra)))
    p0 = work.init_params
    starts = [{k: v + 0.01 * i for k, v in p0.items()} for i in range(len(RUNS))]
    corr = alg.uses_control_variates
    direction = [_tensors(p0, 0.01 * (i + 1), 0.0) if alg.spec.correction == "fedcm" else None for i in range(3)]
    vhat0 = [_tensors(p0, 0.0, 0.01 * (i + 1)) if alg.keeps_vhat else None for i in range(3)]

    def correction(i, client):
        return _tensors(p0, 0.001 * (i + 1), 0.0001 * client) if corr else None

    alone = [train_cohort(work.for_clients([t.client for t in r["tasks"]]), alg, starts[i], r["tasks"],
                          round_lr=r["lr"], seed=r["seed"], chunk=4, correction=lambda c, i=i: correction(i, c),
                          direction=direction[i], vhat0=vhat0[i])
             for i, r in enumerate(RUNS)]
    tasks = [t for r in RUNS for t in r["tasks"]]
    which = [i for i, r in enumerate(RUNS) for _ in r["tasks"]]
    rows = Rows(tuple(starts), tuple(which), tuple(RUNS[i]["lr"] for i in which),
                tuple(RUNS[i]["seed"] for i in which),
                corr=tuple(correction(i, t.client) for i, t in zip(which, tasks)) if corr else None,
                direction=tuple(direction) if direction[0] is not None else None,
                vhat0=tuple(vhat0) if vhat0[0] is not None else None)
    got = train_rows(work.for_clients(sorted({t.client for t in tasks})), alg, tasks, rows, chunk=16)
    o = 0
    for i, a in enumerate(alone):
        sl = slice(o, o + len(a.clients))
        assert got.clients[sl] == a.clients
        for k in a.deltas:
            assert torch.equal(got.deltas[k][sl], a.deltas[k]), (i, k)
            if a.vhat is not None:
                assert torch.equal(got.vhat[k][sl], a.vhat[k]), (i, k)
        for f in ("a_norm", "steps", "loss", "loss_sq"):
            assert torch.equal(getattr(got, f)[sl], getattr(a, f)), (i, f)
        o += len(a.clients)
    # the rows really differ: another lr, seed or start changes a row
    assert not torch.equal(got.deltas["0.weight" if "0.weight" in got.deltas else next(iter(got.deltas))][0],
                           got.deltas[next(iter(got.deltas))][3])


def test_rows_refuse_mismatched_lengths_and_mixed_corrections(work):
    alg = algorithm(resolve(AlgorithmConfig(name="fedavg", lr=0.05, batch_size=8)))
    p = work.init_params
    with pytest.raises(ValueError, match="one start, lr, seed"):
        train_rows(work, alg, [Task(0, 1, 0)], Rows((p,), (0, 0), (0.1,), (0,)), chunk=4)
    rows = Rows((p,), (0, 0), (0.1, 0.1), (0, 0), corr=({k: torch.zeros_like(v) for k, v in p.items()}, None))
    with pytest.raises(ValueError, match="some rows carry a value that others lack"):
        train_rows(work, alg, [Task(0, 1, 0), Task(1, 1, 0)], rows, chunk=4)
