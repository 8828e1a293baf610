"""Time-to-target, per-run summaries and ``fedsim compare`` (grid, shared trace, resume, tables)."""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
import yaml

import fedsim
from fedsim import compare as cmp
from fedsim.compare import execute
from fedsim.cli import main
from fedsim.report.summary import aggregate_seeds, rounds_to_target, run_summary, time_to_target
from fedsim.scenario import ScenarioError

from _fake_runs import write_compare, write_run


def _table(times, accs):
    return pd.DataFrame({"round": range(len(times)), "sim_time": times, "test_acc": accs})


# --------------------------------------------------------------------------- time to target
def test_time_to_target_interpolates_between_evaluations():
    df = _table([10.0, 20.0, 30.0], [0.5, 0.7, 0.9])
    assert time_to_target(df, 0.8) == pytest.approx(25.0, abs=1e-12)
    assert time_to_target(df, 0.75) == pytest.approx(22.5, abs=1e-12)


def test_time_to_target_never_reached_is_nan():
    df = _table([10.0, 20.0, 30.0], [0.5, 0.7, 0.79])
    assert math.isnan(time_to_target(df, 0.8))
    assert math.isnan(rounds_to_target(df, 0.8))
    assert math.isnan(time_to_target(_table([], []), 0.5))


def test_time_to_target_exact_hit_and_ties():
    # exact hit: its own time, exactly (no interpolation rounding)
    df = _table([0.1, 0.3, 0.7], [0.2, 0.8, 0.9])
    assert time_to_target(df, 0.8) == 0.3
    # ties at the target: the first of them
    df = _table([10.0, 20.0, 30.0, 40.0], [0.5, 0.8, 0.8, 0.85])
    assert time_to_target(df, 0.8) == 20.0
    assert rounds_to_target(df, 0.8) == 2.0
    # equal accuracies below the target do not divide by zero
    df = _table([10.0, 20.0, 30.0], [0.6, 0.6, 1.0])
    assert time_to_target(df, 0.8) == pytest.approx(25.0)


def test_time_to_target_first_evaluation_already_there():
    assert time_to_target(_table([5.0, 10.0], [0.9, 0.95]), 0.8) == 5.0


def test_time_to_target_skips_rows_without_evaluation():
    df = _table([10.0, 20.0, 30.0, 40.0, 50.0], [0.4, np.nan, 0.6, np.nan, 1.0])
    # crossing between (30, 0.6) and (50, 1.0); the NaN row at 40 is ignored
    assert time_to_target(df, 0.8) == pytest.approx(40.0)
    assert rounds_to_target(df, 0.8) == 5.0
    # also when the CSV leaves the cell empty (read back as NaN)
    assert time_to_target(df.astype({"test_acc": object}).fillna(""), 0.8) == pytest.approx(40.0)


def test_time_to_target_falls_back_after_a_dip():
    # the first crossing counts even if accuracy later dips below again
    df = _table([1.0, 2.0, 3.0, 4.0], [0.5, 0.9, 0.7, 0.95])
    assert time_to_target(df, 0.8) == pytest.approx(1.75)


def test_loss_target():
    df = pd.DataFrame({"round": [0, 1, 2], "sim_time": [1.0, 2.0, 3.0], "test_loss": [2.0, 1.0, 0.5]})
    assert time_to_target(df, 0.75, metric="test_loss", higher_is_better=False) == pytest.approx(2.5)


def test_run_summary_and_seed_aggregation():
    df = _table([10.0, 20.0, 30.0], [0.5, 0.9, 0.7]).assign(test_loss=[1.0, 0.5, np.nan], train_loss=1.0,
                                                              diverged=0)
    s = run_summary(df, 0.8)
    assert s["final_acc"] == 0.7 and s["best_acc"] == 0.9 and s["final_loss"] == 0.5
    assert s["sim_time"] == 30.0 and s["rounds"] == 3 and s["diverged"] == 0
    assert s["time_to_target"] == pytest.approx(17.5)
    assert math.isnan(run_summary(df, None)["time_to_target"])
    runs = pd.DataFrame({"cell": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0],
                         "final_acc": [0.5, 0.7, 0.9, 0.4], "time_to_target": [10.0, np.nan, 20.0, np.nan]})
    agg = aggregate_seeds(runs, ["cell"], ["final_acc", "time_to_target"]).set_index("cell")
    assert agg.loc["a", "seeds"] == 3 and agg.loc["a", "reached"] == 2 and agg.loc["b", "reached"] == 0
    assert agg.loc["a", "final_acc_mean"] == pytest.approx(0.7)
    assert agg.loc["a", "final_acc_std"] == pytest.approx(0.2)
    assert agg.loc["a", "time_to_target_mean"] == pytest.approx(15.0)
    assert math.isnan(agg.loc["b", "time_to_target_mean"]) and math.isnan(agg.loc["b", "final_acc_std"])


