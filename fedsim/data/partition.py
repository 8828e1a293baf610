"""Splitting a labelled training set across clients.

Every function returns a tuple with one sorted ``int64`` index array per client; the arrays are
disjoint. Randomness comes only from ``fedsim.rng.stream(seed, "partition")``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.rng import stream

PARTITIONS = ("iid", "dirichlet", "dirichlet_equal", "shards", "powerlaw")
MAX_DIRICHLET_TRIES = 1000


@dataclass(frozen=True)
class PartitionSpec:
    """How to split data across clients.

    Attributes:
        name: One of ``iid | dirichlet | dirichlet_equal | shards | powerlaw``.
        alpha: Dirichlet concentration (``dirichlet``, ``dirichlet_equal``); smaller = more skew.
        classes_per_client: Shards per client (``shards``).
        min_size: Minimum samples per client (``dirichlet``, ``powerlaw``).
        power: Pareto shape of the client sizes (``powerlaw``); smaller = heavier tail.
    """

    name: str = "iid"
    alpha: float = 0.5
    classes_per_client: int = 2
    min_size: int = 10
    power: float = 1.5

    def __post_init__(self) -> None:
        if self.name not in PARTITIONS:
            raise ValueError(f"partition.name: must be one of {', '.join(PARTITIONS)}, got {self.name!r}")
        if not self.alpha > 0:
            raise ValueError(f"partition.alpha: must be > 0, got {self.alpha}")
        if self.classes_per_client < 1:
            raise ValueError(f"partition.classes_per_client: must be >= 1, got {self.classes_per_client}")
        if self.min_size < 0:
            raise ValueError(f"partition.min_size: must be >= 0, got {self.min_size}")
        if not self.power > 0:
            raise ValueError(f"partition.power: must be > 0, got {self.power}")


def partition(labels: np.ndarray, clients: int, spec: PartitionSpec, seed: int) -> tuple[np.ndarray, ...]:
    """Split sample indices ``0..len(labels)-1`` across ``clients``.

    Args:
        labels: Integer class labels, shape ``(n,)``.
        clients: Number of clients ``m``.
        spec: Which split and its parameters.
        seed: Scenario seed.

    Returns:
        ``m`` disjoint, sorted ``int64`` index arrays covering all samples (``dirichlet_equal``
        leaves the ``n mod m`` remainder unused).
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    n = len(labels)
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if clients > n:
        raise ValueError(f"cannot split {n} samples across {clients} clients")
    rng = stream(seed, "partition")
    if spec.name == "iid":
        parts = _iid(n, clients, rng)
    elif spec.name == "dirichlet":
        parts = _dirichlet(labels, clients, spec.alpha, spec.min_size, rng)
    elif spec.name == "dirichlet_equal":
        parts = _dirichlet_equal(labels, clients, spec.alpha, rng)
    elif spec.name == "shards":
        parts = _shards(labels, clients, spec.classes_per_client, rng)
    else:
        parts = _powerlaw(n, clients, spec.power, spec.min_size, rng)
    return tuple(np.sort(np.asarray(p, dtype=np.int64)) for p in parts)


def class_counts(labels: np.ndarray, client_indices: tuple[np.ndarray, ...], num_classes: int) -> np.ndarray:
    """Samples of each class held by each client.

    Returns:
        ``int64`` array of shape ``(clients, num_classes)``.
    """
    labels = np.asarray(labels)
    out = np.zeros((len(client_indices), num_classes), dtype=np.int64)
    for i, idx in enumerate(client_indices):
        out[i] = np.bincount(labels[np.asarray(idx, dtype=np.int64)], minlength=num_classes)[:num_classes]
    return out


