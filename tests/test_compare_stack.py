"""A comparison's stacks (issue 35): runs that share data and model shapes run as one program and
write the folders each run writes alone.

Equality: with one intra-op thread every row of a batched call is computed as alone, so every
file is byte-identical (info.yaml but two timings of the process, see ``tree``); with
more threads float32 batched products split their work by the number of rows, so the training
columns may differ in the last bits (bound below), the clock columns never.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from _run_trees import tree as run_tree
from fedsim import registries
from fedsim.clock.selection import Picked, SelectionRule
from fedsim.compare import plan_compare, run_compare
from fedsim.compare.stacks import Stack, auto_rows, plan_lines, plan_stacks, rows_of, split_rows
from fedsim.selection.section import SelectionSection

FAULTS = Path(__file__).with_name("_faults.py")

BASE = {
    "name": "stk", "seed": 0, "rounds": 4,
    "data": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": 12},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "lognormal", "median": 5.0, "sigma": 0.6}, "latency": 0.5},
    "round": {"policy": "wait", "window": 4.0, "deadline": 3.0, "max_local_steps": 30, "clients_per_round": 4,
              "local_steps": {"dist": "randint", "low": 2, "high": 8}},
    "algorithm": {"name": "fedavg", "lr": 0.05, "batch_size": 10},
    "eval": {"every": 2},
    "engine": {"threads": 1},
}
GRID = {"algorithms": ["fedavg", "fednova", "fedprox", "scaffold"], "policies": ["wait", "deadline", "window"],
        "grid": {"algorithm.lr": [0.05, 0.1]}}

#: The training columns of rounds.csv (the others are the clock's and must be byte-identical).
TRAINING = ("train_loss", "test_loss", "test_acc")
#: Largest relative difference of a training column, stacked vs alone, with 2 threads in float32
#: (observed on this grid run for 6 rounds: 1.2e-7 for the MLP, 3.3e-9 for logistic regression,
#: 1.8e-16 for the MLP in float64; 5.2e-9 on a 24-run logistic regression grid over 5 rounds).
BOUND = 1e-6


def tree(folder: Path) -> dict[str, bytes]:
    """Every file of every run folder under ``folder`` but ``run.lock``, as :func:`_run_trees.tree`."""
    return run_tree(folder, skip=("run.lock",))


def assert_same(a: Path, b: Path, runs: int) -> None:
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb)
    assert len([k for k in ta if k.endswith("/rounds.csv")]) == runs
    for k in ta:
        assert ta[k] == tb[k], k


def counting(mp, name: str) -> list[int]:
    """Wrap ``fedsim.compare.stack.<name>`` (a batched evaluation) to record how many requests
    each call answered together."""
    from fedsim.compare import stack

    sizes: list[int] = []
    inner = getattr(stack, name)

    def wrapped(reqs):
        sizes.append(len(reqs))
        return inner(reqs)

    mp.setattr(stack, name, wrapped)
    return sizes


@pytest.fixture(scope="module")
def logreg(tmp_path_factory):
    """The grid (24 runs: 4 algorithms x 3 policies x 2 lrs) stacked and alone; also returns the
    size of every batched evaluation of the stacked comparison."""
    root = tmp_path_factory.mktemp("stk")
    lines = []
    with pytest.MonkeyPatch.context() as mp:
        sizes = counting(mp, "evaluate_together")
        stacked = run_compare(BASE, out=root / "stacked", log=lines.append, **GRID)
    alone = run_compare(BASE, out=root / "alone", stack=False, **GRID)
    assert len(stacked.ran) == len(alone.ran) == 24 and not stacked.failed and not alone.failed
    return root, lines, sizes


def test_stacked_folders_are_byte_identical_to_each_run_alone(logreg):
    root, lines, sizes = logreg
    assert_same(root / "stacked", root / "alone", 24)
    # evaluation batched too: every run evaluates after rounds 1 and 3 (eval.every 2, 4 rounds),
    # all 24 in one stacked forward each time
    assert sizes == [24, 24]
    # the plan came first: one stack of the 24 runs
    assert lines[0] == "plan: 24 runs in 1 programs: 1 stacks of runs, 0 runs alone"
    assert lines[1].startswith("  program 1: stack of 24 runs (96 rows): fedavg-wait-algorithm.lr=0.05 seed 0, ")


def test_rerunning_a_stacked_comparison_is_byte_identical(logreg, tmp_path):
    root = logreg[0]
    res = run_compare(BASE, out=tmp_path / "again", **GRID)
    assert len(res.ran) == 24
    assert_same(tmp_path / "again", root / "stacked", 24)


def test_a_row_cap_runs_the_stack_in_waves_with_the_same_folders(logreg, tmp_path):
    """--stack-rows 10: stacks of two runs (4 rows each), same folders."""
    root = logreg[0]
    lines = []
    res = run_compare(BASE, out=tmp_path / "capped", stack_rows=10, log=lines.append, **GRID)
    assert len(res.ran) == 24
    assert lines[0] == "plan: 24 runs in 12 programs: 12 stacks of runs, 0 runs alone"
    assert_same(tmp_path / "capped", root / "stacked", 24)


def test_the_automatic_cap_runs_one_stack_in_waves_with_the_same_folders(logreg, tmp_path, monkeypatch):
    """The automatic cap (here 8 rows: the model's parameter bytes seen, the budget's answer
    replaced) runs the planned stack of 24 runs in waves of two runs, same folders."""
    from fedsim.compare import stack as stack_module

    root = logreg[0]
    seen = []
    monkeypatch.setattr(stack_module, "auto_rows", lambda per: seen.append(per) or 8)
    lines = []
    res = run_compare(BASE, out=tmp_path / "waves", log=lines.append, **GRID)
    assert len(res.ran) == 24
    assert seen == [4 * (60 * 10 + 10)]  # logreg on Synthetic: 60 x 10 weights and 10 biases, float32
    assert lines[2] == "stack of 24 runs (fedavg-wait-algorithm.lr=0.05 seed 0 ...): at most 8 rows at once, 12 waves"
    assert_same(tmp_path / "waves", root / "stacked", 24)


def test_mlp_with_two_threads_clock_identical_training_within_the_bound(tmp_path):
    """float32, 2 threads: clients.csv and the clock columns byte-identical; the training columns
    within BOUND (relative); the same rows at the same rounds evaluated."""
    raw = {**BASE, "model": {"name": "mlp", "hidden": 32}, "engine": {"threads": 2}}
    grid = {"algorithms": ["fedavg", "fedprox", "scaffold"], "grid": {"algorithm.lr": [0.05, 0.1]}}
    run_compare(raw, out=tmp_path / "s", **grid)
    run_compare(raw, out=tmp_path / "a", stack=False, **grid)
    worst = 0.0
    for a in sorted((tmp_path / "a").glob("*/seed0")):
        s = tmp_path / "s" / a.relative_to(tmp_path / "a")
        assert (a / "clients.csv").read_bytes() == (s / "clients.csv").read_bytes()
        ra, rs = pd.read_csv(a / "rounds.csv", dtype=str), pd.read_csv(s / "rounds.csv", dtype=str)
        clock = [c for c in ra.columns if c not in TRAINING]
        assert ra[clock].equals(rs[clock])
        for c in TRAINING:
            x, y = ra[c].astype(float).to_numpy(), rs[c].astype(float).to_numpy()
            assert (np.isnan(x) == np.isnan(y)).all()
            ok = ~np.isnan(x)
            worst = max(worst, float(np.max(np.abs(x[ok] - y[ok]) / np.abs(x[ok]))))
    assert worst <= BOUND, worst


# ----------------------------------------------------------------------------- the plan
def _runs(raw, **kw):
    runs, _, _ = plan_compare(raw, out="o", **kw)
    return runs


def test_plan_groups_by_data_and_model_and_names_why_a_run_is_alone():
    raw = {**BASE, "round": {**BASE["round"], "concurrency": 2, "buffer": 2}}
    runs = _runs(raw, algorithms=["fedavg", "fedbuff"], policies=["wait", "async"], seeds=[0, 1],
                 grid={"model.name": ["logreg", "mlp"]})
    stacks = plan_stacks(runs)
    # {logreg, mlp} x seeds {0, 1} (the data seed is the run's seed): four keys, each a stack of
    # fedavg-wait and fedbuff-async (a synchronous and an asynchronous run share a stack)
    assert [[r.label for r in s.runs] for s in stacks] == [
        [f"{a}-model.name={m} seed {seed}" for a in ("fedavg-wait", "fedbuff-async")]
        for m in ("logreg", "mlp") for seed in (0, 1)]
    assert all(s.alone is None for s in stacks)
    lines = plan_lines(plan_stacks(runs[:2]))  # fedavg-wait logreg seeds 0 and 1
    assert lines == ["plan: 2 runs in 2 programs: 0 stacks of runs, 2 runs alone",
                     "  program 1: fedavg-wait-model.name=logreg seed 0 alone: no other run shares its data and model shapes",
                     "  program 2: fedavg-wait-model.name=logreg seed 1 alone: no other run shares its data and model shapes"]
    same_data = _runs({**BASE, "data": {**BASE["data"], "seed": 7}}, algorithms=["fedavg", "fednova"],
                      seeds=[0, 1], grid={"model.name": ["logreg", "mlp"]})
    stacks = plan_stacks(same_data)
    # data.seed fixed: the seeds share data; logreg and mlp do not share shapes -> two stacks of 4
    assert [[r.label for r in s.runs] for s in stacks] == [
        ["fedavg-wait-model.name=logreg seed 0", "fedavg-wait-model.name=logreg seed 1",
         "fednova-wait-model.name=logreg seed 0", "fednova-wait-model.name=logreg seed 1"],
        ["fedavg-wait-model.name=mlp seed 0", "fedavg-wait-model.name=mlp seed 1",
         "fednova-wait-model.name=mlp seed 0", "fednova-wait-model.name=mlp seed 1"]]


def test_row_cap_and_automatic_rows():
    runs = _runs({**BASE, "data": {**BASE["data"], "seed": 7}}, algorithms=["fedavg", "fednova", "fedprox"],
                 seeds=[0, 1])
    assert [rows_of(r) for r in runs] == [4] * 6
    assert [len(s.runs) for s in split_rows(runs, 8)] == [2, 2, 2]
    assert [len(s.runs) for s in split_rows(runs, 13)] == [3, 3]
    assert [len(s.runs) for s in split_rows(runs, 3)] == [1] * 6  # a run bigger than the cap: alone
    assert split_rows(runs, 3)[0].alone == "its 4 rows leave no room for another run under the row cap (3)"
    assert split_rows(runs[:1], None)[0].alone == "no other run shares its data and model shapes"
    assert [len(s.runs) for s in plan_stacks(runs, 12)] == [3, 3]
    over = _runs({**BASE, "round": {**BASE["round"], "policy": "overcommit"}})
    assert rows_of(over[0]) == 6  # ceil(1.3 * 4)
    # the automatic cap: budget / (6 copies x parameter bytes)
    assert auto_rows(1000, budget=60_000) == 10
    assert auto_rows(10**9, budget=60_000) == 1
    assert Stack(tuple(runs[:2])).rows == 8


# ----------------------------------------------------------------------------- faults
FAIL_AT: list[int] = []


@dataclass(frozen=True)
class Boom(SelectionRule):
    """Uniform by key; raises when asked for round ``at`` (or FAIL_AT's round, when set)."""

    at: int = -1

    def select(self, state, request):
        if request.key == self.at or (FAIL_AT and request.key == FAIL_AT[0]):
            raise RuntimeError(f"boom at {request.key}")
        online = request.online()
        pick = np.sort(online[np.random.default_rng(request.key).permutation(len(online))[: request.k]])
        return state, Picked.of(pick, request.p)


class BoomSection(SelectionSection):
    at: int = -1

    def clock_value(self):
        return Boom(self.at)


@pytest.fixture
def boom():
    registries.SELECTORS.register("boom", BoomSection)
    FAIL_AT.clear()
    yield
    FAIL_AT.clear()
    registries.SELECTORS.unregister("boom")


def test_a_run_whose_plug_in_raises_fails_alone_and_the_others_complete(tmp_path, boom):
    raw = {**BASE, "round": {**BASE["round"], "selection": {"name": "boom"}},
           "variants": {"ok": {}, "bad": {"round.selection.at": 2}, "ok2": {"algorithm.lr": 0.1}}}
    res = run_compare(raw, out=tmp_path / "s", algorithms=["fedavg", "scaffold"])
    assert sorted(res.ran) == ["fedavg-ok seed 0", "fedavg-ok2 seed 0", "scaffold-ok seed 0", "scaffold-ok2 seed 0"]
    assert len(res.failed) == 2 and all("boom at 2" in f for f in res.failed)
    # the bad runs kept their first two rounds; the others equal the same runs alone
    assert len(pd.read_csv(tmp_path / "s" / "fedavg-bad" / "seed0" / "rounds.csv")) == 2
    run_compare(raw, out=tmp_path / "a", algorithms=["fedavg", "scaffold"], variants=["ok", "ok2"], stack=False)
    ts, ta = tree(tmp_path / "s"), tree(tmp_path / "a")
    for k, v in ta.items():
        if "/seed0/" in k:
            assert ts[k] == v, k


def test_resume_after_every_run_of_the_stack_failed_midway(tmp_path, boom):
    """Every run raises at round 3 (after its checkpoint of round 3); the rerun resumes each from
    its own checkpoint; the folders equal an uninterrupted comparison's."""
    raw = {**BASE, "round": {**BASE["round"], "selection": {"name": "boom"}}, "rounds": 5,
           "checkpoint": {"every": 1}}
    kw = {"algorithms": ["fedavg", "fednova"], "policies": ["wait", "window"]}
    ref = run_compare(raw, out=tmp_path / "ref", **kw)
    assert len(ref.ran) == 4
    FAIL_AT.append(3)
    cut = run_compare(raw, out=tmp_path / "cut", **kw)
    assert len(cut.failed) == 4 and not cut.ran
    FAIL_AT.clear()
    again = run_compare(raw, out=tmp_path / "cut", **kw)
    assert len(again.ran) == 4
    assert_same(tmp_path / "cut", tmp_path / "ref", 4)


def test_sigkill_a_stacked_comparison_then_resume(tmp_path):
    """A real SIGKILL (tests/_faults.py, right after a run writes round 2's rows), then
    ``fedsim compare`` again: every run finishes from its checkpoint, the folders equal an
    uninterrupted comparison's."""
    raw = {**BASE, "rounds": 5, "checkpoint": {"every": 1}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    args = ["compare", str(path), "--algorithms", "fedavg,fedprox", "--policies", "wait,deadline", "--quiet"]
    ref = subprocess.run([sys.executable, "-m", "fedsim", *args, "--out", str(tmp_path / "ref")],
                         capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    killed = subprocess.run([sys.executable, str(FAULTS), "round:2", *args, "--out", str(tmp_path / "k")],
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert not list((tmp_path / "k").rglob("model.pt"))  # killed mid-way: no run finished
    again = subprocess.run([sys.executable, "-m", "fedsim", *args, "--out", str(tmp_path / "k")],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert_same(tmp_path / "k", tmp_path / "ref", 4)


def test_docs_state_the_code():
    from fedsim.compare.stack import LOCAL_FIELDS
    from fedsim.compare.stacks import ROW_COPIES, STACK_BYTES

    text = " ".join((Path(__file__).parents[1] / "docs" / "comparisons.md").read_text().split())
    assert f"automatic: {STACK_BYTES >> 20} MiB / ({ROW_COPIES} x the model's parameter bytes) rows" in text
    assert BOUND == 1e-6 and "the test checks 1e-6 for an MLP in float32 with 2 threads" in text
    fields = ", ".join(f"`{f}`" for f in LOCAL_FIELDS[:-1]) + f" and `{LOCAL_FIELDS[-1]}`"
    assert f"rows whose specs agree on {fields}" in text
    assert "plan: 24 runs in 1 programs: 1 stacks of runs, 0 runs alone" in text
    from fedsim.engine.stacked_eval import EVAL_STACK_BYTES

    assert f"at most {EVAL_STACK_BYTES >> 20} MiB of one layer's activations per forward" in text


# ----------------------------------------------------------------------------- every synchronous lever
LEVERS = {
    "overcommit": {"round.policy": "overcommit", "round.overcommit": 1.5},
    "partial": {"round.policy": "deadline", "round.on_deadline": "partial"},
    "topk_ef": {"algorithm.name": "scaffold",
                "algorithm.compression": {"name": "topk", "ratio": 0.1, "error_feedback": True}},
    "fp16_down": {"algorithm.downlink_compression": {"name": "fp16"}},
    "link": {"system.network": {"down": {"dist": "uniform", "low": 2e4, "high": 2e5},
                                "up": {"dist": "uniform", "low": 1e4, "high": 1e5}},
             "system.server": {"up": 8e4, "aggregate": 0.2},
             "system.availability": {"model": "markov", "mean_online": 9.0, "mean_offline": 4.0},
             "system.on_outage": "resume"},
    "oort": {"round.selection": {"name": "oort"}},
    "fedcm": {"algorithm.name": "fedcm"},
    "localadam": {"algorithm.name": "localadam", "algorithm.lr": 0.01},
    "fedadam": {"algorithm.name": "fedadam"},
    "epochs": {"round.local_steps": None, "round.local_epochs": 1},
    "fedbuff": {"algorithm.name": "fedbuff", "round.policy": "async", "round.concurrency": 5, "round.buffer": 2},
    "fedbuff_time": {"algorithm.name": "fedbuff", "round.policy": "async", "round.concurrency": 5, "round.buffer": 2,
                     "round.local_steps": None, "round.local_time": 1.5},
    "fedasync_topk": {"algorithm.name": "fedasync", "round.policy": "async", "round.concurrency": 4,
                      "algorithm.compression": {"name": "topk", "ratio": 0.1, "error_feedback": True}},
}


def test_every_synchronous_lever_stacks_byte_identical(tmp_path):
    """Overcommit, partial work at a deadline, top-k with error feedback, a compressed broadcast,
    a shared server link with aggregation time and outages resumed, Oort, FedCM's direction,
    AMSGrad's v_hat, a server optimizer, epochs, FedBuff (steps and a time budget), FedAsync with
    top-k: one stack, each run's folder that run alone's."""
    raw = {**BASE, "variants": LEVERS}
    lines = []
    res = run_compare(raw, out=tmp_path / "s", log=lines.append)
    assert len(res.ran) == len(LEVERS) and not res.failed
    assert lines[0] == f"plan: {len(LEVERS)} runs in 1 programs: 1 stacks of runs, 0 runs alone"
    alone = run_compare(raw, out=tmp_path / "a", stack=False)
    assert len(alone.ran) == len(LEVERS)
    assert_same(tmp_path / "s", tmp_path / "a", len(LEVERS))


def test_an_async_updates_versions_train_in_one_step_of_the_stack(tmp_path, monkeypatch):
    """FedBuff's updates ask for their versions' cohorts at once (``TrainRequests``): in a stack
    every part goes into the step's one batched call, the run gets its results back as a tuple,
    and the folders are each run's alone."""
    from fedsim.compare import stack
    from fedsim.engine.request import TrainRequests

    seen, inner = [], stack._answer_all

    def counted(cells, log=None):
        seen.extend(len(c.request.requests) for c in cells if isinstance(c.request, TrainRequests))
        return inner(cells, log)

    monkeypatch.setattr(stack, "_answer_all", counted)
    raw = {**BASE, "rounds": 8, "variants": {k: LEVERS[k] for k in ("fedbuff", "fedbuff_time")}}
    calls = counting(monkeypatch, "_answer")
    res = run_compare(raw, out=tmp_path / "s", seeds=[0, 1])
    assert len(res.ran) == 4 and not res.failed
    assert seen and min(seen) >= 2
    assert len(calls) < len(seen) + sum(seen)  # parts of one step share its call
    monkeypatch.undo()
    run_compare(raw, out=tmp_path / "a", seeds=[0, 1], stack=False)
    assert_same(tmp_path / "s", tmp_path / "a", 4)


def test_a_failing_batch_answers_a_runs_several_requests_alone():
    """When the batched call raises, a run that asked several requests at once gets their tuple
    from its own trainer, the other runs their own answers."""
    from types import SimpleNamespace as NS

    from fedsim.compare.stack import _batched
    from fedsim.engine.request import TrainRequests

    class Ask:
        def __init__(self, name):
            self.name = name

        def run(self):
            return f"alone {self.name}"

    cells = [NS(request=TrainRequests((Ask("a0"), Ask("a1")))), NS(request=Ask("b"))]
    out = {}

    def boom(reqs):
        assert [r.name for r in reqs] == ["a0", "a1", "b"]
        raise RuntimeError("batch")

    _batched(cells, [(0, 0), (0, 1), (1, None)], boom, out)
    assert out == {0: ("alone a0", "alone a1"), 1: "alone b"}
    out = {}
    _batched(cells, [(0, 0), (0, 1), (1, None)], lambda reqs: [f"batched {r.name}" for r in reqs], out)
    assert out == {0: ("batched a0", "batched a1"), 1: "batched b"}


def test_progress_note_of_a_stack():
    """Runs going, the least and most simulated time reached, ETA = elapsed / rounds written x rounds left."""
    from types import SimpleNamespace as NS

    from fedsim.compare.stack import _Cell, status_text

    run = NS(scenario=NS(rounds=10))
    cells = [_Cell(run, None, last=NS(round=3, sim_time=12.0), rounds=4),
             _Cell(run, None, last=NS(round=5, sim_time=30.5), rounds=6),
             _Cell(run, None)]  # not a round written yet: 10 left
    # written 10, left (10 - 4) + (10 - 6) + 10 = 20; 20 s elapsed -> 40 s
    assert status_text(cells, 20.0) == "3 running, t_sim 12.0-30.5s, ETA 0m40s"
    assert status_text(cells[2:], 5.0) == "1 running"


def test_stacks_in_parallel_processes(tmp_path):
    """--jobs 2: the two stacks (one per seed: data.seed unset) in two processes, same folders."""
    kw = {"algorithms": ["fedavg", "scaffold"], "seeds": [0, 1]}
    lines = []
    res = run_compare(BASE, out=tmp_path / "p", jobs=2, log=lines.append, **kw)
    assert len(res.ran) == 4 and not res.failed
    assert lines[0] == "plan: 4 runs in 2 programs: 2 stacks of runs, 0 runs alone"
    run_compare(BASE, out=tmp_path / "a", stack=False, **kw)
    assert_same(tmp_path / "p", tmp_path / "a", 4)


def test_stack_options_on_the_command_line(tmp_path, capsys):
    from fedsim.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["compare", str(path), "--stack-rows", "0", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().endswith("--stack-rows: must be an integer >= 1")
    assert not (tmp_path / "o").exists()


def _bn_model(input_shape, num_classes):
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 4), nn.BatchNorm1d(4), nn.Linear(4, num_classes))


def test_a_model_with_buffers_shares_the_program_but_trains_alone(tmp_path):
    """BatchNorm (the per-client engine path): the runs share the data and the program; each
    run's training is its own (said once per run); the folders are each run's alone."""
    registries.MODELS.register("bn_stack", _bn_model)
    try:
        raw = {**BASE, "model": {"name": "bn_stack"}}
        lines = []
        res = run_compare(raw, out=tmp_path / "s", algorithms=["fedavg", "fedprox"], log=lines.append)
        assert len(res.ran) == 2 and not res.failed
        assert lines[0] == "plan: 2 runs in 1 programs: 1 stacks of runs, 0 runs alone"
        said = [x for x in lines if "trained alone in its stack" in x]
        assert said == [f"{a}-wait seed 0: trained alone in its stack: model has buffers or vmap refuses it "
                        "(per-client engine path)" for a in ("fedavg", "fedprox")]
        run_compare(raw, out=tmp_path / "a", algorithms=["fedavg", "fedprox"], stack=False)
        assert_same(tmp_path / "s", tmp_path / "a", 2)
    finally:
        registries.MODELS.unregister("bn_stack")


# ----------------------------------------------------------------------------- batched evaluation
def _models(work, runs: int, seed: int) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [{k: v + 0.3 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in work.init_params.items()}
            for _ in range(runs)]


DIGITS = {"name": "digits", "clients": 12, "partition": {"name": "iid"}}


@pytest.mark.parametrize("model,data", [({"name": "logreg"}, BASE["data"]), ({"name": "mlp", "hidden": 16}, BASE["data"]),
                                        ({"name": "logreg"}, DIGITS)])
def test_batched_evaluation_equals_a_per_run_loop(model, data, monkeypatch):
    """The stacked evaluation of 5 models (test loss and accuracy, the training objective over an
    evaluation sample of 8 of the 12 clients, the per-client rows) equals each model evaluated
    alone bit for bit with one thread: batches of 64 (several and a remainder), runs in one chunk
    and in chunks of one; generated data (Synthetic: the sample is all x_train holds) and a dataset
    (digits: the sample's rows of x_train)."""
    import torch
    import torch.nn.functional as F

    from fedsim.engine import evaluate, stacked_eval
    from fedsim.engine.request import ClientEvalRequest, EvalRequest
    from fedsim.runner.build import build_run
    from fedsim.scenario import parse_scenario

    holdout = {"holdout": 0.2} if data["name"] == "digits" else {}
    raw = {**BASE, "model": model, "data": data, "eval": {"clients": 8, "per_client": {"clients": 5, "tiers": 2, **holdout}}}
    built = build_run(parse_scenario(raw))
    torch.set_num_threads(1)
    work = built.engine.work
    assert work.eval_clients is not None and len(work.eval_clients) == 8 and work.x_test.shape[0] > 64
    assert (work.eval_rows is not None) == (data["name"] == "digits")
    monkeypatch.setattr(evaluate, "EVAL_BATCH", 64)
    models = _models(work, 5, seed=1)
    reqs = [EvalRequest(work, m, train_loss=True) for m in models]
    assert len({stacked_eval.eval_key(r) for r in reqs}) == 1
    loop = [r.run() for r in reqs]
    assert stacked_eval.evaluate_together(reqs) == loop
    monkeypatch.setattr(stacked_eval, "EVAL_STACK_BYTES", 1)  # one run per chunk
    assert stacked_eval.evaluate_together(reqs) == loop
    monkeypatch.undo()
    # an independent reference for one model: the test set's mean cross-entropy and accuracy
    with torch.no_grad():
        logits = work.x_test.flatten(1) @ models[0]["1.weight"].T + models[0]["1.bias"] if model["name"] == "logreg" else \
            torch.func.functional_call(work.module, models[0], (work.x_test,))
    assert loop[0]["test_loss"] == pytest.approx(float(F.cross_entropy(logits, work.y_test)), rel=1e-6)
    assert loop[0]["test_acc"] == pytest.approx(float((logits.argmax(1) == work.y_test).double().mean()), abs=1e-12)
    assert 0 < loop[0]["train_loss"] < 100
    # 2 threads: within the bound docs/comparisons.md states
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        loop2 = [r.run() for r in reqs]
        for a, b in zip(stacked_eval.evaluate_together(reqs), loop2, strict=True):
            assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= BOUND * abs(b[k]) for k in a)
    finally:
        torch.set_num_threads(threads)
    # per client
    parts = built.client_evals.parts
    creqs = [ClientEvalRequest(work, m, parts) for m in models]
    assert len({stacked_eval.eval_key(r) for r in creqs}) == 1
    for (a1, l1), (a2, l2) in zip(stacked_eval.client_metrics_together(creqs), [r.run() for r in creqs], strict=True):
        assert np.array_equal(a1, a2, equal_nan=True) and np.array_equal(l1, l2, equal_nan=True)


def test_a_model_with_buffers_or_a_quadratic_evaluates_alone():
    """What the stacked forward cannot take is answered alone (no key)."""
    import torch

    from fedsim.engine.request import EvalRequest
    from fedsim.engine.stacked_eval import eval_key
    from fedsim.runner.build import build_run
    from fedsim.scenario import parse_scenario

    work = build_run(parse_scenario(BASE)).engine.work
    assert eval_key(EvalRequest(work, work.init_params)) is not None
    bufs = {**work.init_params, "bn.running_mean": torch.zeros(3)}
    assert eval_key(EvalRequest(work, bufs)) is None
    quad = {k: v for k, v in BASE.items() if k != "model"}
    quad["data"] = {"name": "quadratic", "centers": [[0.0], [1.0], [2.0], [3.0]]}
    qw = build_run(parse_scenario(quad)).engine.work
    assert eval_key(EvalRequest(qw, qw.init_params)) is None


@pytest.mark.parametrize("evals", [{"every": 2, "per_client": {"clients": 5, "tiers": 2}},
                                   {"every": 3, "every_seconds": 4.0, "per_client": {"clients": 5, "tiers": 2}}])
def test_grid_and_per_client_evaluations_are_batched_and_byte_identical(evals, tmp_path, monkeypatch):
    """Per round (a sink) and on a time grid (evals.csv), with per-client rows: a stack of 4 runs
    evaluates them together and writes the folders each run writes alone."""
    raw = {**BASE, "eval": evals}
    grid = {"algorithms": ["fedavg", "fednova"], "grid": {"algorithm.lr": [0.05, 0.1]}}
    sizes = counting(monkeypatch, "evaluate_together")
    client_sizes = counting(monkeypatch, "client_metrics_together")
    run_compare(raw, out=tmp_path / "s", **grid)
    monkeypatch.undo()
    run_compare(raw, out=tmp_path / "a", stack=False, **grid)
    assert_same(tmp_path / "s", tmp_path / "a", 4)
    assert len(list((tmp_path / "s").glob("*/seed0/client_evals.csv"))) == 4
    assert sizes and max(sizes) == 4 and client_sizes and max(client_sizes) == 4


def test_stacks_are_halved_until_the_parallel_processes_share_them_evenly():
    from fedsim.compare.stacks import Stack, balanced

    def sizes(stacks):
        return [len(s.runs) for s in stacks]

    three = [Stack(tuple(f"{g}{i}" for i in range(4))) for g in "abc"]
    assert sizes(balanced(three, 1)) == [4, 4, 4]
    halved = balanced(three, 2)  # 3 stacks on 2 processes: the first is halved, in place
    assert sizes(halved) == [2, 2, 4, 4] and [r for s in halved for r in s.runs] == [r for s in three for r in s.runs]
    assert sizes(balanced([Stack(tuple("abcde"))], 2)) == [3, 2]
    assert sizes(balanced([Stack(tuple("abc"))], 4)) == [1, 1, 1]  # no stack of two runs left to halve
    assert all(s.alone for s in balanced([Stack(tuple("abc"))], 4)[1:])
    assert sizes(balanced([Stack(("a",), "alone")], 2)) == [1]


def test_what_a_stack_shares_in_its_process_is_what_docs_say_and_holds_the_same_values(tmp_path):
    """docs/comparisons.md "Shared in the process": generated clients kept up to 480 MiB (least
    recently used dropped first), a loaded trace's per-client replays built once (two kept)."""
    import numpy as np

    from fedsim.clock import trace_time
    from fedsim.clock.trace import load_trace
    from fedsim.data import SyntheticPopulation

    from fedsim.compare.stacks import _HALVED

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "comparisons.md").read_text().split())
    assert "beyond 480 MiB" in text and "the last two traces kept" in text
    assert SyntheticPopulation.KEEP_BYTES == 480 * 2**20 and trace_time.KEEP_BUILT == 2
    assert f"`{_HALVED}`" in text

    pop = SyntheticPopulation(1.0, 1.0, clients=6, seed=3)
    fresh = SyntheticPopulation(1.0, 1.0, clients=6, seed=3)
    size = [sum(a.nbytes for a in fresh.parts(k)) for k in range(3)]
    object.__setattr__(pop, "_kept", type(pop._kept)(size[0] + max(size[1], size[2])))
    for k in (0, 1, 0, 2):  # 2 pushes out the least recently used: 1
        pop.parts(k)
    assert list(pop._kept.items) == [0, 2]
    for got, want in zip(pop.gather([2, 1, 0]), fresh.gather([2, 1, 0])):  # kept or generated: equal
        assert np.array_equal(got, want)
    assert not pop.parts(0)[0].flags.writeable

    path = tmp_path / "t.csv"
    path.write_text("client,start,end,online,speed\n0,0,10,1,2.0\n0,10,20,0,0\n1,0,20,1,1.0\n")
    tr = load_trace(path, 2)
    a = trace_time.traced(tr, "cycle", None, False)
    assert trace_time.traced(load_trace(path, 2), "cycle", None, False) is a  # the same loaded trace
    assert trace_time.traced(tr, "last", None, False) is not a
    assert a[3] == (2.0, 1.0) and [r.work(20.0) for r in a[1]] == [20.0, 20.0]


def test_a_stacks_data_is_freed_before_the_next_stack_of_the_process_builds_its_own(tmp_path, monkeypatch):
    """Three seeds are three stacks run one after another in one process: when each starts, the
    generated populations of the stacks before (and the clients they keep) are gone."""
    import weakref

    from fedsim.compare import stack as stack_module

    seen, alive = [], []
    held = stack_module._held_once

    def watched(source):
        alive.append(sum(r() is not None for r in seen))
        seen.append(weakref.ref(source))
        return held(source)

    monkeypatch.setattr(stack_module, "_held_once", watched)
    run_compare({**BASE, "rounds": 2}, out=tmp_path / "c", algorithms=["fedavg", "fednova"], seeds=[0, 1, 2],
                log=lambda line: None)
    assert len(seen) == 3 and alive == [0, 0, 0]
