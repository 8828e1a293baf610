"""What a client selection rule is, what it may see (the information boundary), and the clock's
own rules (``uniform``, ``weighted``).

A selector decides whom the server asks to train. It sees what a real server knows and nothing
else:

* at a pick (:class:`Request`): the clients that checked in online (and are not busy with a job
  already), the population size, each client's data weight p_i, the pick's key and time;
* after each server update (:class:`Observations`): the jobs the update reported, each with its
  outcome, the durations the server observed (download, compute, upload of the jobs whose update
  arrived; downloads of jobs that got that far) and what the client reported with its update (its
  mean training loss over the job's local batches, the sum of its squared per-sample losses and
  the number of samples, as Oort's statistical utility needs).

It never sees a device's speed, a trace, a draw of the clock or anything of the future: the clock
builds both values from the rows it already handed to the engine, and the runner adds the losses
the engine computed.

A selection rule is a frozen value with explicit state, optax style::

    state = rule.init(num_clients, p, seed)
    state, picked = rule.select(state, request)
    state = rule.observe(state, observations)

Every random number a rule draws must come from keyed streams (``fedsim.rng.stream(seed, purpose,
key)``), so a rule is a deterministic function of its inputs: a resumed run replays the logged
observations into a fresh state and picks the same clients (the checkpoint keeps the log, not the
state). Rules that never read observations (``uses_feedback = False``) log nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal

import numpy as np

from fedsim.rng import stream

from .checkin import checkin_pick, permutation_pick

__all__ = ["Request", "Picked", "Observations", "SelectionRule", "normalized_weights", "check_picked", "Uniform",
           "Weighted"]


@dataclass(frozen=True, eq=False)
class Request:
    """One pick: the server asks for ``k`` clients among those online now.

    Attributes:
        key: sync: the round index; async: the sequence number of the first job the pick starts
            (the key of ``stream(seed, "select", key)``).
        time: the server's time of the pick (the round's open; async: the instant slots freed).
        k: how many clients to pick (sync: ``clients_per_round``, or the over-committed count;
            async: the free slots); None: everybody online (full participation).
        num_clients: m, the population size (client ids are 0 .. m - 1).
        p: every client's data weight p_i (float64, sums to 1), public to the server.
        is_async: whether the pick fills async slots (then the weights of :class:`Picked` are
            not used: an async job is weighted p_i) or opens a synchronous round.
        checkin: async populations of at least ``fedsim.clock.checkin.CHECKIN_MIN_CLIENTS``:
            the clock's keyed check-in draws (``uniform`` uses them; listing the candidates costs
            O(population)).
    """

    key: int
    time: float
    k: int | None
    num_clients: int
    p: np.ndarray
    is_async: bool = False
    checkin: bool = False
    _online: Callable[[], np.ndarray] = field(default=None, repr=False)
    _is_online: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)

    def online(self) -> np.ndarray:
        """The candidates: clients online at the pick and not busy, sorted (int64, read-only).
        Computed on first call (it may cost O(population))."""
        cached = self.__dict__.get("_cache")
        if cached is None:
            cached = np.array(self._online(), dtype=np.int64)  # a copy: the rule cannot write the clock's
            cached.flags.writeable = False
            object.__setattr__(self, "_cache", cached)
        return cached

    def is_online(self, clients: np.ndarray) -> np.ndarray:
        """Whether each of ``clients`` is a candidate (a bool per entry; entries may repeat)."""
        if self._is_online is not None:
            return np.asarray(self._is_online(np.asarray(clients, dtype=np.int64)), dtype=bool)
        return np.isin(clients, self.online())


@dataclass(frozen=True, eq=False)
class Picked:
    """The clients a rule picked.

    Attributes:
        clients: sorted, distinct client ids among ``Request.online()`` (int64).
        counts: how many times each was drawn (sampling with replacement: one job, count k);
            ones otherwise.
        weights: each picked client's share of the server step (float64; sync only): the round
            aggregates x + sum_i w_i Delta_i (FedNova: its normalised changes), after the weights
            of those that do not report are redistributed over those that do, in proportion
            (docs/algorithms.md). Weights summing to 1 make a step of FedAvg's size; a sum of s
            scales the step by s. :func:`normalized_weights` (p_i over the picked, summing to 1) is
            the usual choice; ``uniform``'s ``unbiased`` weights p_i m / (q P_avail) sum to at most
            m / q. :func:`check_picked` refuses weights summing to 0 where the picked hold data
            (p_i > 0; the round would not move the model) and weights summing to more than
            candidates / picked (more than unbiased uniform weights can sum to: weights of 1
            each, meant as relative shares, would take a step q times the size).

    Construct it as ``Picked(clients, counts, weights)`` (three arrays, one entry per picked
    client) or with :meth:`of`.
    """

    clients: np.ndarray
    counts: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, clients: np.ndarray, p: np.ndarray) -> "Picked":
        """``clients`` (sorted integer ids: an integer array or a list of ints) with count 1 and
        :func:`normalized_weights`; ``ValueError`` for ids that are not integers (a float array,
        even of whole numbers, is refused, as :func:`check_picked` refuses it)."""
        raw = np.asarray(clients)
        if raw.size and not np.issubdtype(raw.dtype, np.integer):
            raise ValueError(f"Picked.of: client ids must be integers, got dtype {raw.dtype} "
                             f"({_first(raw)})")
        clients = raw.astype(np.int64)
        return cls(clients, np.ones(len(clients), dtype=np.int64), normalized_weights(p, clients))


def _first(a: np.ndarray, n: int = 4) -> str:
    """The first ``n`` entries of ``a``, for a message."""
    flat = a.reshape(-1)[:n].tolist()
    return ", ".join(map(repr, flat)) + (", ..." if a.size > n else "")


def normalized_weights(p: np.ndarray, clients: np.ndarray) -> np.ndarray:
    """p_i / sum of p_j over ``clients`` (1 / q each when those p_i sum to 0)."""
    pc = np.asarray(p, dtype=np.float64)[clients]
    total = float(pc.sum())
    return pc / total if total > 0 else np.full(len(clients), 1.0 / max(len(clients), 1))


@dataclass(frozen=True, eq=False)
class Observations:
    """What the server learned at one server update (one round plan), one entry per job it
    reported (offline rows, which no job was asked of, are not included).

    Attributes:
        round: the plan's index (sync: round; async: server update).
        time: when the server learned it (the plan's close).
        client: the jobs' clients (int64).
        key: the jobs' keys (sync: the round; async: the job's sequence number).
        status: ``completed`` | ``dropped`` | ``failed`` per job (str array).
        steps: local steps in the update that reached the server (0 unless completed).
        download: seconds the model download took; NaN where it did not finish.
        compute: seconds from the end of the download to the start of the upload (local work,
            and any outage the job sat out); NaN unless the update arrived.
        upload: seconds the upload took; NaN unless the update arrived.
        loss: the mean training loss over the job's local batches as the client reported it; NaN
            unless the update arrived and was trained (``--schedule-only`` trains nothing).
        loss_sq: the sum over the job's local samples of the squared per-sample training loss
            (Oort's statistical utility); NaN likewise.
        samples: how many samples the job's local steps processed (steps x batch size).
    """

    round: int
    time: float
    client: np.ndarray
    key: np.ndarray
    status: np.ndarray
    steps: np.ndarray
    download: np.ndarray
    compute: np.ndarray
    upload: np.ndarray
    loss: np.ndarray
    loss_sq: np.ndarray
    samples: np.ndarray

    def __len__(self) -> int:
        return len(self.client)

    @property
    def completed(self) -> np.ndarray:
        """Bool mask of the jobs whose update arrived."""
        return self.status == "completed"

    @property
    def duration(self) -> np.ndarray:
        """download + compute + upload (NaN unless the update arrived)."""
        return self.download + self.compute + self.upload


class SelectionRule:
    """Base of selection rules (see the module docstring). Subclass it as a frozen dataclass.

    Class attributes:
        uses_feedback: the rule reads :class:`Observations` (the runner logs them for resume).
        uses_losses: it reads the reported losses, so it cannot run without training
            (``--schedule-only`` refuses it in one line).
        sync_only: it picks synchronous rounds only (``round.policy: async`` refuses it).
    """

    uses_feedback: ClassVar[bool] = False
    uses_losses: ClassVar[bool] = False
    sync_only: ClassVar[bool] = False

    def init(self, num_clients: int, p: np.ndarray, seed: int) -> Any:
        """The rule's state before the first pick (default: the seed, nothing else)."""
        return seed

    def select(self, state: Any, request: Request) -> tuple[Any, Picked]:
        raise NotImplementedError

    def observe(self, state: Any, obs: Observations) -> Any:
        """The state after the server learned ``obs`` (default: unchanged)."""
        return state


def check_picked(picked: Any, request: Request, name: str) -> Picked:
    """``picked`` if it is a valid answer to ``request``, else ``ValueError`` (one line naming the
    rule): distinct sorted integer ids among the candidates, counts >= 1 summing to exactly
    min(k, candidates) (every candidate once when k is None), finite weights >= 0, one count and
    one weight per client; in a synchronous pick the weights sum to at most candidates / picked,
    and to more than 0 unless every picked p_i is 0 (see :class:`Picked`)."""
    where = f"selection {name!r}"
    if not isinstance(picked, Picked):
        raise ValueError(f"{where}: select() must return (state, Picked), got {type(picked).__name__}")
    c = np.asarray(picked.clients)
    if c.ndim != 1 or (c.size and not np.issubdtype(c.dtype, np.integer)):
        raise ValueError(f"{where}: clients must be a 1-d array of integer ids, got dtype {c.dtype} shape {c.shape}")
    c = c.astype(np.int64)
    if c.size and (c.min() < 0 or c.max() >= request.num_clients):
        bad = int(c[(c < 0) | (c >= request.num_clients)][0])
        raise ValueError(f"{where}: client {bad} is out of range (0 .. {request.num_clients - 1})")
    if np.any(np.diff(c) <= 0):
        dup = np.diff(c) == 0
        if dup.any():
            raise ValueError(f"{where}: client {int(c[1:][dup][0])} picked twice")
        raise ValueError(f"{where}: clients must be sorted")
    if c.size and not request.is_online(c).all():
        off = int(c[~request.is_online(c)][0])
        raise ValueError(f"{where}: client {off} is not online (or is busy) at the pick")
    counts = np.asarray(picked.counts)
    weights = np.asarray(picked.weights, dtype=np.float64)
    if counts.shape != c.shape or weights.shape != c.shape:
        raise ValueError(f"{where}: counts and weights need one entry per picked client ({len(c)})")
    if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1):
        raise ValueError(f"{where}: counts must be integers >= 1")
    if weights.size and not (np.isfinite(weights).all() and weights.min() >= 0):
        raise ValueError(f"{where}: weights must be finite and >= 0")
    drawn = int(counts.sum())
    if request.k is not None and drawn > request.k:
        raise ValueError(f"{where}: picked {drawn} clients, more than the {request.k} asked for")
    if request.k is None or drawn < request.k:  # fewer than asked: only if the candidates ran out
        want = len(request.online()) if request.k is None else min(request.k, len(request.online()))
        if drawn != want:
            raise ValueError(f"{where}: picked {drawn} clients; {want} were asked for and online")
    if not request.is_async and c.size:  # async: a job's weight is p_i, these are not used
        total = float(weights.sum())
        most = len(request.online()) / drawn
        if total <= 0 and float(np.asarray(request.p, dtype=np.float64)[c].sum()) > 0:
            raise ValueError(f"{where}: weights sum to 0, so the round would not move the model (a weight is "
                             "the client's share of the step; Picked.of gives p_i over the picked)")
        if total > most * (1 + 1e-9):
            raise ValueError(f"{where}: weights sum to {total:.6g}, more than {most:.6g} (candidates / picked, "
                             "the most unbiased uniform weights sum to): a weight is the client's share of the "
                             "step, not a relative score (Picked.of gives p_i over the picked, summing to 1)")
    return Picked(c, counts.astype(np.int64), weights)


