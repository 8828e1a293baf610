"""A Ray comparison equals the local one, ``info.yaml`` included (issue 35 item 7): each run's
thread budget is fixed when the comparison is planned (the driver's, by the rule of a local run),
the task asks Ray for the planned CPUs and the worker runs inside ``fixed_budget``, so it chooses
the threads and the chunk a local run chooses. Before, a Ray worker trained with 1 thread (Ray sets
``OMP_NUM_THREADS`` to the task's CPUs, 1) where a local run uses the budget (2 on a 2-core
machine): info.yaml said ``threads: 1`` against 2, and rounds.csv's losses differed from round 2.

The suite's ``OMP_NUM_THREADS=2`` (tests/conftest.py) is unset here: Ray passes an inherited value
on to its workers unchanged, which hid the difference from the suite. A model whose rule gives the budget: logistic regression on Synthetic, batched (chunk 128). Two
cells, three rounds, on a Ray instance of this machine that fedsim starts. ``FEDSIM_HOLD_CORES=0``
in both: then ``threads.waited_for_cores_s`` (a measurement of waiting, not of the run) is 0 in
both, and every byte is compared. Two stacks of two runs (one per seed), each one Ray task, as the
local comparison runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

from fedsim.compare import run_compare  # noqa: E402
from fedsim.compare import ray_executor as rx  # noqa: E402
from fedsim.compare.plan import plan_compare  # noqa: E402
from fedsim.engine.threads import fixed_budget, thread_budget  # noqa: E402

LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    **{k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
    **{k: "127.0.0.1,localhost,::1" for k in ("no_proxy", "NO_PROXY")},
}

SYN = {
    "name": "threads", "seed": 0, "rounds": 3,
    "data": {"name": "synthetic", "clients": 12},
    "model": {"name": "logreg"},
    "system": {"speed": {"dist": "uniform", "low": 1.0, "high": 4.0}, "latency": 0.1},
    "round": {"policy": "wait", "local_steps": 5, "clients_per_round": 8},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 8},
    "checkpoint": {"every": 2},
}


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_planned_threads_follow_the_rule_and_the_budget_is_fixed():
    runs, _, _ = plan_compare(SYN, out="o")
    assert rx.planned_threads(runs[0].scenario, 5) == 5  # batched logistic regression: the budget
    assert rx.cell_resources(runs[0].scenario, 1.0, 3) == {"num_cpus": 3, "num_gpus": 0.0}
    pinned, _, _ = plan_compare({**SYN, "engine": {"threads": 2}}, out="o")
    assert rx.planned_threads(pinned[0].scenario, 5) == 2
    quad_raw = {k: v for k, v in SYN.items() if k != "model"}
    quad, _, _ = plan_compare({**quad_raw, "data": {"name": "quadratic", "clients": 8, "dim": 2}}, out="o")
    assert rx.planned_threads(quad[0].scenario, 5) == 1
    before = thread_budget()
    with fixed_budget(7):
        assert thread_budget() == 7
    assert thread_budget() == before
    with pytest.raises(ValueError):
        with fixed_budget(0):
            pass


def test_ray_comparison_equals_the_local_one_with_info_yaml(tmp_path, monkeypatch):
    # OMP_NUM_THREADS unset, as in a user's shell (tests/conftest.py sets it to 2 for the suite, and
    # Ray leaves a value it inherits alone: the workers would then get 2 by accident, not by plan)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if thread_budget() < 2:
        pytest.skip("needs a machine where a local run uses 2 threads or more")
    for k, v in LOOPBACK.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FEDSIM_HOLD_CORES", "0")
    # two stacks (data.seed unset: one per seed) of two runs each, run as one Ray task per stack
    grid = dict(algorithms=["fedavg", "fednova"], seeds=[0, 1])
    local_lines = []
    local = run_compare(SYN, out=tmp_path / "local", log=local_lines.append, **grid)
    assert len(local.ran) == 4 and not local.failed
    info = yaml.safe_load((tmp_path / "local" / "fedavg-wait" / "seed0" / "info.yaml").read_text())
    assert info["threads"]["threads"] == thread_budget() >= 2 and info["threads"]["rule"] == "budget"
    assert info["clients_per_batch"] > 1
    assert not ray.is_initialized()
    notes = []
    res = run_compare(SYN, out=tmp_path / "ray", executor="ray", log=notes.append, **grid)
    assert len(res.ran) == 4 and not res.failed, notes
    assert not ray.is_initialized()
    plan = ["plan: 4 runs in 2 programs: 2 stacks of runs, 0 runs alone",
            "  program 1: stack of 2 runs (16 rows): fedavg-wait seed 0, fednova-wait seed 0",
            "  program 2: stack of 2 runs (16 rows): fedavg-wait seed 1, fednova-wait seed 1"]
    assert local_lines[:3] == plan and notes[:3] == plan  # the plan first, as locally
    a, b = tree(tmp_path / "local"), tree(tmp_path / "ray")
    assert sorted(a) == sorted(b) and sum(k.endswith("/info.yaml") for k in a) == 4
    for k in a:
        assert a[k] == b[k], k


class _FakeRay:
    def __init__(self, *resources):
        self._nodes = [{"Alive": True, "Resources": r} for r in resources]

    def nodes(self):
        return self._nodes


def test_a_node_smaller_than_the_budget_gets_a_note_not_a_refusal():
    runs, _, _ = plan_compare(SYN, out="o")
    session = rx.RaySession(rx.RayOptions(), log=(lines := []).append)
    session.ray, session.owned, session.budget = _FakeRay({"CPU": 1.0}), True, 4
    session._check_fit(runs)  # unpinned: asks for 1 CPU and runs 4 threads
    assert session.largest_cpus == 1.0
    assert lines == ["runs planned with this machine's thread budget (4 threads) ask Ray for the largest node's 1 "
                     "CPUs and still run 4 threads, as locally"]
    pinned, _, _ = plan_compare({**SYN, "engine": {"threads": 4}}, out="o")
    with pytest.raises(rx.ScenarioError, match=r"^cell fedavg-wait: asks for 4 CPUs \(engine.threads; the largest "
                                               r"node has 1\) on this machine's Ray instance$"):
        session._check_fit(pinned)


def test_comparisons_doc_states_the_plan():
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "comparisons.md").read_text().split())
    assert "`info.yaml` included -- its `threads` block too (threads, rule, budget, rounds held)" in text
    assert "The budget is fixed when the comparison opens: the driver's own" in text
    assert ("`tests/test_compare_ray_threads.py` compares every file of a Ray comparison of two stacks of two runs"
            in text)
    ray_part = text.split("## On a Ray cluster", 1)[1].split("### Starting a cluster", 1)[0]
    assert "`info.yaml`'s `threads` block aside" not in ray_part
