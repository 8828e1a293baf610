"""The one error a format reader raises for a bad file, and the checks every reader shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedsim.errors import ScenarioError
from fedsim.limits import MAX_TEST_BYTES

__all__ = ["DataFormatError", "check_client", "labels_array", "test_parts", "short", "who", "check_finite",
           "pooled_test"]

#: Longest id or value a message quotes whole; longer ones are cut (``'aaaa...' (2,000,000 characters)``).
SHORT = 60


def short(text: Any, limit: int = SHORT) -> str:
    """``text`` as a string of at most about ``limit`` characters: cut, saying how long it was."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def who(kind: str, name: Any) -> str:
    """``kind 'name'`` for messages, the name cut to :data:`SHORT` characters."""
    text = str(name)
    if len(text) <= SHORT:
        return f"{kind} {text!r}"
    return f"{kind} {text[:SHORT]!r}... ({len(text):,} characters)"


def _value(v: Any) -> str:
    """A value as it was written (a float as Python writes it, never an overflowed integer), cut."""
    return short(repr(v) if isinstance(v, float) else v, 40)


class DataFormatError(ScenarioError):
    """A dataset file exists but is not in the expected layout: ``str(err)`` is ``FILE: problem``
    (one line; the command line exits 2)."""

    def __init__(self, path: str | Path, problem: str):
        problem = " ".join(str(problem).split())  # one line, whatever the underlying library said
        super().__init__(f"{path}: {problem}")


def labels_array(y: Any, where: str | Path, who: str, num_classes: int | None) -> np.ndarray:
    """``y`` as int64 class labels in ``[0, num_classes)`` (any target when ``num_classes`` is None)."""
    try:
        arr = np.asarray(y)
    except (ValueError, TypeError, OverflowError) as err:
        raise DataFormatError(where, f"{who}: labels are not an array ({short(err)})") from None
    if num_classes is None:
        return arr
    if arr.ndim != 1:
        raise DataFormatError(where, f"{who}: labels must be one integer per example, got shape {arr.shape}")
    if arr.dtype == object:  # Python integers beyond int64, or mixed values
        for v in arr.tolist():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise DataFormatError(where, f"{who}: label {_value(v)} is not an integer")
            if not 0 <= v < num_classes:
                raise DataFormatError(where, f"{who}: label {_value(v)} out of range [0, {num_classes})")
        arr = np.asarray(arr.tolist(), dtype=np.float64)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating):
            raise DataFormatError(where, f"{who}: labels must be integers, got {arr.dtype}")
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise DataFormatError(where, f"{who}: label {_value(float(arr[bad][0]))} is not an integer")
    bad = (arr < 0) | (arr >= num_classes)  # before the cast: 1e30 is out of range, never -2**63
    if bad.any():
        v = arr[bad][0]
        raise DataFormatError(where, f"{who}: label {_value(v.item())} out of range [0, {num_classes})")
    return arr.astype(np.int64)


def check_client(x: Any, y: Any, where: str | Path, who: str, *, expected: int | None = None) -> None:
    """One client's examples: at least one, as many x as y, and ``expected`` of them when given."""
    if len(x) != len(y):
        raise DataFormatError(where, f"{who}: x has {len(x)} examples, y {len(y)}")
    if len(y) == 0:
        raise DataFormatError(where, f"{who}: no samples")
    if expected is not None and len(y) != expected:
        raise DataFormatError(where, f"{who}: {len(y)} examples, the file declares {expected}")


def check_finite(x: np.ndarray, where: str | Path, who: str, what: str) -> None:
    """Floating features hold no NaN or infinity (as the LEAF and HDF5 readers refuse them)."""
    if np.issubdtype(x.dtype, np.floating) and x.size and not np.isfinite(x).all():
        raise DataFormatError(where, f"{who}: {what} holds a non-finite value (NaN or infinity)")


def test_parts(train_ids, test_ids, test_arrays, where: str | Path | None = None):
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
    return pooled_test([test_arrays(i) for i in range(len(test_ids))], where), None


def pooled_test(parts, where: str | Path | None = None):
    """One shared test set ``(x, y)`` from ``(x, y)`` parts, at most ``MAX_TEST_BYTES`` (counted as
    the parts are read, so a test file too big is refused after ``MAX_TEST_BYTES`` of it)."""
    xs, ys, held = [], [], 0
    for x, y in parts:
        held += np.asarray(x).nbytes + np.asarray(y).nbytes
        if held > MAX_TEST_BYTES:
            raise DataFormatError(where or "test", f"the shared test set holds more than {MAX_TEST_BYTES:,} bytes")
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)
