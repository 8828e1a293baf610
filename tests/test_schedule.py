"""Clock-only mode (issue 5, item 5): ``fedsim run X.yaml --schedule-only``.

The vectorised writer (``fedsim/clock_only.py``: the clock's numpy tables, formatted column by
column) writes cell for cell what a trained run of the same scenario writes through the
row-by-row ``TableWriter`` from its engine records, for every policy. Its speed (10,000 clients
x 1,000 rounds) is a benchmark, not a test: ``benchmarks/bench_schedule.py``.
"""

from __future__ import annotations

import pytest

from fedsim.cli import main
from fedsim.report.tables import CLIENT_COLUMNS
from fedsim.scenario import parse_scenario
from fedsim.clock_only import SCHEDULE_ROUND_COLUMNS

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


def _cells(path) -> tuple[list[str], list[list[str]]]:
    import csv

    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f))
    return header, rows


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_only_writes_the_trained_runs_clock_columns(case, tmp_path, write_yaml):
    """``--schedule-only`` (the vectorised writer over the clock's numpy tables) writes, cell for
    cell as text, what a trained run of the same scenario writes (its engine records, the
    row-by-row writer) in every column the two share, for every policy: rounds.csv whole, and
    clients.csv but ``a_norm`` (nothing was trained) and, under async, ``weight`` (a trained
    run writes the algorithm's staleness coefficient there, the schedule p_i)."""
    sc = scenario(CASES[case])
    path = write_yaml(sc.model_dump(mode="json", exclude_none=True))
    assert main(["run", str(path), "--schedule-only", "--out", str(tmp_path / "plan"), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    for name, columns in (("rounds.csv", SCHEDULE_ROUND_COLUMNS), ("clients.csv", CLIENT_COLUMNS)):
        (plan_head, plan), (run_head, run) = _cells(tmp_path / "plan" / name), _cells(tmp_path / "run" / name)
        assert plan_head == columns and len(plan) == len(run) and (name != "rounds.csv" or len(plan) == sc.rounds)
        skip = {"a_norm"} | ({"weight"} if case == "async" else set())
        for col in (c for c in columns if c not in skip):
            i, j = plan_head.index(col), run_head.index(col)
            assert [r[i] for r in plan] == [r[j] for r in run], (name, col)
    statuses = {r[plan_head.index("status")] for r in plan}
    if case == "deadline_outages":
        assert {"offline", "completed"} <= statuses
    if case == "async":  # the schedule's async weight is p_i: 1/12 for 12 equally weighted clients
        assert {r[plan_head.index("weight")] for r in plan} == {repr(1 / 12)}
    if case in ("deadline_outages", "window_markov"):  # lost jobs carry weight 0 (issue 19 point 2)
        lost = [r for r in plan if r[plan_head.index("status")] != "completed"]
        assert lost and {r[plan_head.index("weight")] for r in lost} == {"0.0"}


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


