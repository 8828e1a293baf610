"""FedScale's ``client_data_mapping`` CSV next to the sample files (github.com/SymbioticLab/FedScale).

FedScale's datasets (``benchmark/dataset/download.sh``; e.g. FEMNIST: 2,800 clients in
``client_data_mapping/train.csv``) unpack to::

    ROOT/client_data_mapping/train.csv   client_id,sample_path,label_name,label_id
    ROOT/client_data_mapping/test.csv
    ROOT/<sample_path>                   the image files (FedScale opens ROOT/sample_path)

Opening reads the CSV once and keeps, per row, only its byte offset, client and label (no paths
in memory); ``client_data(k)`` re-reads client k's rows and decodes its images (grey -> 1 channel,
else RGB; ``float32 (n, C, H, W)`` in [0, 1]). A ``sample_path`` that is absolute or leads outside
ROOT (``..``, or a symbolic link pointing out) is refused.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, test_parts
from fedsim.data.formats.images import decode_image, stack_images

__all__ = ["MAPPING", "load_fedscale"]

MAPPING = "client_data_mapping"
COLUMNS = ("client_id", "sample_path", "label_id")


class _Mapping:
    """One mapping CSV: per row its byte offset, client number and label."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        offsets, clients, labels = [], [], []
        ids: dict[str, int] = {}
        try:
            fh = open(path, "rb")
        except OSError as err:
            raise DataFormatError(path, f"cannot read ({err.strerror or err})") from None
        with fh:
            header = self._fields(fh.readline(), 1)
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise DataFormatError(path, f"line 1: no column {missing[0]!r} (FedScale's header: client_id,sample_path,label_name,label_id)")
            self.col = {c: header.index(c) for c in COLUMNS}
            width = len(header)
            offset = fh.tell()
            for line_no, line in enumerate(fh, start=2):
                if line.strip():
                    row = self._fields(line, line_no)
                    if len(row) != width:
                        raise DataFormatError(path, f"line {line_no}: {len(row)} fields, the header has {width}")
                    self._check_path(row[self.col["sample_path"]], f"line {line_no}")
                    try:
                        label = int(row[self.col["label_id"]])
                    except ValueError:
                        raise DataFormatError(path, f"line {line_no}: label_id {row[self.col['label_id']]!r} is not an integer") from None
                    offsets.append(offset)
                    clients.append(ids.setdefault(row[self.col["client_id"]], len(ids)))
                    labels.append(label)
                offset += len(line)
        if not offsets:
            raise DataFormatError(path, "no rows")
        names = np.array(list(ids), dtype=object)
        rank = np.argsort(names, kind="stable")  # clients in sorted id order
        remap = np.empty(len(names), dtype=np.int64)
        remap[rank] = np.arange(len(names))
        client = remap[np.array(clients, dtype=np.int64)]
        self.names = tuple(str(n) for n in names[rank])
        self.labels = np.array(labels, dtype=np.int64)
        self.offsets = np.array(offsets, dtype=np.int64)
        self.order = np.argsort(client, kind="stable")
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(client, minlength=len(names)))])

    def _fields(self, line: bytes, line_no: int) -> list[str]:
        try:
            return next(csv.reader([line.decode("utf-8").rstrip("\r\n")]))
        except (UnicodeDecodeError, csv.Error, StopIteration) as err:
            raise DataFormatError(self.path, f"line {line_no}: not a CSV row ({err})") from None

    def _check_path(self, sample: str, where: str) -> None:
        if not sample or os.path.isabs(sample) or os.path.normpath(sample).split(os.sep)[0] == "..":
            raise DataFormatError(self.path, f"{where}: sample_path {sample!r} leads outside {self.root}")

    def check_labels(self, num_classes: int) -> None:
        bad = (self.labels < 0) | (self.labels >= num_classes)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataFormatError(self.path, f"row {i + 1}: label_id {int(self.labels[i])} out of range [0, {num_classes})")

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds).astype(np.int64)

    def arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.order[self.bounds[k]:self.bounds[k + 1]]
        who = f"client {self.names[k]!r}"
        images = []
        with open(self.path, "rb") as fh:
            for r in rows:
                fh.seek(int(self.offsets[r]))
                sample = self._fields(fh.readline(), -1)[self.col["sample_path"]]
                file = (self.root / sample).resolve()
                if not file.is_relative_to(self.root):
                    raise DataFormatError(self.path, f"{who}: sample_path {sample!r} leads outside {self.root}")
                try:
                    data = file.read_bytes()
                except OSError as err:
                    raise DataFormatError(self.path, f"{who}: cannot read {sample!r} ({err.strerror or err})") from None
                images.append(decode_image(data, file, who))
        return stack_images(images, self.path, who), self.labels[rows]


def load_fedscale(root: str | Path, *, num_classes: int | None = None, name: str = "fedscale", source: str = "",
                  **kw: Any) -> FederatedData:
    """A FedScale image dataset: ``ROOT/client_data_mapping/{train,test}.csv`` and the files they name.

    Clients are the distinct ``client_id`` of train.csv (sorted). When test.csv has rows for every
    training client, each client is tested on its own rows; otherwise test.csv forms one shared
    test set (FedScale evaluates on it centrally).

    Args:
        root: The dataset folder (FedScale's ``data_dir``).
        num_classes: Classes (labels checked); default: the largest ``label_id`` + 1.
        name: Dataset name.
        source: Where to get the files (for the missing-files message).
        **kw: Passed to FederatedData.
    """
    base = Path(root).expanduser().resolve()
    train_csv, test_csv = base / MAPPING / "train.csv", base / MAPPING / "test.csv"
    for p in (train_csv, test_csv):
        if not p.is_file():
            hint = f"; {source}" if source else "; FedScale's benchmark/dataset/download.sh unpacks its datasets in this layout"
            raise DataNotFound(f"{name}: no {p.relative_to(base)} in {base}{hint}")
    tr, te = _Mapping(train_csv, base), _Mapping(test_csv, base)
    if num_classes is None:
        num_classes = int(max(tr.labels.max(), te.labels.max())) + 1
    for m in (tr, te):
        m.check_labels(num_classes)
    test_part, client_test = test_parts(tr.names, te.names, te.arrays)
    return FederatedData(sizes=tr.sizes(), client_data=tr.arrays, test=test_part, client_test=client_test,
                         num_classes=max(num_classes, 2), name=name, client_ids=tr.names, **kw)
