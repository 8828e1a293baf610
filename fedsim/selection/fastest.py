"""``fastest``: the k clients with the lowest mean observed duration, unseen clients first.

``round.selection: {name: fastest}`` (no keys). Deliberately biased: it measures what a selector
that only chases speed costs in accuracy and fairness (docs/selection.md).

A client is *seen* once the server has a report of one of its jobs (completed, dropped or failed).
Its mean observed duration is the mean of download + compute + upload over its completed jobs
(+inf when none completed). At a pick, the unseen candidates come first, uniformly among them
(as ``uniform`` draws: the first of a permutation from ``stream(seed, "select", key)``); the
slots left go to the seen candidates by increasing mean duration, ties by client id. It reads
durations only (``--schedule-only`` runs it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..rng import stream
from ..clock.selection import Observations, Picked, Request, SelectionRule
from .section import SelectionSection

__all__ = ["Fastest", "FastestState", "FastestSelection", "first_of_permutation"]


def first_of_permutation(candidates: np.ndarray, k: int, seed: int, key: int) -> np.ndarray:
    """The first k of one permutation of ``candidates`` (sorted) from ``stream(seed, "select",
    key)``, sorted: ``uniform``'s sync pick, so a rule that picks uniformly among all candidates
    (every built-in's first round) picks what ``uniform`` picks."""
    return np.sort(candidates[stream(seed, "select", key).permutation(len(candidates))[:k]])


@dataclass(frozen=True, eq=False)
class FastestState:
    """What ``fastest`` keeps: per client, jobs reported, completed jobs and their summed duration."""

    seed: int
    p: np.ndarray
    reported: np.ndarray  # int64: jobs reported (any outcome)
    completed: np.ndarray  # int64: completed jobs
    total: np.ndarray  # float64: summed download + compute + upload of the completed jobs

    def mean_duration(self, clients: np.ndarray) -> np.ndarray:
        """Mean observed duration of ``clients`` (+inf where none completed)."""
        n = self.completed[clients]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, self.total[clients] / np.maximum(n, 1), np.inf)


@dataclass(frozen=True)
class Fastest(SelectionRule):
    """The k lowest mean observed durations; unseen clients first (uniformly among them)."""

    uses_feedback = True
    uses_losses = False
    sync_only = False

    def init(self, num_clients: int, p: np.ndarray, seed: int) -> FastestState:
        zeros = np.zeros(num_clients, dtype=np.int64)
        return FastestState(int(seed), np.asarray(p, dtype=np.float64), zeros, zeros.copy(),
                            np.zeros(num_clients, dtype=np.float64))

    def select(self, state: FastestState, request: Request) -> tuple[FastestState, Picked]:
        cand = request.online()
        want = len(cand) if request.k is None else min(request.k, len(cand))
        if want == len(cand):
            return state, Picked.of(cand, state.p)
        unseen = cand[state.reported[cand] == 0]
        if len(unseen) >= want:
            return state, Picked.of(first_of_permutation(unseen, want, state.seed, request.key), state.p)
        seen = cand[state.reported[cand] > 0]  # sorted by id, so a stable sort breaks ties by id
        order = np.argsort(state.mean_duration(seen), kind="stable")[: want - len(unseen)]
        return state, Picked.of(np.sort(np.concatenate([unseen, seen[order]])), state.p)

    def observe(self, state: FastestState, obs: Observations) -> FastestState:
        if len(obs) == 0:
            return state
        client = np.asarray(obs.client, dtype=np.int64)
        reported, completed, total = state.reported.copy(), state.completed.copy(), state.total.copy()
        np.add.at(reported, client, 1)
        done = obs.completed & np.isfinite(obs.duration)
        np.add.at(completed, client[done], 1)
        np.add.at(total, client[done], obs.duration[done])
        return replace(state, reported=reported, completed=completed, total=total)


class FastestSelection(SelectionSection):
    """``{name: fastest}``: no keys."""

    name: Literal["fastest"] = "fastest"

    def clock_value(self) -> Fastest:
        return Fastest()
