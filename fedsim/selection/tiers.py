"""``tiers``: TiFL's tier-based selection (Chai et al., HPDC 2020).

``round.selection: {name: tiers, tiers: 5, interval: 10, credits: null, adaptive: true}``.

* Profiling: a client is *profiled* once the server has a report of one of its jobs; its latency is
  the mean observed duration (download + compute + upload) of its completed jobs, the first one
  being its profile (+inf when none completed: TiFL's time-outs, the slowest tier). Unprofiled
  candidates are picked first, uniformly among them (as ``uniform`` draws, stream ``select``).
* Tiering: the profiled clients (online or not) sorted by latency (ties by id) and cut into
  ``tiers`` groups of equal size (the first n mod tiers one larger); tier 0 is the fastest.
* Per round one tier is drawn among the non-empty tiers with credits left, in proportion to the
  tier probabilities (initially equal); it spends a credit when the pick takes a profiled client.
  ``credits: null`` never runs out; when every non-empty tier is out of credits, all get
  ``credits`` again (fedsim does not tell a selector how many rounds the run has).
* Inside the tier the slots left are filled uniformly; when its online members run out, from the
  nearest tiers (faster first at equal distance), uniformly inside each.
* ``adaptive: true`` (TiFL's adaptive tier selection, Alg. 2 as the public reimplementations in
  fltk and FLGo have it): every ``interval`` rounds the n tiers with credits are ranked by their
  accuracy, lowest first, and the i-th (0-based) gets probability (n - i) / (n (n + 1) / 2). A
  selector does not see test accuracy (the information boundary), so a tier's accuracy is taken as
  minus the mean of its members' last reported training losses (a tier with none ranks last).
  ``adaptive: false`` keeps the probabilities equal and reads durations only (``--schedule-only``
  runs it).

Random numbers come from ``stream(seed, "tiers", key, j)`` (unprofiled clients: ``("select",
key)``); :meth:`Tiers.select` never changes the state (the credit a pick spends is booked by
:meth:`Tiers.observe`, which redraws the same tier from the same state and key), so replaying
the observations rebuilds it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from pydantic import Field

from ..limits import MAX_CLIENTS, MAX_ROUNDS
from ..rng import stream
from ..clock.selection import Observations, Picked, Request, SelectionRule
from .fastest import first_of_permutation
from .section import SelectionSection

__all__ = ["Tiers", "AdaptiveTiers", "TiersState", "TiersSelection", "tier_sizes", "change_probs"]


def tier_sizes(n: int, tiers: int) -> np.ndarray:
    """Sizes of ``tiers`` groups of n clients in latency order: equal, the first n mod tiers one larger."""
    q, rem = divmod(int(n), int(tiers))
    return np.array([q + 1] * rem + [q] * (tiers - rem), dtype=np.int64)


def change_probs(accuracy: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """TiFL's ChangeProbs: the n eligible tiers by accuracy, lowest first (ties by tier index),
    the i-th (0-based) gets (n - i) / (n (n + 1) / 2); the others 0."""
    idx = np.flatnonzero(eligible)
    n = len(idx)
    probs = np.zeros(len(accuracy))
    if n:
        ranked = idx[np.argsort(np.asarray(accuracy, dtype=np.float64)[idx], kind="stable")]
        probs[ranked] = (n - np.arange(n)) / (n * (n + 1) / 2)
    return probs


@dataclass(frozen=True, eq=False)
class TiersState:
    """TiFL's state: per client jobs reported, completed, their summed duration and the last
    reported training loss (NaN: none); per tier probability and credits left (inf: unlimited)."""

    seed: int
    p: np.ndarray
    reported: np.ndarray
    completed: np.ndarray
    total: np.ndarray
    loss: np.ndarray
    probs: np.ndarray
    credits: np.ndarray
    rounds: int

    def latency(self, clients: np.ndarray) -> np.ndarray:
        """Mean observed duration of ``clients``' completed jobs (+inf where none)."""
        n = self.completed[clients]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, self.total[clients] / np.maximum(n, 1), np.inf)


