"""The one arrow back: what the server learns after each server update, fed to its selection rule.

:class:`Selector` holds a run's selection rule and its state: the clock's paths ask it for picks
(:meth:`Selector.pick`, a :class:`~fedsim.clock.selection.Request` of plain values) and the
schedule hands it an :class:`~fedsim.clock.selection.Observations` after each plan
(:func:`observations`: the plan's own rows plus the losses the runner reports, :class:`Reported`).
A rule whose answer breaks its contract stops the run with one line (:class:`SelectionError`,
exit 2, as an input error); a rule that raises (``sys.exit`` too) is a part failing mid-run
(:class:`SelectionFailed`, exit 1, docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from fedsim.errors import PartError, ScenarioError

from .plan import STATUSES, RoundTable
from .selection import Observations, Picked, Request, SelectionRule, check_picked

__all__ = ["Reported", "Selector", "SelectionError", "SelectionFailed", "observations"]

_OFFLINE, _COMPLETED = STATUSES.index("offline"), STATUSES.index("completed")


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only in place (numpy's ``flags.writeable = False``)."""
    a.flags.writeable = False
    return a


class SelectionError(ScenarioError):
    """A selection rule whose answer broke its contract (one line naming the rule; exit 2)."""


class SelectionFailed(PartError):
    """A selection rule that raised or called ``sys.exit`` (one line naming the rule; exit 1)."""


@dataclass(frozen=True, eq=False)
class Reported:
    """What the trained clients reported with their updates, one entry per trained job.

    Attributes:
        client, key: the job (int64 arrays).
        loss: mean training loss over the job's local batches.
        loss_sq: sum over the job's local samples of the squared per-sample loss.
        samples: samples the job processed (steps x batch size).
    """

    client: np.ndarray
    key: np.ndarray
    loss: np.ndarray
    loss_sq: np.ndarray
    samples: np.ndarray

    @classmethod
    def none(cls) -> "Reported":
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, np.zeros(0), np.zeros(0), z)


def observations(table: RoundTable, reported: Reported | None = None) -> Observations:
    """What the server learned from plan ``table`` (its non-offline rows, in row order): outcome,
    the durations it observed, and what ``reported`` says of each trained job (NaN / 0 where
    nothing was reported)."""
    c = table.columns
    rows = c["status"] != _OFFLINE
    status = c["status"][rows]
    done = status == _COMPLETED
    client, key = c["client"][rows], c["key"][rows]
    start, end = c["start"][rows], c["end"][rows]
    down, up = c["download"][rows], c["upload"][rows]
    download = np.where(down > 0, down, np.nan)
    upload = np.where(done, up, np.nan)
    compute = np.where(done, end - start - down - up, np.nan)
    n = len(client)
    loss, loss_sq, samples = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    if reported is not None and len(reported.client):
        where = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(client.tolist(), key.tolist()))}
        for j, (a, b) in enumerate(zip(reported.client.tolist(), reported.key.tolist())):
            i = where.get((a, b))
            if i is not None:
                loss[i], loss_sq[i], samples[i] = reported.loss[j], reported.loss_sq[j], reported.samples[j]
    names = np.asarray(STATUSES)[status]
    return Observations(int(table.round), float(table.close), client.copy(), key.copy(), names,
                        np.where(done, c["steps"][rows], 0), download, compute, upload, loss, loss_sq, samples)


class Selector:
    """A run's selection rule with its state (the clock's paths call :meth:`pick`; the schedule
    calls :meth:`observe` after each plan).

    Args:
        rule: the :class:`~fedsim.clock.selection.SelectionRule`.
        num_clients, p, seed: the population and the scenario seed (the rule's ``init``).
        checkin: async populations large enough for keyed check-in draws.
        name: the name the rule was registered under (``round.selection.name``), which its errors
            give; None: the rule's ``name`` attribute, else its class name.

    The rule is handed read-only arrays (numpy ``flags.writeable`` False): ``p`` is a copy of the
    clock's, ``Request.online()`` a copy of the candidates, and each
    :class:`~fedsim.clock.selection.Observations` holds read-only views of the arrays logged for
    resume, so a rule that writes into them raises (``ValueError: assignment destination is
    read-only``) instead of changing fedsim's data weights or its log.
    """

    def __init__(self, rule: SelectionRule, num_clients: int, p: np.ndarray, seed: int, checkin: bool = False,
                 *, name: str | None = None):
        self.rule, self.m, self.checkin = rule, int(num_clients), bool(checkin)
        self.p = _read_only(np.array(p, dtype=np.float64))
        self.name = name or getattr(rule, "name", None) or type(rule).__name__
        self.state = self._call("init", self.m, self.p, int(seed))
        #: every Observations fed so far (rules that read them): a resumed run replays this log
        self.log: list[Observations] = []

    def pick(self, key: int, time: float, k: int | None, online, is_online=None, is_async: bool = False) -> Picked:
        """The rule's answer to a pick at ``time`` asking for ``k`` clients among ``online()``
        (a callable giving the sorted candidates; ``is_online(clients)`` a cheap membership test)."""
        request = Request(int(key), float(time), k, self.m, self.p, is_async, self.checkin and is_async, online,
                          is_online)
        out = self._call("select", self.state, request)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise SelectionError(f"round.selection: {self.name}.select() must return (state, Picked)")
        try:
            picked = check_picked(out[1], request, self.name)
        except ValueError as err:
            raise SelectionError(f"round.selection: {err} (pick {key} at t={time:g})") from None
        self.state = out[0]
        return picked

    def observe(self, obs: Observations) -> None:
        """Feed the server's observations of one plan to the rule."""
        if not self.rule.uses_feedback:
            return
        views = {f.name: _read_only(getattr(obs, f.name).view()) for f in fields(obs)
                 if isinstance(getattr(obs, f.name), np.ndarray)}
        self.state = self._call("observe", self.state, replace(obs, **views))
        self.log.append(obs)

    def _call(self, method: str, *args):
        try:
            return getattr(self.rule, method)(*args)
        except ScenarioError:
            raise
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a rule failing (sys.exit too): one line naming it
            msg = str(err).splitlines()[0] if str(err) else ""
            raise SelectionFailed(f"round.selection: {self.name}.{method}() failed: {type(err).__name__}"
                                 f"{': ' + msg[:200] if msg else ''}") from None
