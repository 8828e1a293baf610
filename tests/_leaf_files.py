"""Write LEAF-layout folders (train/ and test/ of {"users", "num_samples", "user_data"}) for tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedsim.data.shakespeare import LETTERS


def write_leaf_file(path: Path, users: dict[str, tuple[list, list]], *, ensure_ascii: bool = True, **extra) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        **extra,
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    path.write_text(json.dumps(doc, ensure_ascii=ensure_ascii))


def femnist_user(rng: np.random.Generator, n: int) -> tuple[list, list]:
    x = np.round(rng.random((n, 784)), 3).tolist()
    y = rng.integers(0, 62, n).tolist()
    return x, y


def shakespeare_user(rng: np.random.Generator, n: int) -> tuple[list, list]:
    idx = rng.integers(0, len(LETTERS), (n, 81))
    x = ["".join(LETTERS[i] for i in row[:80]) for row in idx]
    y = [LETTERS[row[80]] for row in idx]
    return x, y


def write_leaf_folder(root: Path, make, sizes: dict[str, tuple[int, int]], *, per_file: int = 2, seed: int = 0) -> dict:
    """``sizes``: user -> (train n, test n). Returns user -> (train (x, y), test (x, y)) as written."""
    rng = np.random.default_rng(seed)
    data = {u: (make(rng, a), make(rng, b)) for u, (a, b) in sizes.items()}
    users = list(data)
    for part, split in ((0, "train"), (1, "test")):
        for f in range(0, len(users), per_file):
            chunk = {u: data[u][part] for u in users[f:f + per_file]}
            write_leaf_file(root / split / f"all_data_{f // per_file}_niid_0_keep_0_{split}_9.json", chunk)
    return data
