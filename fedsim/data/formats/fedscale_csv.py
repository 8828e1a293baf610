"""FedScale's ``client_data_mapping`` CSV next to the sample files (github.com/SymbioticLab/FedScale).

FedScale's datasets (``benchmark/dataset/download.sh``; e.g. FEMNIST: 2,800 clients in
``client_data_mapping/train.csv``) unpack to::

    ROOT/client_data_mapping/train.csv   client_id,sample_path,label_name,label_id
    ROOT/client_data_mapping/test.csv
    ROOT/<sample_path>                   the image files (FedScale opens ROOT/sample_path)

What is read is what FedScale's readers read (``fedscale/dataloaders/femnist.py`` and
``divide_data.py``, ``DataPartitioner.trace_partition``):

- clients are numbered by their **first appearance** in train.csv (FedScale's client k, 1-based,
  is fedsim's client k - 1), each holding its rows in file order;
- ``test.csv`` is **one shared test set** (FedScale's executors split it evenly among
  themselves; its ``client_id`` column is not used);
- images are decoded as the dataset's transform says (:class:`~.images.ImageTransform`; the
  default keeps the stored size, grey -> 1 channel, else RGB; FEMNIST's is FedScale's:
  :data:`~.images.FEDSCALE_MNIST`), ``float32 (n, C, H, W)``.

Opening reads the CSVs once and keeps, per row, only its byte offset, client and label (no paths in
memory); ``client_data(k)`` re-reads client k's rows and decodes its images (float32), and the
shared test set is ``FederatedData.test`` as a callable, decoded when a run builds its data into
one preallocated ``uint8`` array of 8-bit pixels (``FederatedData.pixels``: the run sees k / 255,
the float32 values ``client_data`` gives), which the run owns. A ``sample_path``
that is absolute or leads outside ROOT (``..``, or a symbolic link pointing out) is refused, and
so is one that is not a regular file (a FIFO, a device), before it is read. Bounds
(:mod:`fedsim.limits`): the CSV at most ``MAX_MAPPING_BYTES``, ``MAX_DATA_ROWS`` rows and
``MAX_LINE_BYTES`` per line; a sample file at most ``MAX_SAMPLE_BYTES``; an image at most
``MAX_IMAGE_PIXELS``; a client's (or the test set's) images at most ``MAX_DECODED_BYTES`` decoded.
"""

from __future__ import annotations

import csv
import os
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, short, who
from fedsim.data.formats.files import open_regular
from fedsim.data.formats.images import ImageBudget, ImageTransform, decode_image, stack_images
from fedsim.limits import (MAX_CLIENTS, MAX_DATA_ROWS, MAX_DECODED_BYTES, MAX_INT, MAX_LINE_BYTES,
                           MAX_MAPPING_BYTES, MAX_SAMPLE_BYTES, MAX_TEST_BYTES)

__all__ = ["MAPPING", "load_fedscale"]

MAPPING = "client_data_mapping"
COLUMNS = ("client_id", "sample_path", "label_id")


