"""The run folder of a Flower run (:func:`fedsim.flower.run`), written with fedsim's own writers
(:class:`fedsim.report.tables.TableWriter`, :func:`fedsim.runner.folder.prepare_folder`,
:data:`fedsim.runner.evals.EVAL_COLUMNS`). Plain values in; no ``flwr`` needed here."""

from __future__ import annotations

from pathlib import Path

from fedsim.records import ClientRecord, client_columns
from fedsim.report.tables import TableWriter
from fedsim.runner.evals import EVAL_COLUMNS
from fedsim.runner.folder import locked, prepare_folder

__all__ = ["ROUND_COLUMNS", "write_folder", "round_rows", "client_rows", "eval_rows"]

#: rounds.csv's fixed columns; the strategy's metrics follow as ``train.KEY`` / ``evaluate.KEY`` columns.
ROUND_COLUMNS = ["round", "sim_time", "participants", "tau_mean", "tau_min", "tau_max", "available", "kind",
                 "server_round", "start"]


def round_rows(exchanges) -> tuple[list[str], list[dict]]:
    """(columns, one row per exchange)."""
    rows, extra = [], []
    for ex in exchanges:
        steps = [o.steps for o in ex.outcomes if o.status == "completed"]
        row = {"round": ex.index, "sim_time": ex.close, "participants": len(steps),
               "tau_mean": sum(steps) / len(steps) if steps else None, "tau_min": min(steps, default=None),
               "tau_max": max(steps, default=None), "available": ex.available, "kind": ex.kind,
               "server_round": ex.server_round, "start": ex.start, **ex.metrics}
        extra += [k for k in ex.metrics if k not in extra]
        rows.append(row)
    return ROUND_COLUMNS + sorted(extra), rows


def client_rows(exchanges) -> list[ClientRecord]:
    """One :class:`fedsim.records.ClientRecord` per message (``a_norm`` and ``weight`` 0: the
    strategy's aggregation is its own)."""
    return [ClientRecord(ex.index, o.client, o.status, o.steps, 0.0, o.start, o.end, ex.index, 0, 0.0,
                         o.download, o.upload) for ex in exchanges for o in ex.outcomes]


def eval_rows(server_evals, exchanges) -> list[dict]:
    """``evals.csv`` rows: each ServerApp-side evaluation at its simulated time; ``round`` is the
    index of the last exchange before it (-1: the initial model)."""
    rows = []
    for t, _rnd, metrics in server_evals:
        last = max((ex.index for ex in exchanges if ex.close <= t), default=-1)
        rows.append({"sim_time": t, "round": last, "test_loss": metrics.get("loss"),
                     "test_acc": metrics.get("accuracy", metrics.get("acc")), "train_loss": None})
    return rows


def write_folder(sc, out: Path, grid, *, force: bool) -> None:
    """scenario.yaml, rounds.csv, clients.csv and (with ServerApp-side evaluations) evals.csv."""
    with locked(out):
        prepare_folder(sc, out, force=force)
        cols, rows = round_rows(grid.exchanges)
        _write(out / "rounds.csv", cols, rows)
        _write(out / "clients.csv", client_columns(), client_rows(grid.exchanges))
        if grid.server_evals:
            _write(out / "evals.csv", EVAL_COLUMNS, eval_rows(grid.server_evals, grid.exchanges))


def _write(path: Path, cols, rows) -> None:
    w = TableWriter(path, cols)
    try:
        w.write(rows)
    finally:
        w.close()
