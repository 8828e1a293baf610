"""Clock-only mode (issue 5, item 5): ``fedsim run X.yaml --schedule-only``.

The vectorised writer (``fedsim/schedule.py``: the clock's numpy tables, formatted column by
column) writes byte for byte what the row-by-row ``TableWriter`` writes from the clock's plans,
for every policy (window on the clock's vectorised path; wait / deadline / async / outages on
the SimPy path). Its speed (10,000 clients x 1,000 rounds) is a benchmark, not a test:
``benchmarks/bench_schedule.py``.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from fedsim.cli import main
from fedsim.clock import Clock, Population
from fedsim.engine.run import round_weights
from fedsim.report.tables import CLIENT_COLUMNS, TableWriter
from fedsim.scenario import parse_scenario
from fedsim.schedule import SCHEDULE_ROUND_COLUMNS, client_sizes_and_weights, run_schedule

BASE = {
    "name": "sched", "seed": 5, "rounds": 6,
    "data": {"name": "quadratic", "clients": 12, "dim": 2},
    "system": {"speed": {"dist": "lognormal", "median": 3.0, "sigma": 0.6}, "latency": 0.25},
    "round": {"policy": "window", "window": 2.0, "max_local_steps": 9},
}

CASES = {
    "window_fast": {},
    "window_weighted_slowdown": {"round.clients_per_round": 5, "round.sampling": "weighted",
                                 "system.slowdown": {"dist": "uniform", "low": 1.0, "high": 3.0}},
    "window_markov": {"system.availability": {"model": "markov", "mean_online": 6.0, "mean_offline": 2.0}},
    "wait_epochs": {"data": {"name": "synthetic", "clients": 12}, "round.policy": "wait",
                    "round.local_epochs": {"dist": "randint", "low": 1, "high": 2}, "round.window": None},
    "deadline_outages": {"round.policy": "deadline", "round.deadline": 3.0, "round.local_steps": 6,
                         "round.window": None,
                         "system.availability": [[[1.0, 2.5]], [], [[0.0, 4.0]]] + [[]] * 9},
    "async": {"round.policy": "async", "round.local_steps": 4, "round.concurrency": 4, "round.buffer": 2,
              "round.window": None, "algorithm": {"name": "fedbuff"}},
}


def scenario(overrides: dict):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for key, value in overrides.items():
        head, _, tail = key.partition(".")
        if not tail:
            raw[head] = value
        elif value is None:
            raw[head].pop(tail, None)
        else:
            raw[head][tail] = value
    return parse_scenario(raw)


def reference(sc, out):
    """The row-by-row writer (the pre-vectorised implementation), from ``Clock.plans()``."""
    out.mkdir(parents=True)
    sizes, weights = client_sizes_and_weights(sc)
    clock = Clock(sc.system.value(), sc.round.value(sc.algorithm.batch_size), Population.of(sizes, weights),
                  seed=sc.seed)
    sync = sc.round.policy != "async"
    rounds_w = TableWriter(out / "rounds.csv", SCHEDULE_ROUND_COLUMNS)
    clients_w = TableWriter(out / "clients.csv", CLIENT_COLUMNS)
    for plan in islice(clock.plans(), sc.rounds):
        # a trained run's weight column: the engine's aggregation weights (sync), p_i (async)
        agg = round_weights(plan) if sync else {j.client: j.weight for j in plan.jobs}
        done = [j.steps for j in plan.jobs if j.status == "completed" and j.steps > 0]
        rounds_w.write([dict(
            round=plan.round, sim_time=plan.close, participants=len(done),
            tau_mean=float(np.mean(done)) if done else None,
            tau_min=min(done) if done else None, tau_max=max(done) if done else None,
            available=plan.available,
        )])
        clients_w.write(
            dict(round=plan.round, client=j.client, status=j.status, steps=j.steps, start=j.start,
                 end=j.end, version=j.version, staleness=j.staleness, weight=agg.get(j.client, 0.0),
                 download=j.download, upload=j.upload)
            for j in plan.jobs
        )
    rounds_w.close()
    clients_w.close()


@pytest.mark.parametrize("case", list(CASES))
def test_vectorised_writer_is_byte_identical(case, tmp_path):
    sc = scenario(CASES[case])
    run_schedule(sc, tmp_path / "new")
    reference(sc, tmp_path / "ref")
    for name in ("rounds.csv", "clients.csv"):
        new, ref = (tmp_path / "new" / name).read_bytes(), (tmp_path / "ref" / name).read_bytes()
        if case == "async" and name == "clients.csv":
            # the SimPy clock starts at the int 0 (Job.start == 0, written "0"); the tables hold
            # float64 ("0.0"): the same numbers
            import pandas as pd

            pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "new" / name), pd.read_csv(tmp_path / "ref" / name),
                                          check_dtype=False)
            continue
        assert new == ref, name
    statuses = set((tmp_path / "new" / "clients.csv").read_text().split(","))
    if case == "deadline_outages":
        assert {"offline", "completed"} <= statuses


def test_cli_schedule_only(tmp_path, write_yaml):
    path = write_yaml({**BASE, "model": {"name": "logreg"}, "data": {"name": "synthetic", "clients": 8},
                       "round": {**BASE["round"], "clients_per_round": 4}})
    out = tmp_path / "plan"
    assert main(["run", str(path), "--schedule-only", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["clients.csv", "rounds.csv", "run.lock", "scenario.yaml"]
    import pandas as pd

    rounds, clients = pd.read_csv(out / "rounds.csv"), pd.read_csv(out / "clients.csv")
    assert list(rounds.columns) == SCHEDULE_ROUND_COLUMNS and len(rounds) == 6
    assert list(clients.columns) == CLIENT_COLUMNS and len(clients) == 6 * 4
    assert clients["a_norm"].isna().all()
    assert (rounds["sim_time"] == 2.0 * (rounds["round"] + 1)).all()
    assert main(["run", str(path), "--schedule-only", "--out", str(out)]) == 2  # refuses to overwrite


@pytest.mark.parametrize("case", ["deadline_outages", "window_weighted_slowdown", "wait_epochs"])
def test_schedule_weight_column_equals_a_trained_runs(case, tmp_path, write_yaml):
    """Issue 19 point 2: rows of failed, dropped and offline jobs carry weight 0 and the selected
    clients' weights are redistributed over those that reported, in both modes."""
    import pandas as pd

    sc = scenario(CASES[case])
    path = write_yaml(sc.model_dump(mode="json", exclude_none=True))
    assert main(["run", str(path), "--schedule-only", "--out", str(tmp_path / "plan")]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    plan, run = (pd.read_csv(tmp_path / d / "clients.csv") for d in ("plan", "run"))
    assert len(plan) == len(run)
    assert plan["weight"].tolist() == run["weight"].tolist()
    lost = plan["status"] != "completed"
    if case == "deadline_outages":
        assert lost.any()
    assert (plan.loc[lost, "weight"] == 0).all()
