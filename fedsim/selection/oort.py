"""``oort``: Oort's guided participant selection (Lai et al., OSDI 2021) as FedScale ships it.

``round.selection: {name: oort, ...}``; the keys and defaults are FedScale's (SymbioticLab/FedScale,
``fedscale/cloud/config_parser.py``; the selector ``thirdparty/oort/oort.py``, ``_training_selector``;
its driver ``fedscale/cloud/client_manager.py`` and the aggregator's feedback). docs/selection.md
states the rule with its equations and where fedsim differs from FedScale, and why.

Oort round R (the pick of fedsim round r has R = r, the rounds observed so far). Per client i the
state keeps its utility U_i, its last observed duration t_i, the round L_i whose report it was last
heard in (1-based) and its count of reports. A completed job sets U_i = |B_i| sqrt(sum_k loss_k^2 /
|B_i|) = sqrt(samples * loss_sq) (Oort eq. 1), t_i = download + compute + upload, L_i = R + 1; a
dropped job (a straggler) gets the mean utility of the round's completed jobs and t_i = the round's
length (a lower bound: it was still running at the close); a failed job tells nothing.

At a pick (every candidate when k >= the candidates; in round 0, before any feedback, what
``uniform`` picks: the first k of a permutation from ``stream(seed, "select", key)``):

* preferred duration T: the ``round_threshold``-th percentile of the explored clients' t_i
  (+inf when ``round_threshold >= 100``), moved by the pacer;
* explored, not blacklisted candidates score
  ``|(min(U_i, clip) - U_min) / U_range + sqrt(0.1 log R / L_i)| * (T / t_i)^round_penalty``
  (the factor only when t_i > T), U_min = 0.999 x the least positive utility among them,
  clip its ``clip_bound`` quantile, U_range = max(U_max - U_min, 1e-4);
* exploitation: (1 - eps) k of them, at random in proportion to the score among the best ones
  (those scoring at least ``cut_off_util`` x the score of the first one left out, and at least the
  10 x (1 - eps) k + 1 best); exploration: the slots left, among the unexplored candidates, at
  random in proportion to p_i among the ``sample_window`` x slots with the largest p_i; when too
  few candidates are unexplored, exploitation takes the slots they leave: k - explore slots, the
  pool cut off at that length, drawn by score (Oort's Algorithm 1);
* eps decays by ``exploration_decay`` per observed round down to ``exploration_min``.

Every other random number comes from ``stream(seed, "oort", key, j)``; :meth:`Oort.select` never
changes the state (only :meth:`Oort.observe` does), so replaying the observations rebuilds it
exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from pydantic import Field

from ..limits import MAX_ROUNDS
from ..rng import stream
from ..clock.selection import Observations, Picked, Request, SelectionRule
from .fastest import first_of_permutation
from .section import SelectionSection

__all__ = ["Oort", "OortState", "OortPlan", "OortSelection", "utility", "weighted_order"]


def utility(samples: np.ndarray, loss_sq: np.ndarray) -> np.ndarray:
    """Oort's statistical utility |B_i| sqrt(sum_k loss_k^2 / |B_i|) = sqrt(|B_i| sum_k loss_k^2)
    (Lai et al. 2021, eq. 1), from a job's samples |B_i| and its summed squared per-sample losses."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sqrt(np.asarray(samples, dtype=np.float64) * np.asarray(loss_sq, dtype=np.float64))


def weighted_order(rng: np.random.Generator, w: np.ndarray) -> np.ndarray:
    """A random order of ``w``'s indices; its first n are a draw of n without replacement, each
    next one with probability proportional to its weight among those left (Efraimidis-Spirakis
    keys E_i / w_i, E_i ~ Exp(1)); zero weights come last, in uniform random order."""
    w = np.asarray(w, dtype=np.float64)
    e = -np.log1p(-rng.random(len(w)))
    with np.errstate(divide="ignore", invalid="ignore"):
        keys = np.where(w > 0, e / np.where(w > 0, w, 1.0), np.inf)
    return np.lexsort((e, keys))


