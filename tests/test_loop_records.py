"""The round loop with a scripted engine (event logs compared to hand-written lists), the record
types as the tables' columns, the run summary and the path-component rule."""

import math
from dataclasses import replace

import pytest

from fedsim.clock.plan import Job, RoundPlan
from fedsim.records import ClientRecord, RoundRecord, RunSummary, columns
from fedsim.report.tables import CLIENT_COLUMNS, TableWriter
from fedsim.runner.folder import table_columns

ROUND_COLUMNS = table_columns(quadratic=False)["rounds.csv"]
QUADRATIC_COLUMNS = table_columns(quadratic=True)["rounds.csv"]
from fedsim.runner.files import FolderError, safe_component
from fedsim.runner.loop import run_rounds


class ScriptedEngine:
    """Steps log ``step r``; ``finite`` turns false from round ``bad`` on; evaluation sets test_acc."""

    def __init__(self, bad=None):
        self.bad, self.log, self.current = bad, [], None

    def step(self, plan):
        self.current = plan.round
        self.log.append(f"step {plan.round}")
        rec = RoundRecord(round=plan.round, sim_time=float(plan.close), participants=1, tau_mean=1.0,
                          tau_min=1, tau_max=1)
        return rec, [ClientRecord(plan.round, 0, "completed", 1, 1.0, plan.open, plan.close, plan.round, 0, 1.0)]

    def finite(self):
        return self.bad is None or self.current < self.bad

    def evaluate(self, rec):
        self.log.append(f"eval {rec.round}")
        return replace(rec, test_acc=0.5)

    def reported(self):
        return f"reported {self.current}"


class ScriptedSchedule:
    """Plans 0, 1, ...; ``observe`` logs what the server was given into the engine's log."""

    def __init__(self, log, n=100):
        self.log = log
        self.plans = (RoundPlan(r, float(r), float(r + 1), (Job(r, 0, "completed", 1, float(r), float(r + 1), r),))
                      for r in range(n))

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.plans)

    def observe(self, reported=None, *, given=None):
        self.log.append(f"observe {reported if given is None else given}")


def _loop(engine, start=0, rounds=5, every=2, replay=()):
    rows, checkpoints = [], []
    last = run_rounds(engine, ScriptedSchedule(engine.log), start=start, rounds=rounds, eval_every=every,
                      sinks=[lambda rec, clients: rows.append(rec)], checkpoint=checkpoints.append, replay=replay)
    return last, rows, checkpoints


def test_loop_evaluates_every_k_and_last_and_checkpoints_each_round():
    eng = ScriptedEngine()
    last, rows, checkpoints = _loop(eng)
    assert [e for e in eng.log if not e.startswith("observe")] == [
        "step 0", "step 1", "eval 1", "step 2", "step 3", "eval 3", "step 4", "eval 4"]
    # what the server learned goes back to the clock after each round, before the next plan
    assert eng.log[:5] == ["step 0", "observe reported 0", "step 1", "eval 1", "observe reported 1"]
    assert [r.round for r in rows] == [0, 1, 2, 3, 4]
    assert [r.test_acc for r in rows] == [None, 0.5, None, 0.5, 0.5]
    assert checkpoints == [1, 2, 3, 4, 5]
    assert last == rows[-1]


def test_loop_resumes_at_start():
    eng = ScriptedEngine()
    _, rows, checkpoints = _loop(eng, start=3, replay=["o0", "o1", "o2"])
    # the replayed plans are observed with the logged observations, then the loop goes on
    assert eng.log == ["observe o0", "observe o1", "observe o2", "step 3", "eval 3", "observe reported 3", "step 4",
                       "eval 4", "observe reported 4"]
    assert [r.round for r in rows] == [3, 4] and checkpoints == [4, 5]


def test_diverging_round_is_recorded_unevaluated_and_never_checkpointed():
    eng = ScriptedEngine(bad=3)
    last, rows, checkpoints = _loop(eng, every=1)
    assert eng.log == ["step 0", "eval 0", "observe reported 0", "step 1", "eval 1", "observe reported 1", "step 2",
                       "eval 2", "observe reported 2", "step 3"]  # the diverged round is not fed back
    assert [r.diverged for r in rows] == [0, 0, 0, 1]
    assert rows[-1].test_acc is None
    assert checkpoints == [1, 2, 3]  # none for round 3's model: a resume from 3 replays the divergence


def test_nothing_to_run_is_an_error():
    with pytest.raises(ValueError):
        _loop(ScriptedEngine(), start=5)


def test_record_fields_are_the_table_columns():
    head = ["round", "sim_time", "participants", "tau_mean", "tau_min", "tau_max", "train_loss", "test_loss",
            "test_acc", "lr"]
    assert ROUND_COLUMNS == head + ["diverged", "available"]
    assert QUADRATIC_COLUMNS == head + ["dist_to_opt", "diverged", "available"]
    assert CLIENT_COLUMNS == ["round", "client", "status", "steps", "a_norm", "start", "end", "version", "staleness",
                              "weight", "download", "upload"]
    with pytest.raises(ValueError, match="dist_to_op"):
        columns(RoundRecord, omit=("dist_to_op",))


def test_writer_reads_records_by_field(tmp_path):
    rec = RoundRecord(round=2, sim_time=0.1 + 0.2, participants=3, tau_mean=None, tau_min=4, tau_max=5,
                      test_acc=math.nan, lr=0.05, diverged=1, available=7)
    w = TableWriter(tmp_path / "r.csv", ROUND_COLUMNS)
    w.write([rec])
    w.close()
    assert (tmp_path / "r.csv").read_text().splitlines() == [
        ",".join(ROUND_COLUMNS), "2,0.30000000000000004,3,,4,5,,,,0.05,1,7"]
    bad = TableWriter(tmp_path / "b.csv", ["round", "sim_tme"])
    with pytest.raises(AttributeError, match="sim_tme"):  # a misspelt column cannot pass silently
        bad.write([rec])
    bad.close()


def test_summary_of_last_record():
    rec = RoundRecord(round=9, sim_time=12.5, participants=2, tau_mean=2.0, tau_min=1, tau_max=3,
                      test_loss=0.25, test_acc=0.75, lr=0.1)
    s = RunSummary.of(rec, data="digits")
    assert (s.rounds, s.sim_time, s.test_acc, s.test_loss, s.diverged, s.data) == (10, 12.5, 0.75, 0.25, False, "digits")
    assert math.isnan(s.train_loss) and math.isnan(s.dist_to_opt)


@pytest.mark.parametrize("name", ["quickstart", "fednova_fig2", "a.b-c", "é" * 127])
def test_safe_component_accepts(name):
    assert safe_component(name, "name") == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "/abs", "a\\b", "a\0b", "a\nb", "é" * 128])
def test_safe_component_refuses(name):
    with pytest.raises(FolderError, match="^name: "):
        safe_component(name, "name")