# --------------------------------------------------------------------------- grid parsing
def test_parse_grid_and_split_values():
    assert cmp.split_values("0.01, 0.05") == ["0.01", "0.05"]
    assert cmp.split_values("[1,2],[3, 4],{a: 1, b: 2}") == ["[1,2]", "[3, 4]", "{a: 1, b: 2}"]
    g = cmp.parse_grid(["algorithm.lr=0.01,0.05", "system.speed=[1,2],[3,4]"])
    assert g == {"algorithm.lr": [0.01, 0.05], "system.speed": [[1, 2], [3, 4]]}
    for bad in (["algorithm.lr"], ["=1,2"], ["a.b=1", "a.b=2"]):
        with pytest.raises(ScenarioError):
            cmp.parse_grid(bad)


QUAD = {
    "name": "tiny", "seed": 0, "rounds": 3,
    "data": {"name": "quadratic", "centers": [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]},
    "system": {"speed": {"dist": "uniform", "low": 1.0, "high": 4.0}, "latency": 0.25},
    "round": {"policy": "window", "window": 2.0, "local_steps": 3},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
    "engine": {"dtype": "float64"},
}


def test_plan_compare_cells_share_everything_but_their_keys(tmp_path):
    runs, keys, notes = cmp.plan_compare(QUAD, out=tmp_path, algorithms=["fedavg", "fednova"],
                                         policies=["window", "wait"], seeds=[0, 1],
                                         grid={"algorithm.lr": [0.1, 0.2]})
    assert keys == ["algorithm", "policy", "algorithm.lr"] and not notes
    assert len(runs) == 2 * 2 * 2 * 2
    names = {r.cell.name for r in runs}
    assert "fednova-wait-algorithm.lr=0.2" in names
    for r in runs:
        sc = r.scenario
        assert sc.seed == r.seed and sc.system == runs[0].scenario.system and sc.data == runs[0].scenario.data
        assert (sc.algorithm.name, sc.round.policy, sc.algorithm.lr) == tuple(r.cell.keys.values())
        assert r.folder == tmp_path / r.cell.name / f"seed{r.seed}"


def test_plan_compare_invalid_policy_names_the_cell(tmp_path):
    base = {**QUAD, "round": {"policy": "window", "window": 2.0}}  # no local_steps for wait
    with pytest.raises(ScenarioError, match=r"cell fedavg-wait: round.local_steps"):
        cmp.plan_compare(base, out=tmp_path, policies=["window", "wait"])
    with pytest.raises(ScenarioError, match="--seeds for this key"):
        cmp.plan_compare(QUAD, out=tmp_path, grid={"seed": [1, 2]})


def test_plan_compare_variants_are_an_axis(tmp_path):
    base = {**QUAD, "round": {"policy": "window", "window": 2.0},
            "variants": {"window": {"round.policy": "window"},
                         "wait": {"round.policy": "wait", "round.local_steps": 3}}}
    runs, keys, _ = cmp.plan_compare(base, out=tmp_path, algorithms=["fedavg", "fednova"], seeds=[0, 1])
    assert keys == ["variant", "algorithm", "policy"]
    assert sorted({r.cell.name for r in runs}) == ["fedavg-wait", "fedavg-window", "fednova-wait", "fednova-window"]
    for r in runs:
        assert r.scenario.round.policy == r.cell.keys["policy"] == r.cell.keys["variant"]
        assert r.scenario.round.local_steps == (3 if r.cell.keys["variant"] == "wait" else None)
        assert r.scenario.variants is None
    runs, _, _ = cmp.plan_compare(base, out=tmp_path, variants=["wait"])
    assert [r.cell.name for r in runs] == ["fedavg-wait"]
    with pytest.raises(ScenarioError, match="--variants nope: not in the scenario"):
        cmp.plan_compare(base, out=tmp_path, variants=["nope"])