@dataclass(frozen=True)
class Tiers(SelectionRule):
    """TiFL with static (equal) tier probabilities; see the module docstring."""

    tiers: int = 5
    interval: int = 10
    credits: int | None = None

    uses_feedback = True
    uses_losses = False
    sync_only = True
    adaptive = False

    def init(self, num_clients: int, p: np.ndarray, seed: int) -> TiersState:
        m, t = int(num_clients), int(self.tiers)
        zeros = np.zeros(m, dtype=np.int64)
        return TiersState(
            seed=int(seed), p=np.asarray(p, dtype=np.float64), reported=zeros, completed=zeros.copy(),
            total=np.zeros(m), loss=np.full(m, np.nan), probs=np.full(t, 1.0 / t),
            credits=np.full(t, np.inf if self.credits is None else float(self.credits)), rounds=0,
        )

    def tier_of(self, state: TiersState) -> np.ndarray:
        """Every client's tier (int64; -1: unprofiled)."""
        seen = np.flatnonzero(state.reported > 0)
        order = seen[np.lexsort((seen, state.latency(seen)))]
        tier = np.full(len(state.reported), -1, dtype=np.int64)
        tier[order] = np.repeat(np.arange(self.tiers, dtype=np.int64), tier_sizes(len(seen), self.tiers))
        return tier

    def draw_tier(self, state: TiersState, key: int) -> int:
        """The tier drawn at the pick ``key``: among the non-empty tiers with credits left (all the
        non-empty ones if none has), in proportion to the probabilities (equally if all are 0)."""
        nonempty = tier_sizes(int((state.reported > 0).sum()), self.tiers) > 0
        avail = nonempty & (state.credits > 0)
        if not avail.any():
            avail = nonempty
        idx = np.flatnonzero(avail)
        if len(idx) == 0:  # nobody profiled: no tier to draw (never asked for by select or observe)
            return 0
        w = state.probs[idx]
        w = w / w.sum() if w.sum() > 0 else np.full(len(idx), 1.0 / len(idx))
        u = stream(state.seed, "tiers", key, 0).random()
        return int(idx[min(int(np.searchsorted(np.cumsum(w), u, side="right")), len(idx) - 1)])

    def select(self, state: TiersState, request: Request) -> tuple[TiersState, Picked]:
        cand = request.online()
        want = len(cand) if request.k is None else min(request.k, len(cand))
        if want == len(cand):
            return state, Picked.of(cand, state.p)
        profiled = state.reported[cand] > 0
        unseen = cand[~profiled]
        if len(unseen) >= want:
            return state, Picked.of(first_of_permutation(unseen, want, state.seed, request.key), state.p)
        rng = stream(state.seed, "tiers", request.key, 1)
        seen = cand[profiled]
        t = self.draw_tier(state, request.key)
        tier = self.tier_of(state)[seen]
        order = np.lexsort((rng.random(len(seen)), tier, np.abs(tier - t)))
        return state, Picked.of(np.sort(np.concatenate([unseen, seen[order[: want - len(unseen)]]])), state.p)

    def tier_accuracy(self, state: TiersState) -> np.ndarray:
        """Per tier: minus the mean last reported training loss of its members (+inf: none reported)."""
        tier = self.tier_of(state)
        has = (tier >= 0) & np.isfinite(state.loss)
        total = np.bincount(tier[has], weights=state.loss[has], minlength=self.tiers)
        n = np.bincount(tier[has], minlength=self.tiers)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, -total / np.maximum(n, 1), np.inf)

    def observe(self, state: TiersState, obs: Observations) -> TiersState:
        client = np.asarray(obs.client, dtype=np.int64)
        credits = state.credits.copy()
        if np.isfinite(credits).all() and (state.reported[client] > 0).any():
            credits[self.draw_tier(state, obs.round)] -= 1
        reported, completed = state.reported.copy(), state.completed.copy()
        total, loss = state.total.copy(), state.loss.copy()
        np.add.at(reported, client, 1)
        done = obs.completed & np.isfinite(obs.duration)
        np.add.at(completed, client[done], 1)
        np.add.at(total, client[done], obs.duration[done])
        told = obs.completed & np.isfinite(obs.loss)
        loss[client[told]] = obs.loss[told]
        new = replace(state, reported=reported, completed=completed, total=total, loss=loss, credits=credits,
                      rounds=state.rounds + 1)
        nonempty = tier_sizes(int((reported > 0).sum()), self.tiers) > 0
        if np.isfinite(credits).all() and not (nonempty & (credits > 0)).any():
            new = replace(new, credits=np.full(self.tiers, float(self.credits)))
        if self.adaptive and new.rounds >= self.interval and new.rounds % self.interval == 0:
            eligible = nonempty & (new.credits > 0)
            new = replace(new, probs=change_probs(self.tier_accuracy(new), eligible))
        return new


@dataclass(frozen=True)
class AdaptiveTiers(Tiers):
    """TiFL with adaptive tier probabilities from the tiers' reported training losses."""

    uses_losses = True
    adaptive = True


class TiersSelection(SelectionSection):
    """``{name: tiers, tiers, interval, credits, adaptive}``."""

    name: Literal["tiers"] = "tiers"
    tiers: int = Field(5, ge=1, le=MAX_CLIENTS)
    interval: int = Field(10, ge=1, le=MAX_ROUNDS)
    credits: int | None = Field(None, ge=1, le=MAX_ROUNDS)
    adaptive: bool = True

    def clock_value(self) -> Tiers:
        cls = AdaptiveTiers if self.adaptive else Tiers
        return cls(tiers=self.tiers, interval=self.interval, credits=self.credits)
