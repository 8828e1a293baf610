"""Clock-only mode (``fedsim run X.yaml --schedule-only``, :func:`fedsim.schedule`): the system
trace without training.

Writes ``clients.csv`` (same columns as a full run; ``a_norm`` empty) and ``rounds.csv`` with the
clock's columns (``round, sim_time, participants, tau_mean, tau_min, tau_max, available``:
``available`` is the number of clients online at the round's open), for planning. With
``table_format="parquet"`` the same tables as ``rounds.parquet/`` and ``clients.parquet/``
(:mod:`fedsim.report.parquet`), each round's numpy columns appended as they are.
"""

from __future__ import annotations

import os
from dataclasses import replace
from itertools import islice
from pathlib import Path

import numpy as np

from .clock import STATUSES, RoundTable
from .errors import ScenarioError
from .clock.plan import aggregation_weights
from .data.federated import FederatedData
from .data.quadratic import QuadraticProblem
from .report.parquet import ParquetTableWriter, table_path
from .records import client_columns
from .report.tables import CLIENT_COLUMNS, fmt
from .runner.clock import build_clock
from .runner.folder import locked, prepare_folder, uses_levers
from .scenario import Scenario

__all__ = ["run_schedule", "client_sizes_and_weights", "round_row", "round_line", "client_lines"]

SCHEDULE_ROUND_COLUMNS = ["round", "sim_time", "participants", "tau_mean", "tau_min", "tau_max", "available"]


def client_sizes_and_weights(sc: Scenario, ds=None) -> tuple[np.ndarray, np.ndarray]:
    """n_i and p_i without building a model: p_i = n_i / n, or the quadratic problem's own
    weights (what a trained run's workload holds); ``ds``: the scenario's data when already built
    (:func:`fedsim.engine.workload.dataset_for`)."""
    if ds is None:
        from .engine.workload import dataset_for

        ds = dataset_for(sc)
    n = np.asarray(ds.sizes if isinstance(ds, FederatedData) else ds.client_sizes, dtype=np.int64)
    return n, ds.weights if isinstance(ds, QuadraticProblem) else n / n.sum()


def _shape_and_classes(ds) -> tuple[tuple[int, ...], int | None]:
    """One example's shape and the number of classes (a FederatedData: from client 0's data)."""
    if isinstance(ds, FederatedData):
        x, _ = ds.client_data(0)
        return tuple(int(d) for d in np.shape(x)[1:]), ds.num_classes
    return tuple(ds.input_shape), ds.num_classes


def run_schedule(sc: Scenario, out: Path, *, force: bool = False, table_format: str = "csv", data=None,
                 model=None) -> None:
    """Run the clock of ``sc`` alone and write ``rounds.csv`` and ``clients.csv`` into ``out``.

    Works on the clock's numpy tables (:meth:`fedsim.clock.Clock.tables`: the vectorised window
    path when it applies) and formats each round's rows column by column, byte for byte what
    :class:`fedsim.report.tables.TableWriter` would write row by row. 10,000 clients x 1,000
    window rounds (10 million rows) take well under a minute (benchmarks/bench_schedule.py).
    Files are flushed every round and synced at the end. ``table_format="parquet"``: the same
    rows as Parquet parts (:func:`_write_parquet`). ``data``, ``model``: Python objects replacing
    the scenario's named pieces (:func:`fedsim.schedule`).
    """
    from .runner.build import adopt_clients

    out = Path(out)
    sc, ds = adopt_clients(sc, data)
    if ds is None:  # built once: sizes and the model's cost both need it
        from .engine.workload import dataset_for

        ds = dataset_for(sc)
    sizes, weights = client_sizes_and_weights(sc, ds)
    clock = build_clock(sc, sizes, weights, cost=work_cost_for(sc, ds, model),  # everything that can fail, before the folder
                        epoch_rule=getattr(ds, "epoch_rule", "floor"), data=ds)
    if clock.rule.selection.uses_losses:
        raise ScenarioError(f"round.selection: {sc.round.selection.name!r} needs the training losses clients report "
                            "with their updates; --schedule-only trains nothing")
    with locked(out):
        prepare_folder(sc, out, force=force)
        columns = client_columns(uses_levers(sc))
        (_write_parquet if table_format == "parquet" else _write_tables)(clock, sc.rounds, out, columns)


def _tables(clock, rounds: int):
    """The clock's first ``rounds`` tables, with the ``weight`` column a trained run writes:
    synchronous rounds aggregate w_i (:func:`fedsim.clock.plan.aggregation_weights`: 0 for
    failed, dropped and offline rows, the rest redistributed); async rows keep the sampling
    weight p_i (a trained run writes the algorithm's staleness-dependent coefficient there)."""
    sync = not clock.rule.policy.is_async
    for table in islice(clock.tables(), rounds):
        if sync and len(table):
            c = table.columns
            table = replace(table, columns={**c, "weight": aggregation_weights(c["status"], c["steps"], c["weight"])})
        yield table


