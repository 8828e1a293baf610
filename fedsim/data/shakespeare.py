"""Shakespeare (LEAF): next-character prediction, one speaking role per client.

Each example is 80 characters of a role's lines (``x``) and the character that follows (``y``),
over LEAF's 80-symbol vocabulary (``models/utils/language_utils.py``: ``ALL_LETTERS``); LEAF's
full dataset has 1,129 roles (Caldas et al. 2018, Table 1; text from The Complete Works of William
Shakespeare, McMahan et al. 2017). Files: LEAF's ``data/shakespeare/preprocess.sh`` writes
``data/train`` and ``data/test`` (github.com/TalwalkarLab/leaf).

``x`` becomes ``int64 (n, 80)`` character indices and ``y`` ``int64 (n,)``. A character outside
the vocabulary is refused (LEAF's ``find`` would give -1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.leaf import LEAF_EPOCHS, VALIDATE_BYTES, load_leaf
from fedsim.data.options import dataset_options

__all__ = ["LETTERS", "SEQ_LEN", "SHAKESPEARE_SOURCE", "load_shakespeare", "shakespeare"]

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ_LEN = 80
SHAKESPEARE_SOURCE = (
    "get Shakespeare from LEAF (github.com/TalwalkarLab/leaf: data/shakespeare/preprocess.sh, e.g. "
    "-s niid --sf 1.0 -k 0 -t sample --tf 0.8) and set data.root to the folder holding its train/ and test/"
)
_TABLE = np.full(256, -1, dtype=np.int64)
for _i, _c in enumerate(LETTERS):
    _TABLE[ord(_c)] = _i


def encode(text: str, where: Path, who: str) -> np.ndarray:
    """Characters -> vocabulary indices (``int64``); a character outside ``LETTERS`` is an error."""
    try:
        codes = np.frombuffer(text.encode("latin-1"), dtype=np.uint8)
    except UnicodeEncodeError:
        bad = next(c for c in text if ord(c) > 255)
        raise DataFormatError(where, f"{who}: character {bad!r} is not in LEAF's 80-character vocabulary") from None
    idx = _TABLE[codes]
    if (idx < 0).any():
        bad = text[int(np.argmax(idx < 0))]
        raise DataFormatError(where, f"{who}: character {bad!r} is not in LEAF's 80-character vocabulary")
    return idx


def decode_shakespeare(x: list, y: list, where: Path, who: str) -> tuple[np.ndarray, np.ndarray]:
    """One role's LEAF lists -> ``int64 (n, 80)`` inputs and ``int64 (n,)`` next characters."""
    if not all(isinstance(s, str) and len(s) == SEQ_LEN for s in x):
        raise DataFormatError(where, f"{who}: x must be strings of {SEQ_LEN} characters")
    if not all(isinstance(c, str) and len(c) == 1 for c in y):
        raise DataFormatError(where, f"{who}: y must be single characters")
    inputs = encode("".join(x), where, who).reshape(len(x), SEQ_LEN)
    targets = encode("".join(y), where, who)
    return inputs, targets


def load_shakespeare(root: str | Path, *, validate_bytes: int = VALIDATE_BYTES,
                     epoch_rule: str = LEAF_EPOCHS) -> FederatedData:
    """Shakespeare from LEAF's ``train/`` and ``test/`` JSON folders under ``root``, one client per
    role; ``epoch_rule`` (default LEAF's ``ceil``): :attr:`FederatedData.epoch_rule`."""
    return load_leaf(root, decode_shakespeare, name="shakespeare", num_classes=len(LETTERS),
                     source=SHAKESPEARE_SOURCE, validate_bytes=validate_bytes, epoch_rule=epoch_rule)


def shakespeare(config: Any, seed: int) -> FederatedData:
    """Dataset factory (``data: {name: shakespeare, root: DIR, options: {epoch_rule: ceil | floor}}``);
    the partition is the roles', so ``seed`` is unused."""
    del seed
    opts = dataset_options(config, "shakespeare", {"epoch_rule": (LEAF_EPOCHS, "floor")})
    return load_shakespeare(getattr(config, "root", "data"), epoch_rule=opts["epoch_rule"])
