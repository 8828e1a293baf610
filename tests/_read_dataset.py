"""Read a dataset folder with one of fedsim's readers, every client and test part, as a run would.

``python tests/_read_dataset.py KIND FOLDER`` exits 0, or 2 with the reader's one line on stderr
(what ``fedsim run`` prints for a ScenarioError); anything else is a traceback and exit 1.
tests/test_fuzz_datasets.py runs it in a subprocess under a memory limit and a timeout.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _load(kind: str, root: Path):
    if kind == "femnist":
        from fedsim.data.femnist import load_femnist

        return load_femnist(root)
    if kind == "shakespeare":
        from fedsim.data.shakespeare import load_shakespeare

        return load_shakespeare(root)
    if kind == "fedscale":
        from types import SimpleNamespace

        from fedsim.data.femnist import femnist_fedscale

        return femnist_fedscale(SimpleNamespace(root=str(root), options={}), 0)
    if kind == "hdf5":
        from fedsim.data.formats.pfl_hdf5 import load_pfl_hdf5

        return load_pfl_hdf5(root / "train.h5", test=root / "test.h5", num_classes=62)
    if kind == "sqlite":
        from fedsim.data.formats.fedjax_sqlite import load_fedjax_sqlite

        return load_fedjax_sqlite(root / "train.sqlite", test=root / "test.sqlite", num_classes=62)
    if kind in ("parquet", "arrow"):
        from fedsim.data.formats.table import load_table

        path = root / f"t.{kind}"
        return load_table(path, client_column="c", x_column="x", y_column="y", test=path, num_classes=62)
    raise SystemExit(f"unknown kind {kind}")


def main(kind: str, root: str) -> int:
    from fedsim.errors import ScenarioError

    try:
        fd = _load(kind, Path(root))
        for k in range(fd.num_clients):
            fd.client_data(k)
            if fd.client_test is not None:
                fd.client_test(k)
    except ScenarioError as err:
        print(str(err), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
