"""The one error a format reader raises for a bad file, and the checks every reader shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedsim.errors import ScenarioError

__all__ = ["DataFormatError", "check_client", "labels_array", "test_parts"]


class DataFormatError(ScenarioError):
    """A dataset file exists but is not in the expected layout: ``str(err)`` is ``FILE: problem``
    (one line; the command line exits 2)."""

    def __init__(self, path: str | Path, problem: str):
        problem = " ".join(str(problem).split())  # one line, whatever the underlying library said
        super().__init__(f"{path}: {problem}")


def labels_array(y: Any, where: str | Path, who: str, num_classes: int | None) -> np.ndarray:
    """``y`` as int64 class labels in ``[0, num_classes)`` (any target when ``num_classes`` is None)."""
    arr = np.asarray(y)
    if num_classes is None:
        return arr
    if arr.ndim != 1:
        raise DataFormatError(where, f"{who}: labels must be one integer per example, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise DataFormatError(where, f"{who}: labels must be integers, got {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= num_classes)
    if bad.any():
        raise DataFormatError(where, f"{who}: label {int(arr[bad][0])} out of range [0, {num_classes})")
    return arr


def check_client(x: Any, y: Any, where: str | Path, who: str, *, expected: int | None = None) -> None:
    """One client's examples: at least one, as many x as y, and ``expected`` of them when given."""
    if len(x) != len(y):
        raise DataFormatError(where, f"{who}: x has {len(x)} examples, y {len(y)}")
    if len(y) == 0:
        raise DataFormatError(where, f"{who}: no samples")
    if expected is not None and len(y) != expected:
        raise DataFormatError(where, f"{who}: {len(y)} examples, the file declares {expected}")


def test_parts(train_ids, test_ids, test_arrays):
    """``(test, client_test)`` for :class:`~fedsim.data.FederatedData` from a test file's clients.

    When every training client has a test part (LEAF's per-user split), ``client_test(k)`` is
    training client k's part (``test_arrays(position in the test file)``) and ``test`` is None;
    otherwise the test file's clients together form one shared ``test`` set (LEAF's ``-t user``
    split: held-out users) and ``client_test`` is None.
    """
    at = {c: i for i, c in enumerate(test_ids)}
    if all(c in at for c in train_ids):
        order = [at[c] for c in train_ids]
        return None, lambda k: test_arrays(order[k])
    parts = [test_arrays(i) for i in range(len(test_ids))]
    return (np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])), None
