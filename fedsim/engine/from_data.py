"""A user's :class:`~fedsim.data.FederatedData` as the engine's :class:`Workload`.

Only the clients a run needs are ever built: at the start the evaluation sample (``eval.clients``;
every client when the population is at most that large), then each round's cohort through
``Workload.for_clients`` (``fetch``). A population of 10^5 clients therefore costs the evaluation
sample plus the participants, never the whole population. With ``eval.train_loss: false`` and a
sample smaller than the population only the sample's test parts are read at the start (and one
client's training data, for the examples' shape); its class counts (partition.csv) are then not
known and not written. Sizes n_i and weights p_i = n_i / n
come from ``FederatedData.sizes`` without building any client.

With ``FederatedData.check_clients == "all"`` every client is fetched and checked once more while
the workload is built (:func:`check_every_client`), before the run folder is touched.

Test data: the shared ``test`` set when given (checked against the training data: shapes, labels),
else the evaluation sample's per-client test parts (``client_test``, checked as clients are),
concatenated in client order.

Dtypes: floating inputs are cast to the engine dtype, other inputs (int64 token ids) keep theirs;
class targets (``num_classes`` set) are int64, floating targets the engine dtype, others as given.
Images ``(C, H, W)`` with ``mean``/``std`` are normalized on the device as fedsim's own image data.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..errors import ScenarioError
from .palette import PaletteRows, codes, encode, pixel_table
from .workload_value import Workload, eval_sample

__all__ = ["federated_workload", "fetcher", "check_every_client"]


def _tensor(a: Any, device: torch.device, dtype: torch.dtype, *, classes: bool = False) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(a) if not isinstance(a, torch.Tensor) else a)
    if classes:
        return t.to(device=device, dtype=torch.long)
    return t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)


def fetcher(data, device: torch.device, dtype: torch.dtype, *, test: bool = False, palette: bool = False):
    """``clients -> (x, y)``: the listed clients' training rows (``test``: test parts), client after
    client, as tensors on ``device``, normalized; each client's lengths checked against its size.
    ``palette``: inputs whose values are all k / 255 (or integer ids 0..255) come back as
    :class:`~.palette.PaletteRows` (one byte a value; the same values when indexed), for rows a run
    holds throughout."""
    get = data.client_test if test else data.client_data
    what = "client_test" if test else "client_data"
    mean = std = None
    if data.mean is not None:
        mean = torch.as_tensor(data.mean, dtype=dtype, device=device).view(1, -1, 1, 1)
        std = torch.as_tensor(data.std, dtype=dtype, device=device).view(1, -1, 1, 1)
    shape: list = []

    def fetch(clients: Sequence[int]) -> tuple[Any, torch.Tensor]:
        clients = [int(k) for k in clients]
        # training rows: their number is known (sizes), so each client is copied into one tensor as it
        # comes instead of a list of them and its concatenation (half the peak for a big sample)
        rows = None if test else int(data.sizes[clients].sum())
        xs, ys = _Gather(rows, palette, mean is not None), _Gather(rows, False, False)
        for k in clients:
            got = _called(get, f"{what}({k})", k)
            try:
                x, y = got
                nx, ny = len(x), len(y)
            except (TypeError, ValueError) as err:
                raise ScenarioError(f"data: {what}({k}) must return (x, y): {err}") from None
            if nx != ny:
                raise ScenarioError(f"data: {what}({k}) returned {nx} inputs and {ny} targets")
            if not test and ny != int(data.sizes[k]):
                raise ScenarioError(f"data: {what}({k}) returned {ny} examples; sizes[{k}] is {int(data.sizes[k])}")
            try:
                xt = _tensor(x, device, dtype)
                yt = _tensor(y, device, dtype, classes=data.num_classes is not None)
            except (TypeError, ValueError, RuntimeError) as err:
                raise ScenarioError(f"data: {what}({k}) returned arrays torch cannot take: {_one_line(err)}") from None
            if data.pixels and xt.dtype == torch.uint8:  # 8-bit pixels: their values k / 255
                xt = pixel_table(dtype, device)[xt.long()]
            if not shape:
                shape.extend([tuple(xt.shape[1:]), tuple(yt.shape[1:])])
            elif (tuple(xt.shape[1:]), tuple(yt.shape[1:])) != tuple(shape):
                raise ScenarioError(f"data: {what}({k}) returned examples of shape {tuple(xt.shape[1:])} and targets "
                                    f"{tuple(yt.shape[1:])}; earlier clients had {shape[0]} and {shape[1]}")
            if data.num_classes is not None and len(yt) and (int(yt.min()) < 0 or int(yt.max()) >= data.num_classes):
                raise ScenarioError(f"data: {what}({k}) has labels outside 0..{data.num_classes - 1}")
            xs.add(xt)
            ys.add(yt)
            del xt, yt, x, y, got
        return xs.result(mean, std), ys.result(None, None)

    return fetch


class _Gather:
    """Clients' rows into one tensor: preallocated when the total is known (``rows``), else
    concatenated; with ``palette`` as uint8 codes while every value is in a table of 256
    (:func:`~.palette.tables`: k / 255, or ids 0..255), turned back to values the first time one
    is not."""

    def __init__(self, rows: int | None, palette: bool, normalized: bool):
        self.rows, self.palette, self.normalized = rows, palette, normalized
        self.parts: list[torch.Tensor] = []  # rows None: one part per client; else one buffer
        self.at, self.table, self.empty = 0, None, None

    def add(self, x: torch.Tensor) -> None:
        if not len(x) and self.rows is None:  # an empty test part: only its shape is kept
            self.empty = x
            return
        if self.palette and not self.at and (not (self.normalized and x.is_floating_point()) or x.dim() == 4):
            found = encode(x)  # the first client decides the table
            if found is not None:
                x, self.table = found
        elif self.table is not None:
            coded = codes(x, self.table)
            if coded is None:
                self._to_values()
            else:
                x = coded
        if self.rows is None:
            self.parts.append(x)
        else:
            if not self.parts:
                self.parts.append(torch.empty((self.rows, *x.shape[1:]), dtype=x.dtype, device=x.device))
            self.parts[0][self.at:self.at + len(x)].copy_(x)
        self.at += len(x)

    def _to_values(self) -> None:
        """A value outside the table: the rows coded so far back to the values they stand for."""
        table, self.table = self.table, None
        if self.rows is None:
            self.parts = [table[p.long()] for p in self.parts]
            return
        old = self.parts[0]
        new = torch.empty(old.shape, dtype=table.dtype, device=old.device)
        step = max(1, (1 << 22) // max(1, old[0].numel()))
        for s in range(0, self.at, step):
            e = min(self.at, s + step)
            new[s:e] = table[old[s:e].long()]
        self.parts = [new]

    def result(self, mean: torch.Tensor | None, std: torch.Tensor | None):
        if self.rows is None and not self.parts and self.empty is not None:
            self.parts = [self.empty]
        x = self.parts[0] if self.rows is not None and self.parts else torch.cat(self.parts)
        if self.table is not None:
            return PaletteRows(x, self.table, *((mean, std) if self.table.is_floating_point() else ()))
        if mean is not None and x.is_floating_point():
            x = x.sub_(mean).div_(std)  # x is this call's own tensor (a copy or a concatenation)
        return x


def check_every_client(data, dtype: torch.dtype) -> None:
    """``check_clients: "all"``: fetch and check every client's ``client_data(k)`` once, one client
    at a time on the CPU, each discarded (one line naming the first bad client, as :func:`fetcher`)."""
    fetch = fetcher(data, torch.device("cpu"), dtype)
    for k in range(data.num_clients):
        fetch([k])


def _check_test_set(data, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor,
                    y_test: torch.Tensor) -> None:
    """The shared ``test`` set against the training data (issue 28 item 8: found at the first
    evaluation, after the run folder was written): examples and targets of the training data's
    shapes, labels in 0..num_classes-1."""
    if tuple(x_test.shape[1:]) != tuple(x_train.shape[1:]):
        raise ScenarioError(f"data: the test set's examples have shape {tuple(x_test.shape[1:])}; the clients' "
                            f"training examples have {tuple(x_train.shape[1:])}")
    if tuple(y_test.shape[1:]) != tuple(y_train.shape[1:]):
        raise ScenarioError(f"data: the test set's targets have shape {tuple(y_test.shape[1:])}; the clients' "
                            f"training targets have {tuple(y_train.shape[1:])}")
    if x_test.is_floating_point() != x_train.is_floating_point():
        raise ScenarioError(f"data: the test set's examples are {str(x_test.dtype).replace('torch.', '')}, the "
                            f"clients' {str(x_train.dtype).replace('torch.', '')}")
    if data.num_classes is not None and len(y_test) and (int(y_test.min()) < 0 or int(y_test.max()) >= data.num_classes):
        raise ScenarioError(f"data: the test set has labels outside 0..{data.num_classes - 1}")


def _held_test_set(x: torch.Tensor, data, dtype: torch.dtype, owned: bool):
    """The shared test set as the run holds it: :class:`~.palette.PaletteRows` when every value is
    k / 255 (or an integer id 0..255; ``data.pixels``' uint8 as they are), else the values,
    normalized (in place when the run owns them)."""
    mean = std = None
    pixels = data.pixels and x.dtype == torch.uint8  # 8-bit pixels: coded as they are, never floats
    if data.mean is not None and (x.is_floating_point() or pixels):
        mean = torch.as_tensor(data.mean, dtype=dtype, device=x.device).view(1, -1, 1, 1)
        std = torch.as_tensor(data.std, dtype=dtype, device=x.device).view(1, -1, 1, 1)
    if pixels and (mean is None or x.dim() == 4):
        return PaletteRows(x, pixel_table(dtype, x.device), mean, std)
    if pixels:
        x = pixel_table(dtype, x.device)[x.long()]
    found = encode(x) if mean is None or x.dim() == 4 else None
    if found is not None:
        return PaletteRows(*found, mean, std)
    if mean is not None:
        x = x.sub_(mean).div_(std) if owned else (x - mean) / std
    return x


def _called(fn, label: str, *args):
    """``fn(*args)``: a reader's DataFormatError (naming its file) kept as it is, any other failure
    of the user's callable one line naming it."""
    try:
        return fn(*args)
    except ScenarioError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ScenarioError(f"data: {label} failed: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def federated_workload(sc, data, device: torch.device, dtype: torch.dtype, *, model=None, loss=None) -> Workload:
    """The workload of ``data`` (a FederatedData) for scenario ``sc``: the evaluation sample held,
    other clients fetched per round; the model from ``model`` (a factory or module) or
    ``sc.model``; the loss ``loss`` (None: cross-entropy). Checked on one batch before the run
    (:func:`fedsim.engine.probe.probe`)."""
    from ..rng import seed_int
    from .workload_value import make_model, model_functions

    sizes = np.asarray(data.sizes, dtype=np.int64)
    m = len(sizes)
    sample = eval_sample(m, sc.eval.clients, sc.data_seed)
    sample_ids = list(range(m)) if sample is None else sample.tolist()
    # the sample's training data serve the training loss; without it only one client is held (for
    # the examples' shape), the others fetched when picked, like every client outside the sample
    holds_sample = sample is None or sc.eval.train_loss
    held_ids = sample_ids if holds_sample else sample_ids[:1]
    fetch = fetcher(data, device, dtype)
    subset = sample is not None
    # held for the whole run: k / 255 inputs as one byte each (the cohorts of a subset run are decoded
    # by Workload.for_clients; a run holding every client indexes x_train directly, so keeps floats)
    x_train, y_train = fetcher(data, device, dtype, palette=subset)(held_ids)
    ends = np.cumsum(sizes[held_ids])
    held = [np.arange(e - n, e, dtype=np.int64) for n, e in zip(sizes[held_ids], ends)]
    if data.test is not None:
        owned = callable(data.test)  # built for this run: normalized in place
        got = _called(data.test, "test()") if owned else data.test
        try:
            x_test, y_test = got
            nx, ny = len(x_test), len(y_test)
        except (TypeError, ValueError) as err:
            raise ScenarioError(f"data: the test set must be (x, y): {_one_line(err)}") from None
        if nx != ny:
            raise ScenarioError(f"data: the test set has {nx} inputs and {ny} targets")
        try:
            x_test = _tensor(x_test, device, dtype)
            y_test = _tensor(y_test, device, dtype, classes=data.num_classes is not None)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ScenarioError(f"data: the test set holds arrays torch cannot take: {_one_line(err)}") from None
        x_test = _held_test_set(x_test, data, dtype, owned)
        _check_test_set(data, x_train, y_train, x_test, y_test)
    else:
        x_test, y_test = fetcher(data, device, dtype, test=True, palette=True)(sample_ids)
    augment = data.augment if sc.data.augment is None else sc.data.augment
    if augment and x_train.dim() != 4:
        raise ScenarioError(f"data.augment: random crop and flip need images; {data.name} has inputs of shape "
                            f"{tuple(x_train.shape[1:])}")
    pad_fill = None
    if augment and data.mean is not None:
        pad_fill = (-torch.as_tensor(data.mean, dtype=dtype, device=device) / torch.as_tensor(data.std, dtype=dtype, device=device))
    num_classes = int(data.num_classes or 0)
    torch.manual_seed(seed_int(sc.seed, "init"))
    module = make_model(sc, tuple(int(d) for d in x_train.shape[1:]), data.num_classes, model)
    module = module.to(device=device, dtype=dtype)
    params = {k: v.detach().clone() for k, v in module.named_parameters()}
    buffers = {k: v.detach().clone() for k, v in module.named_buffers()}

    predict, objective = model_functions(module, loss)

    counts = None
    if num_classes and y_train.dim() == 1 and holds_sample:
        counts = np.zeros((m, num_classes), dtype=np.int64)
        ycpu = y_train.cpu().numpy()
        for c, ix in zip(held_ids, held):
            counts[c] = np.bincount(ycpu[ix], minlength=num_classes)
    if data.check_clients == "all":  # after the model is built: a bad factory fails first
        check_every_client(data, dtype)
    return Workload(
        name=data.name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        client_indices=dict(zip(held_ids, held)) if subset else held,
        weights=sizes / sizes.sum(),
        init_params=params,
        loss=objective,
        predict=predict,
        module=module,
        num_classes=num_classes,
        class_counts=counts,
        augment=bool(augment),
        pad_fill=pad_fill,
        sizes=sizes if subset else None,
        fetch=fetch if subset else None,
        eval_clients=sample,
        loss_fn=loss,
        buffers=buffers,
        epoch_rule=data.epoch_rule,  # issue 27 (data helper)
        data_notes=data.notes,
    )