def _iid(n: int, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled split into sizes differing by at most one."""
    return np.array_split(rng.permutation(n), clients)


def _dirichlet(
    labels: np.ndarray, clients: int, alpha: float, min_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Label-skewed split of Hsu et al. (2019), as used by FedNova (Wang et al. 2020, Dir_m(alpha)).

    Per class: shuffle its samples, draw shares ``q ~ Dir(alpha * 1_m)``, zero the share of every
    client already holding ``>= n/m`` samples, renormalize, cut at ``floor(cumsum(q) * n_c)``.
    The whole draw is repeated until every client has ``>= min_size`` samples.
    """
    n = len(labels)
    if min_size * clients > n:
        raise ValueError(f"dirichlet: min_size {min_size} x {clients} clients exceeds the {n} samples")
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    for _ in range(MAX_DIRICHLET_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
        sizes = np.zeros(clients, dtype=np.int64)
        for idx_c in by_class:
            idx_c = rng.permutation(idx_c)
            q = rng.dirichlet(np.full(clients, alpha))
            q = q * (sizes < n / clients)  # at least one client is below n/m: not all of n is dealt yet
            q = q / q.sum()
            cuts = (np.cumsum(q) * len(idx_c)).astype(np.int64)[:-1]
            for i, piece in enumerate(np.split(idx_c, cuts)):
                parts[i].append(piece)
                sizes[i] += len(piece)
        if sizes.min() >= min_size:
            return [np.concatenate(p) for p in parts]
    raise ValueError(
        f"dirichlet: no split with >= {min_size} samples per client after {MAX_DIRICHLET_TRIES} tries "
        f"(alpha={alpha}, clients={clients}, n={n}); raise alpha or lower min_size"
    )


def _dirichlet_equal(labels: np.ndarray, clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Equal-size Dirichlet split (FedLADA, Sun et al.).

    Every client gets ``floor(n/m)`` samples. Client ``i`` (in order 0..m-1) draws a class prior
    ``p_i ~ Dir(alpha)`` and then the class of each of its samples from ``p_i``, taking an unused
    sample of that class. Refill rule: a draw that lands on an exhausted class is redrawn from
    ``p_i`` renormalized over the classes that still have samples. (Implemented with multinomial
    counts: cap each class at what is left and redraw the excess the same way; this gives the
    same count distribution as drawing one by one.) Later clients therefore inherit the leftovers.
    """
    classes = np.unique(labels)
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    left = np.array([len(p) for p in pools], dtype=np.int64)
    size = len(labels) // clients
    parts = []
    for _ in range(clients):
        prior = rng.dirichlet(np.full(len(classes), alpha))
        take = np.zeros(len(classes), dtype=np.int64)
        need = size
        while need > 0:
            open_ = left - take > 0
            p = np.where(open_, prior, 0.0)
            if p.sum() <= 0:  # prior mass only on exhausted classes: fall back to uniform over open ones
                p = open_.astype(float)
            draw = rng.multinomial(need, p / p.sum())
            take += np.minimum(draw, left - take)
            need = size - int(take.sum())
        parts.append(np.array([pools[c].pop() for c in range(len(classes)) for _ in range(take[c])], dtype=np.int64))
        left -= take
    return parts


def _shards(labels: np.ndarray, clients: int, per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Pathological non-IID split of McMahan et al. (2017), Sec. 3.

    Sort by label (ties in random order), cut into ``clients * per_client`` equal shards and give
    every client ``per_client`` shards chosen at random.
    """
    n_shards = clients * per_client
    if n_shards > len(labels):
        raise ValueError(f"shards: {n_shards} shards need at least as many samples, got {len(labels)}")
    order = rng.permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]
    shards = np.array_split(order, n_shards)
    owner = rng.permutation(n_shards)
    return [np.concatenate([shards[s] for s in owner[i * per_client : (i + 1) * per_client]]) for i in range(clients)]


def _powerlaw(n: int, clients: int, power: float, min_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """IID samples, power-law client sizes (as in the unbalanced splits of Li et al. 2020, FedProx).

    Size weights ``w_i = 1 + Pareto(power)`` (density ~ w^-(power+1) for w >= 1); client ``i``
    gets ``min_size + share_i`` with the ``n - m*min_size`` remaining samples split in proportion
    to ``w`` (largest remainders get the leftover units).
    """
    if min_size * clients > n:
        raise ValueError(f"powerlaw: min_size {min_size} x {clients} clients exceeds the {n} samples")
    w = 1.0 + rng.pareto(power, clients)
    free = n - min_size * clients
    exact = free * w / w.sum()
    extra = np.floor(exact).astype(np.int64)
    short = free - int(extra.sum())
    extra[np.argsort(-(exact - extra), kind="stable")[:short]] += 1
    sizes = min_size + extra
    return np.split(rng.permutation(n), np.cumsum(sizes)[:-1])