@dataclass(frozen=True, eq=False)
class OortState:
    """Oort's state: per client utility, last duration (NaN: never observed), last round heard
    (1-based, 0: never), reports; the rounds observed, eps, the pacer's percentile and history."""

    seed: int
    p: np.ndarray
    reward: np.ndarray
    duration: np.ndarray
    last: np.ndarray
    count: np.ndarray
    rounds: int
    exploration: float
    threshold: float
    history: tuple[float, ...]
    last_close: float


@dataclass(frozen=True, eq=False)
class OortPlan:
    """The deterministic part of one Oort pick (before its random draws).

    Attributes:
        round: R, the Oort round (rounds observed).
        exploration: eps at this pick.
        preferred_duration: T.
        blacklist: blacklisted clients (sorted).
        scored: the explored, not blacklisted candidates by decreasing score (ties by id).
        scores: their scores.
        exploit_len: Oort's exploitation length, k - int(eps k) capped by len(scored) (FedScale's
            ``exploitLen``).
        pool_len: the pool cut-off at ``exploit_len``: ``scored[:pool_len]``.
        unexplored: the unexplored candidates by decreasing p_i (ties in a keyed random order).
        explore_len: how many are explored.
        explore_pool_len: the exploration draw is among ``unexplored[:explore_pool_len]`` in
            proportion to p_i.
        draw_len: how many are drawn by score: k - explore_len capped by len(scored); larger than
            ``exploit_len`` when too few unexplored candidates take the slots eps keeps for them
            (Oort's Algorithm 1 exploits the slots exploration leaves).
        draw_pool_len: the pool cut-off at ``draw_len``: the exploitation draw is among
            ``scored[:draw_pool_len]`` in proportion to the score.
        others: the blacklisted candidates, best first (scores normalised over every explored
            candidate); they fill the slots left when too few could be exploited or explored.
    """

    round: int
    exploration: float
    preferred_duration: float
    blacklist: np.ndarray
    scored: np.ndarray
    scores: np.ndarray
    exploit_len: int
    pool_len: int
    unexplored: np.ndarray
    explore_len: int
    explore_pool_len: int
    draw_len: int
    draw_pool_len: int
    others: np.ndarray


