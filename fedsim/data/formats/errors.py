"""The one error a format reader raises for a bad file, and the checks every reader shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedsim.errors import ScenarioError

__all__ = ["DataFormatError", "check_client", "labels_array"]


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
