"""Evaluation on a time grid (``eval.every_seconds: S``): ``evals.csv``.

The global model is evaluated as it stands at simulated times S, 2S, ... up to the run's end (the
last round's close), so runs whose rounds have different lengths are compared at exactly the same
instants. The model standing at time g is the one after the last server update at or before g:
``round`` is that update's index (-1: the initial model). Several grid times that fall between two
updates share one evaluation (the same model). Columns: ``sim_time, round, test_loss, test_acc,
train_loss`` (empty where the run has no such metric).

Resume: the rows are a function of the closes and the models, so a resumed run keeps the rows
before the close of the round its checkpoint follows and recomputes the rest (:meth:`EvalGrid.open`).
The file is read back only when it is at most ``MAX_EVAL_BYTES`` and every whole row is one
fedsim writes (:func:`eval_rows`); ``--resume`` checks that before it changes anything.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ScenarioError
from ..limits import MAX_EVAL_BYTES, MAX_EVAL_ROWS
from ..records import RoundRecord
from ..report.tables import TableWriter
from .files import FolderError, write_atomic

__all__ = ["EvalGrid", "EVAL_COLUMNS", "eval_rows", "check_evals"]

EVAL_COLUMNS = ["sim_time", "round", "test_loss", "test_acc", "train_loss"]


def eval_rows(path: Path, where: str = "evals.csv"):
    """``(sim_time, line)`` of every whole row of an ``evals.csv`` fedsim wrote (a last line without
    its newline, cut by a kill, is left out), read line by line.

    Raises :class:`~fedsim.runner.files.FolderError` (``where``: one line) for a file larger than
    ``MAX_EVAL_BYTES``, a header other than :data:`EVAL_COLUMNS`, or a row that is not five cells:
    a finite ``sim_time`` >= 0, an integer ``round`` >= -1, and empty or numeric metrics. A resumed
    run checks this before it cuts anything back (:func:`check_evals`)."""
    size = path.stat().st_size
    if size > MAX_EVAL_BYTES:
        raise FolderError(f"{where}: larger than {MAX_EVAL_BYTES:,} bytes (MAX_EVAL_BYTES); not an evals.csv fedsim wrote")
    with open(path, "rb") as f:
        if f.readline() != (",".join(EVAL_COLUMNS) + "\n").encode():
            raise FolderError(f"{where}: its header is not {','.join(EVAL_COLUMNS)}")
        for number, line in enumerate(f, start=2):
            if not line.endswith(b"\n"):
                return
            t = _row_time(line)
            if t is None:
                raise FolderError(f"{where}: line {number} is not a row fedsim writes "
                                  f"({line[:60].decode('ascii', 'replace').rstrip()!r})")
            yield t, line


def _row_time(line: bytes) -> float | None:
    """The ``sim_time`` of a well-formed row, else None."""
    cells = line[:-1].split(b",")
    if len(cells) != len(EVAL_COLUMNS):
        return None
    try:
        t = float(cells[0])
        r = int(cells[1])
        for cell in cells[2:]:
            if cell:
                float(cell)
    except ValueError:
        return None
    return t if math.isfinite(t) and t >= 0 and r >= -1 else None


def check_evals(path: Path, where: str) -> None:
    """Read all of ``evals.csv`` (:func:`eval_rows`) without changing it: what ``--resume`` asks
    before it cuts any table back, so a damaged file changes nothing (issue 28 item 9)."""
    for _ in eval_rows(path, where):
        pass


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
            kept = [(",".join(EVAL_COLUMNS) + "\n").encode()]
            if self.path.is_file() and self.path.stat().st_size:
                kept += [line for t, line in eval_rows(self.path) if t < after]
            write_atomic(self.path, b"".join(kept))
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
        from ..engine.request import drive

        drive(self.reaching(engine, t, last_round, inclusive=inclusive))

    def reaching(self, engine, t: float, last_round: int, *, inclusive: bool = False):
        """:meth:`reach` as a generator: yields the evaluation's request
        (:class:`~fedsim.engine.request.EvalRequest`) when a grid time is passed."""
        from ..engine.request import evaluating  # torch: only when a run evaluates

        rows = []
        metrics = None
        while self.k * self.every < t or (inclusive and self.k * self.every == t):
            if self.k > MAX_EVAL_ROWS:  # rows written so far stay; the run stops with one line (exit 2)
                raise ScenarioError(f"eval.every_seconds: the run reached {MAX_EVAL_ROWS:,} grid times at simulated "
                                    f"time {(self.k - 1) * self.every:g} s; use a larger interval")
            g = self.k * self.every
            if metrics is None:
                rec = yield from evaluating(engine, RoundRecord(round=last_round, sim_time=g, participants=0,
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