@dataclass(frozen=True)
class Oort(SelectionRule):
    """Oort's training selector with FedScale's defaults (see the module docstring)."""

    exploration_factor: float = 0.9
    exploration_decay: float = 0.98
    exploration_min: float = 0.3
    round_threshold: float = 30.0
    round_penalty: float = 2.0
    clip_bound: float = 0.9
    cut_off_util: float = 0.05
    sample_window: float = 5.0
    pacer_step: int = 20
    pacer_delta: float = 5.0
    blacklist_rounds: int | None = None
    blacklist_max_len: float = 0.3

    uses_feedback = True
    uses_losses = True
    sync_only = True

    def init(self, num_clients: int, p: np.ndarray, seed: int) -> OortState:
        m = int(num_clients)
        return OortState(
            seed=int(seed), p=np.asarray(p, dtype=np.float64), reward=np.zeros(m), duration=np.full(m, np.nan),
            last=np.zeros(m, dtype=np.int64), count=np.zeros(m, dtype=np.int64), rounds=0,
            exploration=float(self.exploration_factor), threshold=float(self.round_threshold), history=(),
            last_close=0.0,
        )

    # -- the pick ---------------------------------------------------------------------------------

    def select(self, state: OortState, request: Request) -> tuple[OortState, Picked]:
        cand = request.online()
        want = len(cand) if request.k is None else min(request.k, len(cand))
        if want == len(cand):
            return state, Picked.of(cand, state.p)
        if state.rounds == 0:  # FedScale's client manager picks its first round uniformly: as uniform does
            return state, Picked.of(first_of_permutation(cand, want, state.seed, request.key), state.p)
        plan = self.plan(state, request)
        rng = stream(state.seed, "oort", request.key, 2)
        pool = plan.scored[: plan.draw_pool_len]
        exploit = pool[weighted_order(rng, plan.scores[: plan.draw_pool_len])[: plan.draw_len]]
        epool = plan.unexplored[: plan.explore_pool_len]
        explore = epool[weighted_order(rng, state.p[epool])[: plan.explore_len]]
        picked = np.concatenate([exploit, explore])
        short = want - len(picked)
        if short > 0:  # too few to exploit and explore (the blacklist): the best of the rest
            rest = np.concatenate([plan.scored[~np.isin(plan.scored, exploit)], plan.others])
            picked = np.concatenate([picked, rest[:short]])
        return state, Picked.of(np.sort(picked), state.p)

    def preferred_duration(self, state: OortState, threshold: float | None = None) -> float:
        """T: the ``threshold``-th percentile (default: the pacer's) of the explored clients' last
        durations, the element at index min(int(n * threshold / 100), n - 1) of them sorted;
        +inf when threshold >= 100 or none is known."""
        thr = state.threshold if threshold is None else threshold
        if thr >= 100.0:
            return math.inf
        d = state.duration[(state.count > 0) & np.isfinite(state.duration)]
        if len(d) == 0:
            return math.inf
        i = min(int(len(d) * thr / 100.0), len(d) - 1)
        return float(np.partition(d, i)[i])

    def blacklist(self, state: OortState) -> np.ndarray:
        """Clients heard more than ``blacklist_rounds`` times, most heard first (ties by id), at
        most floor(blacklist_max_len x m) of them; none when ``blacklist_rounds`` is None."""
        if self.blacklist_rounds is None:
            return np.zeros(0, dtype=np.int64)
        over = np.flatnonzero(state.count > self.blacklist_rounds)
        over = over[np.lexsort((over, -state.count[over]))]
        return np.sort(over[: int(math.floor(self.blacklist_max_len * len(state.count)))])

    def scores(self, state: OortState, clients: np.ndarray, ref: np.ndarray, preferred: float) -> np.ndarray:
        """Oort's scores of explored ``clients`` at round ``state.rounds``, utilities normalised over
        the positive utilities of ``ref`` (see the module docstring)."""
        u = state.reward[ref]
        u = np.sort(u[u > 0])
        if len(u):
            clip = u[min(int(len(u) * self.clip_bound), len(u) - 1)]
            u_max, u_min = float(u[-1]), float(u[0]) * 0.999
        else:
            clip, u_max, u_min = 0.0, 0.0, 0.0
        u_range = max(u_max - u_min, 1e-4)
        log_r = math.log(state.rounds)
        sc = (np.minimum(state.reward[clients], clip) - u_min) / u_range + np.sqrt(0.1 * log_r / state.last[clients])
        t = state.duration[clients]
        slow = t > preferred
        sc = np.where(slow, sc * (preferred / np.maximum(1e-4, np.where(slow, t, 1.0))) ** self.round_penalty, sc)
        return np.abs(sc)

    def plan(self, state: OortState, request: Request) -> OortPlan:
        """The deterministic part of the pick ``request`` asks of ``state`` (after round 0, with
        fewer slots than candidates)."""
        cand = request.online()
        want = len(cand) if request.k is None else min(request.k, len(cand))
        black = self.blacklist(state)
        explored = state.count[cand] > 0
        banned = np.isin(cand, black)
        scored = cand[explored & ~banned]
        preferred = self.preferred_duration(state)
        sc = self.scores(state, scored, scored, preferred)
        order = np.lexsort((scored, -sc))
        scored, sc = scored[order], sc[order]
        exploit_len = min(want - int(want * state.exploration), len(scored))
        pool_len = self.pool_len(sc, exploit_len)
        unexplored = cand[~explored]
        tie = stream(state.seed, "oort", request.key, 1).random(len(unexplored))
        unexplored = unexplored[np.lexsort((tie, -state.p[unexplored]))]
        explore_len = min(len(unexplored), want - exploit_len)
        explore_pool_len = min(int(self.sample_window * explore_len), len(unexplored))
        draw_len = min(want - explore_len, len(scored))
        draw_pool_len = pool_len if draw_len == exploit_len else self.pool_len(sc, draw_len)
        others = cand[explored & banned]
        if len(others):
            osc = self.scores(state, others, cand[explored], preferred)
            others = others[np.lexsort((others, -osc))]
        return OortPlan(
            round=state.rounds, exploration=state.exploration, preferred_duration=preferred, blacklist=black,
            scored=scored, scores=sc, exploit_len=exploit_len, pool_len=pool_len, unexplored=unexplored,
            explore_len=explore_len, explore_pool_len=explore_pool_len, draw_len=draw_len,
            draw_pool_len=draw_pool_len, others=others,
        )

    def pool_len(self, scores: np.ndarray, length: int) -> int:
        """Oort's pool cut-off for drawing ``length`` of the clients scoring ``scores`` (sorted,
        decreasing): they are kept until the first one that scores below ``cut_off_util`` times
        the score at index ``length`` and lies beyond the first 10 ``length`` + 1; all of them
        when there is no such index."""
        if length >= len(scores):
            return len(scores)
        cut = scores[length] * self.cut_off_util
        stop = (scores < cut) & (np.arange(len(scores)) > 10.0 * length)
        return int(np.argmax(stop)) if stop.any() else len(scores)

    # -- feedback ---------------------------------------------------------------------------------

    def observe(self, state: OortState, obs: Observations) -> OortState:
        heard_round = state.rounds + 1
        client = np.asarray(obs.client, dtype=np.int64)
        reward, duration = state.reward.copy(), state.duration.copy()
        last, count = state.last.copy(), state.count.copy()
        exploited = state.count[client] > 0
        done = obs.status == "completed"
        dropped = obs.status == "dropped"
        u = utility(obs.samples, obs.loss_sq)
        good = done & np.isfinite(u)
        mean_u = float(np.sum(u[good]) / max(1, int(good.sum())))
        reward[client[good]] = u[good]  # a non-finite utility (a diverged loss) keeps the last one
        reward[client[dropped]] = mean_u
        d = obs.duration
        ok = done & np.isfinite(d)
        duration[client[ok]] = d[ok]
        duration[client[dropped]] = float(obs.time) - state.last_close
        heard = done | dropped
        last[client[heard]] = heard_round
        np.add.at(count, client[heard], 1)
        # the pacer: the mean utility of the round's exploited clients that were heard
        total, n = 0.0, 1e-4
        for c in client[exploited & heard]:
            total += float(reward[c])
            n += 1
        history = (state.history + (total / n,))[-2 * self.pacer_step:]
        threshold = state.threshold
        step = self.pacer_step
        if heard_round >= 2 * step and heard_round % step == 0:
            before, now = sum(history[-2 * step:-step]), sum(history[-step:])
            if abs(now - before) <= before * 0.1:
                threshold = min(100.0, threshold + self.pacer_delta)
            elif abs(now - before) >= before * 5:
                threshold = max(self.pacer_delta, threshold - self.pacer_delta)
        return replace(
            state, reward=reward, duration=duration, last=last, count=count, rounds=heard_round,
            exploration=max(state.exploration * self.exploration_decay, self.exploration_min),
            threshold=threshold, history=history, last_close=float(obs.time),
        )


class OortSelection(SelectionSection):
    """``{name: oort, ...}``: Oort with FedScale's defaults; every key optional."""

    name: Literal["oort"] = "oort"
    exploration_factor: float = Field(0.9, ge=0, le=1)
    exploration_decay: float = Field(0.98, gt=0, le=1)
    exploration_min: float = Field(0.3, ge=0, le=1)
    round_threshold: float = Field(30.0, ge=0, le=100)
    round_penalty: float = Field(2.0, ge=0, le=1e3)
    clip_bound: float = Field(0.9, gt=0, le=1)
    cut_off_util: float = Field(0.05, ge=0, le=1)
    sample_window: float = Field(5.0, ge=1, le=1e6)
    pacer_step: int = Field(20, ge=1, le=MAX_ROUNDS)
    pacer_delta: float = Field(5.0, gt=0, le=100)
    blacklist_rounds: int | None = Field(None, ge=0, le=MAX_ROUNDS)
    blacklist_max_len: float = Field(0.3, ge=0, le=1)

    def clock_value(self) -> Oort:
        return Oort(**self.model_dump(exclude={"name"}))