def test_plan_compare_skips_async_mismatches(tmp_path):
    base = {**QUAD, "round": {**QUAD["round"], "concurrency": 2}}
    runs, _, notes = cmp.plan_compare(base, out=tmp_path, algorithms=["fedavg", "fedbuff"],
                                      policies=["window", "async"])
    assert sorted(r.cell.name for r in runs) == ["fedavg-window", "fedbuff-async"]
    assert len(notes) == 2


# --------------------------------------------------------------------------- compare with a fake runner
@pytest.fixture
def fake_runner(monkeypatch):
    calls = []

    def fake(scenario_text, folder, table_format="csv"):
        sc = yaml.safe_load(scenario_text)
        calls.append(folder)
        bias = 0.1 if sc["algorithm"]["name"] == "fednova" else 0.0
        write_run(folder, seed=sc["seed"], algorithm=sc["algorithm"]["name"], policy=sc["round"]["policy"],
                  rounds=sc["rounds"], speed_bias=bias, partition=False)
        with open(os.path.join(folder, "scenario.yaml"), "w") as f:
            f.write(scenario_text)
        return {"rounds": sc["rounds"], "sim_time": 1.0, "test_acc": 0.5, "wall": 0.0}

    monkeypatch.setattr(execute, "run_one", fake)
    return calls


def test_compare_writes_summary_and_resumes(tmp_path, fake_runner):
    out = tmp_path / "cmp"
    # the fake replaces run_one, the one-program-per-run path (stack=False)
    kw = dict(out=out, algorithms=["fedavg", "fednova"], policies=["window", "wait"], seeds=[0, 1, 2], target=0.6,
              stack=False)
    res = cmp.run_compare(QUAD, **kw)
    assert len(fake_runner) == 12 and len(res.ran) == 12 and not res.skipped and not res.failed
    runs, summary = cmp.load_summary(out)
    assert len(runs) == 12 and len(summary) == 4
    assert list(summary.columns[:4]) == ["cell", "algorithm", "policy", "target"]
    for col in ("final_acc_mean", "final_acc_std", "best_acc_mean", "final_loss_mean", "sim_time_mean",
                "rounds_mean", "time_to_target_mean", "time_to_target_std", "seeds", "reached"):
        assert col in summary.columns
    s = summary.set_index("cell")
    # fake accuracies 0.30, 0.45, 0.60 (+0.1 for fednova, +0.01 * seed); windows of 10 s
    assert s.loc["fedavg-window", "time_to_target_mean"] == pytest.approx(np.mean([30.0, 29 + 1 / 3, 28 + 2 / 3]))
    assert s.loc["fednova-wait", "reached"] == 3 and s.loc["fedavg-wait", "seeds"] == 3
    assert s.loc["fednova-window", "time_to_target_mean"] < s.loc["fedavg-window", "time_to_target_mean"]
    assert s.loc["fedavg-window", "rounds_mean"] == 3
    assert set(runs["seed"]) == {0, 1, 2}

    # rerun: everything is done, nothing runs; a new target only recomputes the tables
    res = cmp.run_compare(QUAD, **{**kw, "target": 0.99})
    assert len(fake_runner) == 12 and len(res.skipped) == 12
    assert res.summary["reached"].sum() == 0

    # an interrupted cell (last round missing) and a changed scenario rerun; the others do not
    rounds = out / "fedavg-wait" / "seed1" / "rounds.csv"
    rounds.write_text("".join(rounds.read_text().splitlines(keepends=True)[:-1]))
    (out / "fednova-window" / "seed2" / "model.pt").unlink()
    res = cmp.run_compare(QUAD, **kw)
    assert sorted(res.ran) == ["fedavg-wait seed 1", "fednova-window seed 2"] and len(fake_runner) == 14
    res = cmp.run_compare(QUAD, **{**kw, "seeds": [0], "overrides": ["algorithm.lr=0.3"]})
    assert len(res.ran) == 4
    res = cmp.run_compare(QUAD, **{**kw, "seeds": [0], "overrides": ["algorithm.lr=0.3"], "force": True})
    assert len(res.ran) == 4


