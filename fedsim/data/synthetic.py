"""FedProx Synthetic(alpha, beta) data (Li et al., "Federated Optimization in Heterogeneous
Networks", MLSys 2020, Sec. 5.1), following the authors' generator
(litian96/FedProx, data/synthetic_*/generate_synthetic.py and synthetic_iid/generate_iid.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.data._seeding import rng_for
from fedsim.data.dataset import Dataset


@dataclass(frozen=True, eq=False)
class SyntheticClient:
    """One client's full sample (before the 90/10 split) and its own linear model.

    Attributes:
        x: ``float64 (n_k, dim)`` features.
        y: ``int64 (n_k,)`` labels, ``argmax(x @ w + b)``.
        w: ``(dim, classes)`` weights W_k.
        b: ``(classes,)`` bias b_k.
        mean_x: ``(dim,)`` feature mean v_k.
    """

    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    b: np.ndarray
    mean_x: np.ndarray


def feature_variances(dim: int) -> np.ndarray:
    """Diagonal of the feature covariance, ``Sigma_jj = (j+1)^-1.2``."""
    return np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2)


def synthetic_clients(
    alpha: float, beta: float, clients: int = 30, dim: int = 60, classes: int = 10, seed: int = 0, iid: bool = False
) -> list[SyntheticClient]:
    """Draw every client's sample and model.

    Non-IID (Synthetic(alpha, beta)): ``n_k = int(lognormal(4, 2)) + 50``; ``u_k ~ N(0, alpha^2)``;
    ``B_k ~ N(0, beta^2)``; ``W_k, b_k ~ N(u_k, 1)`` entrywise; ``v_k ~ N(B_k, 1)`` entrywise;
    ``x ~ N(v_k, diag((j+1)^-1.2))``; ``y = argmax(x W_k + b_k)``.
    IID (the authors' Synthetic-IID): one shared ``W, b ~ N(0, 1)`` and ``v_k = 0``; alpha and
    beta are unused. Draw order follows the reference generator; the features are drawn as
    ``v_k + sqrt(Sigma) * N(0, I)`` (same law as its ``multivariate_normal`` call).

    Args:
        alpha: Spread of the clients' models (std of u_k).
        beta: Spread of the clients' feature means (std of B_k).
        clients: Number of clients.
        dim: Feature dimension.
        classes: Number of classes.
        seed: Scenario seed.
        iid: Generate Synthetic-IID instead.

    Returns:
        One ``SyntheticClient`` per client.
    """
    if alpha < 0 or beta < 0:
        raise ValueError(f"synthetic: alpha and beta must be >= 0, got {alpha}, {beta}")
    if clients < 1 or dim < 1 or classes < 2:
        raise ValueError("synthetic: need clients >= 1, dim >= 1, classes >= 2")
    rng = rng_for(seed, "synthetic")
    n_k = rng.lognormal(4.0, 2.0, clients).astype(np.int64) + 50
    sd = np.sqrt(feature_variances(dim))
    if iid:
        mean_x = np.zeros((clients, dim))
        w_shared = rng.normal(0.0, 1.0, (dim, classes))
        b_shared = rng.normal(0.0, 1.0, classes)
    else:
        u = rng.normal(0.0, alpha, clients)
        big_b = rng.normal(0.0, beta, clients)
        mean_x = np.stack([rng.normal(big_b[k], 1.0, dim) for k in range(clients)])
    out = []
    for k in range(clients):
        if iid:
            w, b = w_shared, b_shared
        else:
            w = rng.normal(u[k], 1.0, (dim, classes))
            b = rng.normal(u[k], 1.0, classes)
        x = mean_x[k] + sd * rng.standard_normal((int(n_k[k]), dim))
        y = np.argmax(x @ w + b, axis=1).astype(np.int64)
        out.append(SyntheticClient(x=x, y=y, w=w, b=b, mean_x=mean_x[k]))
    return out


def synthetic(
    alpha: float,
    beta: float,
    clients: int = 30,
    dim: int = 60,
    classes: int = 10,
    seed: int = 0,
    iid: bool = False,
) -> Dataset:
    """FedProx Synthetic(alpha, beta) as a Dataset (Li et al. 2020).

    Each client's sample is shuffled and split 90/10 (``int(0.9 n_k)`` train); the training set is
    the concatenation of the clients' train parts (client k owns a contiguous block) and the test
    set the concatenation of their test parts.

    Returns:
        Dataset named ``synthetic`` (or ``synthetic-iid``), features ``(N, dim)``, no normalization.
    """
    parts = synthetic_clients(alpha, beta, clients, dim, classes, seed, iid)
    rng = rng_for(seed, "synthetic-split")
    xtr, ytr, xte, yte, idx = [], [], [], [], []
    start = 0
    for c in parts:
        order = rng.permutation(len(c.y))
        n_tr = int(0.9 * len(c.y))
        tr, te = order[:n_tr], order[n_tr:]
        xtr.append(c.x[tr])
        ytr.append(c.y[tr])
        xte.append(c.x[te])
        yte.append(c.y[te])
        idx.append(np.arange(start, start + n_tr, dtype=np.int64))
        start += n_tr
    return Dataset(
        name="synthetic-iid" if iid else "synthetic",
        x_train=np.concatenate(xtr).astype(np.float32),
        y_train=np.concatenate(ytr),
        x_test=np.concatenate(xte).astype(np.float32),
        y_test=np.concatenate(yte),
        num_classes=classes,
        client_indices=tuple(idx),
    )
