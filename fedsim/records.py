"""What a run produces: one :class:`RoundRecord` per server update, one :class:`ClientRecord` per
(round, client) row of the clock's plan, and the :class:`RunSummary` of a finished run.

Plain frozen values (no torch). The fields of the two records, in order, ARE the columns of
``rounds.csv`` and ``clients.csv`` (:func:`columns`), so a column cannot be misspelt: the table
writers read each cell with ``getattr``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["RoundRecord", "ClientRecord", "RunSummary", "columns", "client_columns", "LEVER_COLUMNS"]


@dataclass(frozen=True)
class RoundRecord:
    """One row of ``rounds.csv``.

    Attributes:
        round: sync: round index; async: server-update index (both 0-based).
        sim_time: simulated seconds at the round's close (the plan's ``close``).
        participants: completed jobs with at least one step (their updates reach the server).
        tau_mean, tau_min, tau_max: statistics of those jobs' local steps (None when none).
        train_loss, test_loss, test_acc: evaluation metrics (None on rounds not evaluated).
        lr: the local learning rate handed out with this round's model.
        dist_to_opt: quadratic data only: ||x - x*||_2 (None otherwise and when not evaluated).
        diverged: 1 on the round whose model is no longer finite (the run's last row), else 0.
        available: clients online when the round opened (the plan's ``available``).
    """

    round: int
    sim_time: float
    participants: int
    tau_mean: float | None
    tau_min: int | None
    tau_max: int | None
    train_loss: float | None = None
    test_loss: float | None = None
    test_acc: float | None = None
    lr: float = 0.0
    dist_to_opt: float | None = None
    diverged: int = 0
    available: int = 0


@dataclass(frozen=True)
class ClientRecord:
    """One row of ``clients.csv``: what one client did for one server update.

    The clock's :class:`fedsim.clock.plan.Job` fields of the same names, plus ``a_norm``
    (||a_i||_1 of the client's local run, 0 unless it reached the server) and ``weight`` (sync:
    the aggregation weight w_i after redistribution, 0 if not aggregated; async: the update's
    coefficient c_k). ``resumed`` (outages the job sat out) and ``cut`` (1: a partial upload at a
    deadline) are columns only of runs with those levers (:func:`client_columns`).
    """

    round: int
    client: int
    status: str
    steps: int
    a_norm: float
    start: float
    end: float
    version: int
    staleness: int
    weight: float
    download: float = 0.0
    upload: float = 0.0
    resumed: int = 0
    cut: int = 0


#: ``clients.csv`` columns written only by runs that use them (``system.on_outage: resume``,
#: ``round.on_deadline: partial``), so every other run's table keeps its columns.
LEVER_COLUMNS = ("resumed", "cut")


def client_columns(levers: bool = False) -> list[str]:
    """The columns of ``clients.csv``: :class:`ClientRecord`'s fields, ``resumed`` and ``cut``
    only with ``levers``."""
    return columns(ClientRecord, omit=() if levers else LEVER_COLUMNS)


def columns(record: type, *, omit: tuple[str, ...] = ()) -> list[str]:
    """The table columns of a record type: its field names in order, less ``omit``.

    Raises ``ValueError`` when ``omit`` names a field the record does not have.
    """
    names = [f.name for f in fields(record)]
    unknown = set(omit) - set(names)
    if unknown:
        raise ValueError(f"{record.__name__} has no field(s) {', '.join(sorted(unknown))}")
    return [n for n in names if n not in omit]


@dataclass(frozen=True)
class RunSummary:
    """The final numbers of a run (its last :class:`RoundRecord`) and the dataset actually used.

    Metrics not measured on the last round (a diverged round is not evaluated) are NaN.
    """

    rounds: int
    sim_time: float
    test_acc: float
    test_loss: float
    train_loss: float
    diverged: bool
    dist_to_opt: float = math.nan
    data: str = ""  # e.g. "cifar10-standin"

    @classmethod
    def of(cls, last: RoundRecord, data: str = "") -> "RunSummary":
        """The summary of a run whose last row is ``last``."""
        num = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(
            rounds=last.round + 1,
            sim_time=float(last.sim_time),
            test_acc=num(last.test_acc),
            test_loss=num(last.test_loss),
            train_loss=num(last.train_loss),
            diverged=bool(last.diverged),
            dist_to_opt=num(last.dist_to_opt),
            data=data,
        )
