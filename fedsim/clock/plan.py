"""What the clock hands to the engine: one :class:`Job` per (round, client) row, grouped in a
:class:`RoundPlan` per server update, and the same rows as numpy columns (:class:`RoundTable`)
for clock-only runs that must not pay for one Python object per row."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

__all__ = ["Job", "RoundPlan", "RoundTable", "STATUSES", "JOB_COLUMNS", "aggregation_weights"]

#: Every status a row can have, in the order of the ``status`` codes of :class:`RoundTable`.
STATUSES = ("completed", "dropped", "offline", "failed")

@dataclass(frozen=True)
class Job:
    """One row of the schedule: what one client did for one server update.

    Attributes:
        round: sync: the round index (0-based). async: the index of the server update that reports
            this job (the plan's ``round``; the update produces server version ``round + 1``).
            Failed and dropped async jobs are reported in the next plan after they resolve.
        client: client index.
        status: ``completed`` | ``dropped`` | ``offline`` | ``failed``.
        steps: local steps tau_i actually done (0 unless completed).
        start: download start (offline rows: the round's open time).
        end: completed: upload done; failed: the outage time; dropped: sync: the round's close (the
            server gave up: window end / deadline), async: ``start``; offline: the round's open time.
        key: the integer that keys this job's random streams ``(seed, purpose, client, key)``
            (work, slowdown, and the engine's minibatch order / dropout). sync: the round;
            async: the global job sequence number (0, 1, 2, ... in start order).
        version: global model version the job downloaded (sync: == round).
        staleness: async: server updates applied between download and the report (0 in sync).
        weight: raw aggregation weight from the sampling scheme (0 for offline rows): full
            participation p_i; uniform without replacement p_i * m / q; weighted with replacement
            count / q; async p_i.
        count: how many times the client was drawn (weighted sampling with replacement); 0 for
            offline rows, 1 otherwise.
        download: seconds the model download took (0 when the job never started one).
        upload: seconds the upload took (0 when the job never started one).
        resumed: outages the job sat out and went on after (``system.on_outage: resume``).
        cut: 1 when the job uploaded fewer steps than prescribed because the time left was its
            upload time (``round.on_deadline: partial``).
    """

    round: int
    client: int
    status: str
    steps: int
    start: float
    end: float
    key: int
    version: int = 0
    staleness: int = 0
    weight: float = 0.0
    count: int = 1
    download: float = 0.0
    upload: float = 0.0
    resumed: int = 0
    cut: int = 0


#: Column names of a job table (the fields of :class:`Job`, in order).
JOB_COLUMNS = tuple(f.name for f in fields(Job))


@dataclass(frozen=True)
class RoundPlan:
    """One server update: its time span and every row the clock touched for it.

    Attributes:
        round: sync: round index; async: update index (new server version - 1), both 0-based.
        open: when the round opened (async: time of the previous update, 0 for the first).
        close: when the round ends (async: time of this update); ``rounds.csv`` ``sim_time``.
        jobs: sync: sorted by client; async: in the order the server processed them
            (resolution time, ties by job key).
        min_live_version: after applying this plan, no future job needs a model version older
            than this (sync: ``round + 1``), so the engine may free older versions.
        available: clients online when the round opened (async: when the update's first job
            started).
        started: async: ``(client, key, steps)`` of every job with steps > 0 that started from
            the model version this update replaces (version == ``round``), in key order, whether
            it is reported now, later, or fails: the engine may train them together (empty in
            sync plans).
    """

    round: int
    open: float
    close: float
    jobs: tuple[Job, ...]
    min_live_version: int = 0
    available: int = 0
    started: tuple[tuple[int, int, int], ...] = ()

    def table(self) -> "RoundTable":
        """The same plan as numpy columns."""
        cols = {name: [getattr(j, name) for j in self.jobs] for name in JOB_COLUMNS}
        cols["status"] = [STATUSES.index(s) for s in cols["status"]]
        return RoundTable(self.round, self.open, self.close, self.min_live_version, _arrays(cols), self.available,
                          self.started)


_DTYPES = {
    "round": np.int64,
    "client": np.int64,
    "status": np.int8,
    "steps": np.int64,
    "start": np.float64,
    "end": np.float64,
    "key": np.int64,
    "version": np.int64,
    "staleness": np.int64,
    "weight": np.float64,
    "count": np.int64,
    "download": np.float64,
    "upload": np.float64,
    "resumed": np.int64,
    "cut": np.int64,
}


def _arrays(cols: dict[str, Sequence]) -> dict[str, np.ndarray]:
    return {name: np.asarray(cols[name], dtype=_DTYPES[name]) for name in JOB_COLUMNS}


@dataclass(frozen=True, eq=False)
class RoundTable:
    """A :class:`RoundPlan` as columns: ``columns[name]`` is a numpy array per :data:`JOB_COLUMNS`
    entry; ``status`` holds codes into :data:`STATUSES` (``STATUSES[code]``)."""

    round: int
    open: float
    close: float
    min_live_version: int
    columns: dict[str, np.ndarray]
    available: int = 0
    started: tuple[tuple[int, int, int], ...] = ()

    def __len__(self) -> int:
        return len(self.columns["client"])

    def statuses(self) -> np.ndarray:
        """The status column as strings."""
        return np.asarray(STATUSES, dtype=object)[self.columns["status"]]

    def plan(self) -> RoundPlan:
        """The same rows as a :class:`RoundPlan` of :class:`Job` objects."""
        c = self.columns
        lists = [c[name].tolist() for name in JOB_COLUMNS]
        lists[2] = [STATUSES[s] for s in lists[2]]
        jobs = tuple(map(Job, *lists))
        return RoundPlan(self.round, self.open, self.close, jobs, self.min_live_version, self.available, self.started)


def aggregation_weights(status: np.ndarray, steps: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """The weight w_i a synchronous round aggregates each row with (0 for rows not aggregated).

    ``status`` holds codes into :data:`STATUSES`. The clock's raw sampling weights (``Job.weight``)
    of the selected clients (rows not ``offline``) that did not report are redistributed over the
    rows that did (``completed`` with steps > 0), in proportion to their raw weights:
    ``w_i = raw_i * S_selected / S_done`` (sums left to right in row order). The engine aggregates
    with these weights, so a clock-only run's ``weight`` column is bit for bit a trained run's.
    """
    status, steps, raw = np.asarray(status), np.asarray(steps), np.asarray(raw, dtype=np.float64)
    selected = status != STATUSES.index("offline")
    done = (status == STATUSES.index("completed")) & (steps > 0)
    s_sel = sum(raw[selected].tolist())
    s_done = sum(raw[done].tolist())
    out = np.zeros(len(raw), dtype=np.float64)
    if s_done > 0:
        out[done] = raw[done] * s_sel / s_done
    return out