def work_cost_for(sc: Scenario, ds, model=None):
    """The model's cost (FLOPs per step, bytes per transfer) when the system model needs it:
    ``system.compute``, ``system.network`` or a trace (device traces time steps and transfers)."""
    s = sc.system
    flops_aggregate = s.server is not None and getattr(s.server.aggregate, "flops", None) is not None
    if isinstance(ds, QuadraticProblem) or (s.compute is None and s.network is None and s.trace is None
                                           and not flops_aggregate):
        return None  # the quadratic problem has no model: no FLOPs or bytes (refused with those, check_runnable)
    import torch

    from .devices.cost import work_cost
    from .engine.workload import make_model

    from .runner.build import check_compressors, compressors

    shape, classes = _shape_and_classes(ds)
    module = make_model(sc, shape, classes, model)
    if sc.engine.dtype == "float64":  # the parameters a run trains (bytes per entry), as build_workload
        module = module.to(dtype=torch.float64)
    check_compressors(sc, dict(module.named_parameters()))  # its bytes for this model: one line, exit 2
    return work_cost(module, shape, sc.algorithm.batch_size, sc.algorithm_spec.uses_control_variates,
                     count_flops=s.compute is not None, payload=s.payload_bytes, **compressors(sc))


def _write_tables(clock, rounds: int, out: Path, columns: list[str]) -> None:
    with open(out / "rounds.csv", "w", encoding="utf-8", newline="") as fr, \
            open(out / "clients.csv", "w", encoding="utf-8", newline="") as fc:
        fr.write(",".join(SCHEDULE_ROUND_COLUMNS) + "\n")
        fc.write(",".join(columns) + "\n")
        for table in _tables(clock, rounds):
            fr.write(round_line(table))
            fc.write(client_lines(table, columns))
            fr.flush()
            fc.flush()
        for f in (fr, fc):
            os.fsync(f.fileno())


def _write_parquet(clock, rounds: int, out: Path, columns: list[str]) -> None:
    """The tables as Parquet parts: each round's client columns go in as numpy arrays (a part per
    ``rows_per_part`` rows, the rest at the end); the rows are those of :func:`_write_tables`."""
    import pyarrow as pa

    fr = ParquetTableWriter(table_path(out, "rounds"), SCHEDULE_ROUND_COLUMNS)
    fc = ParquetTableWriter(table_path(out, "clients"), columns)
    names = pa.array(STATUSES, type=pa.string())
    for table in _tables(clock, rounds):
        fr.write([round_row(table)])
        c = table.columns
        status = names.take(pa.array(c["status"]))  # status codes to their names, in C
        fc.write_columns({**{k: c[k] for k in columns if k in c}, "status": status}, len(table))
    fr.close()
    fc.close()


_STATUS_TEXT = np.asarray(STATUSES, dtype=object)
_COMPLETED = STATUSES.index("completed")


def round_row(table: RoundTable) -> dict:
    """The ``rounds.csv`` row of one round (participants: completed jobs with steps > 0)."""
    c = table.columns
    done = c["steps"][(c["status"] == _COMPLETED) & (c["steps"] > 0)]
    return dict(
        round=table.round, sim_time=table.close, participants=len(done),
        tau_mean=float(np.mean(done)) if len(done) else None,
        tau_min=int(done.min()) if len(done) else None, tau_max=int(done.max()) if len(done) else None,
        available=table.available,
    )


def round_line(table: RoundTable) -> str:
    """The ``rounds.csv`` line of one round (:func:`round_row`)."""
    row = round_row(table)
    return ",".join(fmt(row[k]) for k in SCHEDULE_ROUND_COLUMNS) + "\n"


def _int_text(a: np.ndarray) -> list[str]:
    if len(a) and (a == a[0]).all():
        return [str(int(a[0]))] * len(a)
    return list(map(str, a.tolist()))


def _float_text(a: np.ndarray) -> list[str]:
    """``fmt`` of each value (shortest repr, '' for NaN), one repr when all are the same bits."""
    if len(a) and (a.view(np.int64) == a.view(np.int64)[0]).all():
        return [fmt(float(a[0]))] * len(a)
    text = list(map(repr, a.tolist()))
    if np.isnan(a).any():
        text = ["" if t == "nan" else t for t in text]
    return text


def client_lines(table: RoundTable, columns: list[str] = CLIENT_COLUMNS) -> str:
    """The ``clients.csv`` lines of one round in ``columns`` (``a_norm`` empty: nothing was trained)."""
    c, n = table.columns, len(table)
    if n == 0:
        return ""
    cols = {
        "round": _int_text(c["round"]),
        "client": _int_text(c["client"]),
        "status": _STATUS_TEXT[c["status"]].tolist(),
        "steps": _int_text(c["steps"]),
        "start": _float_text(c["start"]),
        "end": _float_text(c["end"]),
        "version": _int_text(c["version"]),
        "staleness": _int_text(c["staleness"]),
        "weight": _float_text(c["weight"]),
        "download": _float_text(c["download"]),
        "upload": _float_text(c["upload"]),
        "resumed": _int_text(c["resumed"]),
        "cut": _int_text(c["cut"]),
    }
    blank = [""] * n
    return "\n".join(map(",".join, zip(*(cols.get(name, blank) for name in columns)))) + "\n"
