"""Evaluation on a time grid (``eval.every_seconds: S``): ``evals.csv``.

The global model is evaluated as it stands at simulated times S, 2S, ... up to the run's end (the
last round's close), so runs whose rounds have different lengths are compared at exactly the same
instants. The model standing at time g is the one after the last server update at or before g:
``round`` is that update's index (-1: the initial model). Several grid times that fall between two
updates share one evaluation (the same model). Columns: ``sim_time, round, test_loss, test_acc,
train_loss`` (empty where the run has no such metric).

Resume: the rows are a function of the closes and the models, so a resumed run keeps the rows
before the close of the round its checkpoint follows and recomputes the rest (:meth:`resume`).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ScenarioError
from ..limits import MAX_EVAL_ROWS
from ..records import RoundRecord
from ..report.tables import TableWriter
from .files import write_atomic

__all__ = ["EvalGrid", "EVAL_COLUMNS"]

EVAL_COLUMNS = ["sim_time", "round", "test_loss", "test_acc", "train_loss"]


class EvalGrid:
    """Grid times k * ``every`` (k = 1, 2, ...); ``path`` None: evaluate without writing (the
    other ranks under torchrun, which take their share of the evaluation)."""

    def __init__(self, every: float, path: Path | None):
        self.every = float(every)
        self.path = None if path is None else Path(path)
        self.k = 1
        self.writer: TableWriter | None = None

    def open(self, after: float | None = None) -> None:
        """Start writing. ``after`` None: a fresh run (an empty table). Otherwise a resumed run whose
        last replayed round closed at ``after``: keep the rows before it, evaluate from there."""
        if after is None:
            after = 0.0
            if self.path is not None:
                self.path.unlink(missing_ok=True)
        elif self.path is not None:
            kept = ",".join(EVAL_COLUMNS) + "\n"
            if self.path.is_file() and self.path.stat().st_size:
                lines = self.path.read_text().splitlines(keepends=True)[1:]
                kept += "".join(ln for ln in lines if ln.endswith("\n") and float(ln.split(",", 1)[0]) < after)
            write_atomic(self.path, kept.encode())
        self.k = max(1, math.ceil(after / self.every))
        while self.k > 1 and (self.k - 1) * self.every >= after:
            self.k -= 1
        while self.k * self.every < after:
            self.k += 1
        if self.path is not None:
            self.writer = TableWriter(self.path, EVAL_COLUMNS)

    def reach(self, engine, t: float, last_round: int, *, inclusive: bool = False) -> None:
        """Evaluate the current model (after update ``last_round``) at every grid time before ``t``
        (``inclusive``: at or before) not yet done."""
        rows = []
        metrics = None
        while self.k * self.every < t or (inclusive and self.k * self.every == t):
            if self.k > MAX_EVAL_ROWS:  # rows written so far stay; the run stops with one line (exit 2)
                raise ScenarioError(f"eval.every_seconds: the run reached {MAX_EVAL_ROWS:,} grid times at simulated "
                                    f"time {(self.k - 1) * self.every:g} s; use a larger interval")
            g = self.k * self.every
            if metrics is None:
                rec = engine.evaluate(RoundRecord(round=last_round, sim_time=g, participants=0,
                                                  tau_mean=None, tau_min=None, tau_max=None))
                metrics = {"test_loss": rec.test_loss, "test_acc": rec.test_acc, "train_loss": rec.train_loss}
            rows.append({"sim_time": g, "round": last_round, **metrics})
            self.k += 1
        if rows and self.writer is not None:
            self.writer.write(rows)

    def sync(self) -> None:
        if self.writer is not None:
            self.writer.sync()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