# --------------------------------------------------------------------------- the clock's own rules
def _full_participation(request: Request) -> Picked:
    """Everybody online, weight p_i / P_avail (P_avail = sum of p_i over them; 1 when all are
    online: no rescaling), so the weights target the available population's objective."""
    available = request.online()
    m, p = len(available), request.p
    p_avail = float(p[available].sum()) if m else 0.0
    scale = 1.0 if (m == len(p) or p_avail <= 0) else 1.0 / p_avail
    return Picked(available, np.ones(m, dtype=np.int64), p[available].astype(np.float64) * scale)


@dataclass(frozen=True)
class Uniform(SelectionRule):
    """Uniformly without replacement among the candidates (FedNova section 4, docs/algorithms.md).

    Sync: q = min(k, m) of the m online clients, the first q of one permutation of them (sorted)
    from stream ``("select", key)``, so the picks are nested in q. Weights: ``normalized`` (the
    default) p_i / (sum of p_j over the q picked), summing to 1 (FedProx's reference code,
    Flower); ``unbiased`` p_i m / (q P_avail), unbiased over the draw but its sum varies. k None:
    full participation (p_i / P_avail). Async: the same permutation rule over the candidates, or,
    in populations of at least ``CHECKIN_MIN_CLIENTS``, keyed check-in draws
    (:mod:`fedsim.clock.checkin`); an async job's weight is p_i.
    """

    weights: Literal["normalized", "unbiased"] = "normalized"

    def select(self, state: Any, request: Request) -> tuple[Any, Picked]:
        seed, k, p = state, request.k, request.p
        if request.is_async:
            if request.checkin:
                pick = checkin_pick(request.num_clients, k, seed, request.key, request.is_online, request.online)
            else:
                pick = permutation_pick(request.online(), k, seed, request.key)
            return state, Picked(pick, np.ones(len(pick), dtype=np.int64), p[pick].astype(np.float64))
        available = request.online()
        m = len(available)
        if m == 0 or k is None:
            return state, _full_participation(request)
        q = min(k, m)
        chosen = np.sort(available[stream(seed, "select", request.key).permutation(m)[:q]])
        if self.weights == "normalized":
            return state, Picked(chosen, np.ones(q, dtype=np.int64), normalized_weights(p, chosen))
        p_avail = float(p[available].sum())
        scale = 1.0 if (m == len(p) or p_avail <= 0) else 1.0 / p_avail
        return state, Picked(chosen, np.ones(q, dtype=np.int64), p[chosen] * m / q * scale)


@dataclass(frozen=True)
class Weighted(SelectionRule):
    """q = min(k, m) draws with replacement among the m online clients, probability proportional
    to p_i (uniform if those p_i are all 0), from stream ``("select", key)``; a client drawn c times
    is one job with count c and weight c / q. k None: full participation. Synchronous rounds only."""

    sync_only: ClassVar[bool] = True

    def select(self, state: Any, request: Request) -> tuple[Any, Picked]:
        seed, k, p = state, request.k, request.p
        available = request.online()
        m = len(available)
        if m == 0 or k is None:
            return state, _full_participation(request)
        q = min(k, m)
        pa = p[available].astype(np.float64)
        total = pa.sum()
        probs = pa / total if total > 0 else np.full(m, 1.0 / m)
        counts = np.bincount(stream(seed, "select", request.key).choice(m, size=q, replace=True, p=probs), minlength=m)
        idx = np.flatnonzero(counts)
        return state, Picked(available[idx], counts[idx], counts[idx] / q)