def test_load_compare_is_tidy(tmp_path):
    out = write_compare(tmp_path / "c")
    df = fedsim.load_compare(out)
    assert list(df.columns[:4]) == ["cell", "algorithm", "policy", "seed"]
    assert len(df) == 2 * 2 * 4  # cells x seeds x rounds
    assert df.groupby(["cell", "seed"]).size().eq(4).all()
    clients = fedsim.load_compare(out, table="clients")
    assert {"cell", "seed", "client", "status"} <= set(clients.columns)
    # a plain folder of runs (no compare.yaml): cells from the folder names
    (out / "compare.yaml").unlink()
    df2 = fedsim.load_compare(out)
    assert sorted(df2["cell"].unique()) == ["fedavg-window", "fednova-window"] and len(df2) == len(df)
    one = fedsim.load_compare(out / "fedavg-window" / "seed1")
    assert len(one) == 4 and one["seed"].unique().tolist() == [1]


# --------------------------------------------------------------------------- the real thing
def _has_clock():
    try:
        from fedsim.clock import Clock  # noqa: F401
    except ImportError:
        return False
    return True


needs_clock = pytest.mark.skipif(not _has_clock(), reason="fedsim.clock not available yet")


@needs_clock
def test_compare_real_runs_parallel_same_trace_and_resume(tmp_path, write_yaml, capsys):
    path = write_yaml(QUAD)
    out = tmp_path / "cmp"
    argv = ["compare", str(path), "--algorithms", "fedavg,fednova", "--policies", "window,wait",
            "--seeds", "0,1", "--grid", "algorithm.lr=0.1,0.3", "--target", "0.5", "--jobs", "2",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    runs, summary = cmp.load_summary(out)
    assert len(runs) == 16 and len(summary) == 8 and (runs["complete"] == 1).all()
    assert (runs["rounds"] == 3).all() and set(runs["algorithm.lr"]) == {0.1, 0.3}
    assert "dist_to_opt_mean" in summary.columns
    # every cell of a seed ran on the same system trace
    c = fedsim.load_compare(out, table="clients")
    for (pol, seed), g in c.groupby(["policy", "seed"]):
        traces = {cell: h[["round", "client", "status", "start", "end", "steps"]].to_numpy().tolist()
                  for cell, h in g.groupby("cell")}
        assert len(traces) == 4 and all(t == next(iter(traces.values())) for t in traces.values())
    assert c[c["policy"] == "window"].groupby("seed")["steps"].apply(tuple).nunique() == 2  # seeds differ
    # resume: nothing reruns (model files untouched)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("model.pt")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("model.pt")} == mtimes
    assert "0 run, 16 already done" in capsys.readouterr().out


def test_compare_cli_errors_exit_2(tmp_path, write_yaml, capsys):
    path = write_yaml({**QUAD, "round": {"policy": "window", "window": 2.0}})
    assert main(["compare", str(path), "--policies", "window,wait", "--out", str(tmp_path / "x")]) == 2
    assert "cell fedavg-wait: round.local_steps" in capsys.readouterr().err
    assert main(["compare", str(path), "--grid", "algorithm.lr", "--out", str(tmp_path / "x")]) == 2
    assert main(["compare", str(path), "--seeds", "a,b", "--out", str(tmp_path / "x")]) == 2
    assert main(["compare", str(path), "--algorithms", "nope", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_summarize_reads_each_runs_scenario_once(tmp_path, monkeypatch):
    """runs.csv's completeness and fairness come from one read of each run's scenario.yaml (was
    two: one per reader); a run whose scenario asks for more rounds than it wrote is incomplete."""
    from pathlib import Path

    from fedsim.report.results import summarize

    out = write_compare(tmp_path / "c")  # 2 cells x 2 seeds, 4 rounds each (rounds 0..3)
    sc = out / "fednova-window" / "seed1" / "scenario.yaml"
    sc.write_text(sc.read_text().replace("rounds: 4", "rounds: 5"))
    reads = []
    inner = Path.read_text

    def counted(self, *a, **k):
        if self.name == "scenario.yaml":
            reads.append(self)
        return inner(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", counted)
    runs, _ = summarize(out, write=False)
    assert len(reads) == 4 and len(set(reads)) == 4
    assert runs.set_index(["cell", "seed"])["complete"].to_dict() == {
        ("fedavg-window", 0): 1, ("fedavg-window", 1): 1, ("fednova-window", 0): 1, ("fednova-window", 1): 0}
