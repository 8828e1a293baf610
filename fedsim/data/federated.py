"""FederatedData: a federated dataset handed to fedsim from Python or by a file-format loader.

Clients are numbered 0..n-1. Each client's training data is produced on demand
(``client_data(k) -> (x, y)``), so a population of 10^5 clients costs only the clients a run
touches. The test data are either one shared set (``test``) or per-client test parts
(``client_test(k)``, LEAF's per-user split), of which a run holds only its evaluation sample.
Sizes n_i (and so the weights p_i = n_i / n) are known up front without building any client.

``x`` may be of any dtype and shape (float features, images, int64 token ids); ``y`` is int64
class labels of shape (n,) when ``num_classes`` is set, else any target the loss accepts
(regression values, multi-label vectors, token sequences of shape (n, length)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import numpy as np

__all__ = ["FederatedData", "ClientArrays"]

ClientArrays = tuple[Any, Any]  # (x, y): numpy arrays or torch tensors with a common first dimension


@dataclass(frozen=True, eq=False)
class FederatedData:
    """Clients' training data on demand plus test data.

    Attributes:
        sizes: ``int64 (clients,)``: n_i, client i's number of training examples (each >= 1).
        client_data: ``k -> (x, y)``: client k's training examples (``len == sizes[k]``).
        test: The shared test set ``(x, y)``; or a callable ``() -> (x, y)`` that builds it when the
            run needs it, once, the run then owning the arrays (a reader's images decoded only
            for a run, normalized in place); or None.
        client_test: ``k -> (x, y)``: client k's test part, or None (used when ``test`` is None).
        num_classes: Number of classes when targets are class labels; None otherwise (the run then
            reports losses only, no accuracy).
        name: Dataset name recorded in info.yaml.
        client_ids: Optional natural ids (writer, role) of clients 0..n-1, for reports.
        mean: Per-channel normalization mean for (C, H, W) images (applied by the engine), or None.
        std: Per-channel normalization std, or None.
        augment: Random crop (pad 4) + horizontal flip on image batches.
        check_clients: ``"touched"`` (default): a client's ``client_data`` is checked (lengths,
            ``sizes``, shapes, labels) when the run first fetches it, so a bad client outside the
            evaluation sample stops the run there (one line, exit 2, rows kept). ``"all"``: before
            the run folder is touched, every client's ``client_data(k)`` is fetched and checked
            once, one client at a time and discarded: one extra call per client.
        epoch_rule: How many local steps one epoch of ``round.local_epochs`` is for client i with
            batch size B: ``"floor"`` (default): tau_i = floor(E n_i / B), E passes over a running
            stream of B-example batches; ``"ceil"``: tau_i = E ceil(n_i / B), an epoch ending with
            a smaller batch as LEAF's ``batch_data`` (so a client with n_i < B still takes a step;
            fedsim's batches keep B examples, continuing the stream). LEAF's readers set ``"ceil"``.
        notes: What the reader found worth saying (e.g. counts that differ from what a file
            declares), one line each; recorded in info.yaml as ``data_notes``.
        pixels: ``uint8`` inputs are 8-bit pixels k: the run sees k / 255 (float32's value, in
            the run's dtype: what ``np.asarray(img, np.float32) / 255`` gives), normalized by
            ``mean``/``std``. A reader's test images then take one byte a value, never floats.
            Float inputs are taken as they are either way.
    """

    sizes: np.ndarray
    client_data: Callable[[int], ClientArrays]
    test: ClientArrays | Callable[[], ClientArrays] | None = None
    client_test: Callable[[int], ClientArrays] | None = None
    num_classes: int | None = None
    name: str = "custom"
    client_ids: tuple[str, ...] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    augment: bool = False
    check_clients: Literal["touched", "all"] = "touched"
    epoch_rule: Literal["floor", "ceil"] = "floor"
    notes: tuple[str, ...] = ()
    pixels: bool = False

    def __post_init__(self) -> None:
        sizes = np.asarray(self.sizes)
        if sizes.ndim != 1 or len(sizes) == 0 or not np.issubdtype(sizes.dtype, np.integer):
            raise ValueError(f"{self.name}: sizes must be a non-empty 1-d integer array")
        if (sizes < 1).any():
            k = int(np.argmin(sizes))
            raise ValueError(f"{self.name}: client {k} has no training examples")
        object.__setattr__(self, "sizes", sizes.astype(np.int64))
        if not callable(self.client_data):
            raise TypeError(f"{self.name}: client_data must be callable (k -> (x, y))")
        if self.test is None and self.client_test is None:
            raise ValueError(f"{self.name}: give a test set or per-client test parts")
        if self.num_classes is not None and int(self.num_classes) < 2:
            raise ValueError(f"{self.name}: num_classes must be >= 2 (None: targets are not classes)")
        if self.client_ids is not None and len(self.client_ids) != len(sizes):
            raise ValueError(f"{self.name}: {len(self.client_ids)} client ids for {len(sizes)} clients")
        if (self.mean is None) != (self.std is None):
            raise ValueError(f"{self.name}: give both mean and std or neither")
        if self.check_clients not in ("touched", "all"):
            raise ValueError(f"{self.name}: check_clients must be 'touched' or 'all', got {self.check_clients!r}")
        if self.epoch_rule not in ("floor", "ceil"):
            raise ValueError(f"{self.name}: epoch_rule must be 'floor' or 'ceil', got {self.epoch_rule!r}")
        if not isinstance(self.pixels, bool):
            raise TypeError(f"{self.name}: pixels must be True or False")
        if isinstance(self.notes, str) or not all(isinstance(n, str) for n in self.notes):
            raise TypeError(f"{self.name}: notes must be a tuple of strings")
        object.__setattr__(self, "notes", tuple(" ".join(n.split()) for n in self.notes))

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    @property
    def weights(self) -> np.ndarray:
        """p_i = n_i / n."""
        return self.sizes / self.sizes.sum()

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_clients(cls, clients: Sequence[ClientArrays], *, test: ClientArrays | None = None,
                     client_test: Sequence[ClientArrays] | None = None, **kw: Any) -> "FederatedData":
        """One ``(x, y)`` per client (and optionally one test part per client)."""
        clients = list(clients)
        for k, (x, y) in enumerate(clients):
            if len(x) != len(y):
                raise ValueError(f"{kw.get('name', 'custom')}: client {k}: x has {len(x)} rows, y {len(y)}")
        parts = None if client_test is None else list(client_test)
        if parts is not None and len(parts) != len(clients):
            raise ValueError(f"{kw.get('name', 'custom')}: {len(parts)} test parts for {len(clients)} clients")
        return cls(
            sizes=np.array([len(y) for _, y in clients], dtype=np.int64),
            client_data=clients.__getitem__,
            test=test,
            client_test=None if parts is None else parts.__getitem__,
            **kw,
        )

    @classmethod
    def from_column(cls, x: Any, y: Any, client_ids: Any, *, test: ClientArrays | None = None, **kw: Any) -> "FederatedData":
        """One table and a client-id column (a natural partition, e.g. one writer per client).

        Clients are the distinct ids in sorted order; client k holds the rows with the k-th id, in
        their original order.
        """
        ids = np.asarray(client_ids)
        if not (len(x) == len(y) == len(ids)):
            raise ValueError(f"{kw.get('name', 'custom')}: x, y and client_ids lengths differ ({len(x)}, {len(y)}, {len(ids)})")
        names, inverse = np.unique(ids, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(names)))])

        def client(k: int) -> ClientArrays:
            rows = order[bounds[k]:bounds[k + 1]]
            return x[rows], y[rows]

        kw.setdefault("client_ids", tuple(str(n) for n in names))
        return cls(sizes=np.diff(bounds).astype(np.int64), client_data=client, test=test, **kw)