class _Mapping:
    """One mapping CSV: per row its byte offset, client number (by first appearance) and label."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        offsets, clients, labels = array("q"), array("q"), array("q")
        ids: dict[str, int] = {}
        with open_regular(path, MAX_MAPPING_BYTES) as fh:
            header = self._fields(self._line(fh, 1), 1)
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise DataFormatError(path, f"line 1: no column {missing[0]!r} (FedScale's header: client_id,sample_path,label_name,label_id)")
            self.col = {c: header.index(c) for c in COLUMNS}
            width = len(header)
            offset = fh.tell()
            line_no = 1
            while True:
                line_no += 1
                line = self._line(fh, line_no)
                if not line:
                    break
                if line.strip():
                    if len(offsets) >= MAX_DATA_ROWS:
                        raise DataFormatError(path, f"more than {MAX_DATA_ROWS:,} rows")
                    row = self._fields(line, line_no)
                    if len(row) != width:
                        raise DataFormatError(path, f"line {line_no}: {len(row)} fields, the header has {width}")
                    self._check_path(row[self.col["sample_path"]], f"line {line_no}")
                    text = row[self.col["label_id"]]
                    try:
                        label = int(text)
                    except ValueError:
                        raise DataFormatError(path, f"line {line_no}: label_id {short(text, 40)!r} is not an integer") from None
                    if not -MAX_INT <= label <= MAX_INT:  # in range [0, classes) is checked once classes are known
                        raise DataFormatError(path, f"line {line_no}: label_id {short(text.strip(), 40)} is out of range")
                    cid = row[self.col["client_id"]]
                    if cid not in ids and len(ids) >= MAX_CLIENTS:
                        raise DataFormatError(path, f"more than {MAX_CLIENTS:,} clients")
                    offsets.append(offset)
                    clients.append(ids.setdefault(cid, len(ids)))
                    labels.append(label)
                offset += len(line)
        if not offsets:
            raise DataFormatError(path, "no rows")
        client = np.frombuffer(clients, dtype=np.int64)
        self.names = tuple(ids)  # FedScale's trace_partition: client ids numbered by first appearance
        self.labels = np.frombuffer(labels, dtype=np.int64).copy()
        self.offsets = np.frombuffer(offsets, dtype=np.int64).copy()
        self.order = np.argsort(client, kind="stable")
        self.bounds = np.concatenate([[0], np.cumsum(np.bincount(client, minlength=len(ids)))])

    def _line(self, fh, line_no: int) -> bytes:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES:
            raise DataFormatError(self.path, f"line {line_no}: longer than {MAX_LINE_BYTES:,} bytes")
        return line

    def _fields(self, line: bytes, line_no: int) -> list[str]:
        try:
            return next(csv.reader([line.decode("utf-8").rstrip("\r\n")]))
        except (UnicodeDecodeError, csv.Error, StopIteration) as err:
            raise DataFormatError(self.path, f"line {line_no}: not a CSV row ({short(err)})") from None

    def _check_path(self, sample: str, where: str) -> None:
        if not sample or os.path.isabs(sample) or os.path.normpath(sample).split(os.sep)[0] == "..":
            raise DataFormatError(self.path, f"{where}: sample_path {short(sample)!r} leads outside {self.root}")

    def check_labels(self, num_classes: int) -> None:
        bad = (self.labels < 0) | (self.labels >= num_classes)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataFormatError(self.path, f"row {i + 1}: label_id {int(self.labels[i])} out of range [0, {num_classes})")

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds).astype(np.int64)

    def rows_arrays(self, rows: np.ndarray, name: str, transform: ImageTransform,
                    limit: int = MAX_DECODED_BYTES, as_bytes: bool = False) -> tuple[np.ndarray, np.ndarray]:
        budget = ImageBudget(self.path, limit)
        folders: dict[str, Path] = {}  # a sample's folder as written -> resolved (once per folder)

        def decoded():
            with open_regular(self.path, MAX_MAPPING_BYTES) as fh:
                for r in rows:
                    fh.seek(int(self.offsets[r]))
                    sample = self._fields(self._line(fh, -1), -1)[self.col["sample_path"]]
                    file = self._resolved(sample, folders)
                    if not file.is_relative_to(self.root):
                        raise DataFormatError(self.path, f"{name}: sample_path {short(sample)!r} leads outside {self.root}")
                    with open_regular(file, MAX_SAMPLE_BYTES) as img:
                        try:
                            data = img.read(MAX_SAMPLE_BYTES + 1)
                        except OSError as err:
                            raise DataFormatError(file, f"{name}: cannot read ({err.strerror or err})") from None
                    yield decode_image(data, file, name, transform, budget, as_bytes=as_bytes)

        return stack_images(decoded(), len(rows), self.path, name, np.uint8 if as_bytes else np.float32), self.labels[rows]

    def _resolved(self, sample: str, folders: dict[str, Path]) -> Path:
        """``(root / sample).resolve()``, its folder resolved once for all the samples in it: a
        plain file name in a resolved folder is where it says unless it is itself a link."""
        folder, _, name = sample.rpartition("/")
        if name in ("", ".", ".."):
            return (self.root / sample).resolve()
        real = folders.get(folder)
        if real is None:
            real = folders[folder] = (self.root / folder).resolve()
        file = real / name
        return file.resolve() if file.is_symlink() else file

    def arrays(self, k: int, transform: ImageTransform) -> tuple[np.ndarray, np.ndarray]:
        return self.rows_arrays(self.order[self.bounds[k]:self.bounds[k + 1]], who("client", self.names[k]), transform)


def load_fedscale(root: str | Path, *, num_classes: int | None = None, name: str = "fedscale", source: str = "",
                  transform: ImageTransform | None = None, **kw: Any) -> FederatedData:
    """A FedScale image dataset: ``ROOT/client_data_mapping/{train,test}.csv`` and the files they name.

    Clients are the distinct ``client_id`` of train.csv in order of first appearance (FedScale's
    numbering); test.csv is one shared test set (FedScale's).

    Args:
        root: The dataset folder (FedScale's ``data_dir``).
        num_classes: Classes (labels checked); default: the largest ``label_id`` + 1.
        name: Dataset name.
        source: Where to get the files (for the missing-files message).
        transform: How images become arrays (mode, size; ``mean``/``std`` become the data's
            normalization); default: the stored size, grey -> 1 channel, else RGB, no normalization.
        **kw: Passed to FederatedData.
    """
    transform = transform or ImageTransform()
    base = Path(root).expanduser().resolve()
    train_csv, test_csv = base / MAPPING / "train.csv", base / MAPPING / "test.csv"
    for p in (train_csv, test_csv):
        if not p.exists():
            hint = f"; {source}" if source else "; FedScale's benchmark/dataset/download.sh unpacks its datasets in this layout"
            raise DataNotFound(f"{name}: no {p.relative_to(base)} in {base}{hint}")
    tr, te = _Mapping(train_csv, base), _Mapping(test_csv, base)
    if num_classes is None:
        num_classes = int(max(tr.labels.max(), te.labels.max())) + 1
        if num_classes > MAX_DATA_ROWS:
            raise DataFormatError(train_csv, f"label_id {num_classes - 1} implies more classes than {MAX_DATA_ROWS:,}; "
                                             "give num_classes")
    for m in (tr, te):
        m.check_labels(num_classes)
    if transform.mean is not None:
        kw = {"mean": transform.mean, "std": transform.std, **kw}
    return FederatedData(sizes=tr.sizes(), client_data=lambda k: tr.arrays(k, transform),
                         test=lambda: te.rows_arrays(np.arange(len(te.labels)), "test set", transform, MAX_TEST_BYTES,
                                                     as_bytes=True),
                         num_classes=max(num_classes, 2), name=name, client_ids=tr.names, pixels=True, **kw)
