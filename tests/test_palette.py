"""8-bit inputs held as one byte each (fedsim.engine.palette): the values come back bit for bit,
anything else stays a float, and a whole run is the same with and without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsim
from fedsim.engine import palette
from fedsim.engine.from_data import federated_workload, fetcher
from fedsim.engine.palette import PaletteRows, codes, tables
from fedsim.scenario import parse_scenario

pytestmark = pytest.mark.usefixtures("one_thread")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def test_tables_are_k_over_255_as_readers_compute_it():
    """float32: one table, equal to LEAF's route (float64 k / 255, then float32) and to Pillow's
    (float32 k / 255); float64: k / 255 in float64, and float32's values cast up (images decoded to
    float32 by a reader, cast by a float64 run)."""
    k = np.arange(256)
    (t32,) = tables(torch.float32)
    assert np.array_equal(t32.numpy(), (k / 255.0).astype(np.float32))
    assert np.array_equal(t32.numpy(), k.astype(np.float32) / np.float32(255))
    a, b = tables(torch.float64)
    assert np.array_equal(a.numpy(), k / 255.0)
    assert np.array_equal(b.numpy(), ((k / 255.0).astype(np.float32)).astype(np.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_codes_give_the_values_back_or_none(dtype):
    rng = np.random.default_rng(0)
    k = torch.as_tensor(rng.integers(0, 256, (7, 1, 5, 3)), dtype=torch.uint8)
    table = tables(dtype)[0]
    x = table[k.long()]
    for block in (1, 15, 16, 1 << 22):  # blocks of whole rows: one row, parts of rows, everything
        assert torch.equal(codes(x, table, block=block), k)
    for bad in (-0.0, float("nan"), 0.5, 1.5, -1 / 255, float(table[3]) + 1e-9):
        y = x.clone()
        y[6, 0, 4, 2] = bad  # the last value of the last block
        assert codes(y, table, block=16) is None, bad
    assert codes(x.float() if dtype == torch.float64 else x.double(), table) is None  # another dtype
    assert codes(torch.zeros(3, dtype=torch.int64), table) is None
    assert codes(x[:0], table).shape == (0, 1, 5, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_palette_rows_index_like_the_normalized_values(dtype):
    """Slices, index tensors, one row: the values, and with per-channel mean/std the values
    normalized as the engine normalizes float rows ((x - mean) / std), bit for bit."""
    rng = np.random.default_rng(1)
    k = torch.as_tensor(rng.integers(0, 256, (9, 3, 4, 4)), dtype=torch.uint8)
    table = tables(dtype)[-1]
    mean = torch.tensor([0.1307, 0.5, 0.9], dtype=dtype).view(1, -1, 1, 1)
    std = torch.tensor([0.3081, 0.25, 3.0], dtype=dtype).view(1, -1, 1, 1)
    values = table[k.long()]
    for rows, want in ((PaletteRows(k, table), values), (PaletteRows(k, table, mean, std), (values - mean) / std)):
        for index in (slice(2, 7), torch.tensor([8, 0, 0, 3]), 4, slice(0, 0)):
            assert _same(rows[index], want[index]), index
        assert (rows.shape, rows.dtype, rows.device, len(rows), rows.dim()) == (k.shape, dtype, k.device, 9, 4)
        assert rows.element_size() == values.element_size() and rows.is_floating_point()


def _clients(m=9, images=True, seed=0):
    """Clients of k / 255 images (FEMNIST-like), or of values that are not (any float)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(m):
        n = 3 + c % 4
        k = rng.integers(0, 256, (n, 1, 6, 6))
        xs.append((k / 255.0).astype(np.float32) if images else rng.random((n, 1, 6, 6)).astype(np.float32))
        ys.append(rng.integers(0, 4, n))
    return xs, ys


def test_a_client_outside_the_palette_turns_the_rows_back_to_values():
    """Training rows (preallocated) and test parts (concatenated, an empty part among them): when a
    later client has a value that is not k / 255, the rows coded so far become values again and the
    result equals the plain concatenation."""
    xs, ys = _clients()
    xs[5] = xs[5].copy()
    xs[5][0, 0, 0, 0] = 0.3  # not k / 255
    xs[6] = xs[6].copy()
    xs[6][1, 0, 0, 0] = 0.3  # in its second row
    parts = [(x[:1], y[:1]) for x, y in zip(xs, ys)]
    parts[2] = (xs[2][:0], ys[2][:0])
    data = fedsim.FederatedData(sizes=np.array([len(y) for y in ys]), client_data=lambda k: (xs[k], ys[k]),
                                client_test=lambda k: parts[k], num_classes=4)
    for order in ([5, 1], [1, 5]):  # the foreign value in the first client fetched (nothing coded yet), or not
        x, _ = fetcher(data, torch.device("cpu"), torch.float32, palette=True)(order)
        assert isinstance(x, torch.Tensor) and np.array_equal(x.numpy(), np.concatenate([xs[k] for k in order]))
    x, _ = fetcher(data, torch.device("cpu"), torch.float32, palette=True)([6, 2])
    assert isinstance(x, torch.Tensor) and np.array_equal(x.numpy(), np.concatenate([xs[6], xs[2]]))
    order = [4, 0, 5, 8]
    x, _ = fetcher(data, torch.device("cpu"), torch.float32, palette=True)(order)
    assert isinstance(x, torch.Tensor) and np.array_equal(x.numpy(), np.concatenate([xs[k] for k in order]))
    x, _ = fetcher(data, torch.device("cpu"), torch.float32, palette=True)([0, 1, 3])
    assert isinstance(x, PaletteRows) and np.array_equal(x[:].numpy(), np.concatenate([xs[k] for k in (0, 1, 3)]))
    xt, _ = fetcher(data, torch.device("cpu"), torch.float32, test=True, palette=True)([2, 0, 5, 1])
    assert isinstance(xt, torch.Tensor)
    assert np.array_equal(xt.numpy(), np.concatenate([parts[k][0] for k in (2, 0, 5, 1)]))
    xt, _ = fetcher(data, torch.device("cpu"), torch.float32, test=True, palette=True)([2, 0, 1])
    assert isinstance(xt, PaletteRows) and np.array_equal(xt[:].numpy(), np.concatenate([parts[k][0] for k in (0, 1)]))


SC = {"seed": 2, "rounds": 4, "data": {"name": "synthetic"}, "model": {"name": "logreg"},
      "system": {"speed": {"dist": "uniform", "low": 1, "high": 4}},
      "round": {"policy": "window", "window": 3.0, "clients_per_round": 3},
      "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 4}, "engine": {"threads": 1},
      "eval": {"clients": 5}}


@pytest.mark.parametrize("shared_test,normalized", [(False, False), (True, True), (True, False)])
def test_a_run_is_the_same_bit_for_bit_with_the_palette_and_without(tmp_path, monkeypatch, shared_test, normalized):
    """A FederatedData run (an evaluation sample of 5 of 9 clients, the training objective on)
    holds its sample and test set as codes; with coding switched off (every value a float) the
    model, clients.csv and rounds.csv (training objective, test loss and accuracy) are the same."""
    xs, ys = _clients()
    xt, yt = _clients(6, seed=1)
    kw = {"mean": (0.1307,), "std": (0.3081,)} if normalized else {}
    if shared_test:
        kw["test"] = lambda: (np.concatenate(xt), np.concatenate(yt))
    else:
        kw["client_test"] = lambda k: (xt[k % 6][:2], yt[k % 6][:2])
    data = fedsim.FederatedData(sizes=np.array([len(y) for y in ys]), client_data=lambda k: (xs[k], ys[k]),
                                num_classes=4, **kw)
    work = federated_workload(parse_scenario(SC), data, torch.device("cpu"), torch.float32)
    assert isinstance(work.x_train, PaletteRows) and isinstance(work.x_test, PaletteRows)
    outs = {}
    for coded in (True, False):
        if not coded:
            monkeypatch.setattr("fedsim.engine.from_data.codes", lambda x, t, **k: None)
        outs[coded] = tmp_path / str(coded)
        fedsim.run(SC, data=data, out=outs[coded])
    a, b = (torch.load(outs[c] / "model.pt") for c in (True, False))
    assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    for name in ("clients.csv", "rounds.csv"):
        assert (outs[True] / name).read_text() == (outs[False] / name).read_text()
    assert palette.codes is codes  # the module itself was left alone


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_token_ids_of_a_small_alphabet_are_coded_and_others_are_not(dtype):
    rng = np.random.default_rng(3)
    x = torch.as_tensor(rng.integers(0, 80, (6, 80)), dtype=dtype)
    (table,) = tables(dtype)
    k = codes(x, table, block=100)
    assert k is not None and torch.equal(k.to(dtype), x)
    rows = PaletteRows(k, table)
    assert not rows.is_floating_point() and rows.dtype == dtype
    for index in (slice(1, 4), torch.tensor([5, 0, 5]), 2):
        got = rows[index]
        assert got.dtype == dtype and torch.equal(got, x[index])
    for bad in (256, -1, 300):
        y = x.clone()
        y[5, 79] = bad
        assert codes(y, table, block=100) is None
    assert tables(torch.uint8) == [] and tables(torch.bool) == [] and tables(torch.float16) == []


def test_held_token_rows_and_test_parts_are_the_clients_ids():
    """A text FederatedData (int64 ids in 0..79, LEAF Shakespeare's shape) run on a sample: the
    held sample and test parts are coded, index to the clients' own int64 arrays, and a cohort
    from ``for_clients`` is the same with and without coding; ids past 255 stay int64."""
    rng = np.random.default_rng(4)
    xs = [rng.integers(0, 80, (4 + c % 3, 12)) for c in range(9)]
    ys = [rng.integers(0, 80, len(x)) for x in xs]
    sc = parse_scenario({**SC, "model": {"name": "char_lstm"}, "data": {"name": "shakespeare", "root": "."}})
    for big in (False, True):
        if big:
            xs[3] = xs[3].copy()
            xs[3][0, 0] = 300
        data = fedsim.FederatedData(sizes=np.array([len(y) for y in ys]), client_data=lambda k: (xs[k], ys[k]),
                                    client_test=lambda k: (xs[k][:1], ys[k][:1]), num_classes=80)
        work = federated_workload(sc, data, torch.device("cpu"), torch.float32)
        held = dict(work.held_clients())
        assert isinstance(work.x_train, PaletteRows) != (big and 3 in held)
        for c, rows in held.items():
            got = work.x_train[torch.as_tensor(rows)]
            assert got.dtype == torch.int64 and np.array_equal(got.numpy(), xs[c])
        sample = sorted(held)
        assert np.array_equal(work.x_test[:].numpy(), np.concatenate([xs[c][:1] for c in sample]))
        cohort = work.for_clients([sample[0], 8 if 8 not in held else 7, sample[-1]])
        assert cohort.x_train.dtype == torch.int64 and isinstance(cohort.x_train, torch.Tensor)


@pytest.mark.parametrize("dtype,normalized", [("float32", True), ("float64", True), ("float32", False)])
def test_pixels_are_the_float32_values_a_reader_decodes(tmp_path, dtype, normalized):
    """``FederatedData(pixels=True)`` with uint8 inputs (clients and a shared test set) runs as the
    same data given as float32 k / 255 (what a reader decoding to float32 gives), in float32 and in
    float64 runs, bit for bit; the test set is held as its bytes."""
    rng = np.random.default_rng(5)
    ks = [rng.integers(0, 256, (3 + c % 4, 1, 6, 6)).astype(np.uint8) for c in range(9)]
    ys = [rng.integers(0, 4, len(k)) for k in ks]
    kt, yt = rng.integers(0, 256, (10, 1, 6, 6)).astype(np.uint8), rng.integers(0, 4, 10)
    norm = {"mean": (0.1307,), "std": (0.3081,)} if normalized else {}
    as_bytes = fedsim.FederatedData(sizes=np.array([len(y) for y in ys]), client_data=lambda k: (ks[k], ys[k]),
                                    test=lambda: (kt.copy(), yt), num_classes=4, pixels=True, **norm)
    as_floats = fedsim.FederatedData(sizes=np.array([len(y) for y in ys]),
                                     client_data=lambda k: (ks[k].astype(np.float32) / np.float32(255), ys[k]),
                                     test=(kt.astype(np.float32) / np.float32(255), yt), num_classes=4, **norm)
    sc = {**SC, "engine": {"threads": 1, "dtype": dtype}}
    work = federated_workload(parse_scenario(sc), as_bytes, torch.device("cpu"), getattr(torch, dtype))
    assert isinstance(work.x_test, PaletteRows) and work.x_test.codes.data_ptr() != 0
    outs = {}
    for name, data in (("bytes", as_bytes), ("floats", as_floats)):
        outs[name] = tmp_path / name
        fedsim.run(sc, data=data, out=outs[name])
    a, b = (torch.load(outs[n] / "model.pt") for n in ("bytes", "floats"))
    assert all(_same(a[k], b[k]) for k in a)
    for name in ("clients.csv", "rounds.csv"):
        assert (outs["bytes"] / name).read_text() == (outs["floats"] / name).read_text()
    with pytest.raises(TypeError, match="pixels must be True or False"):
        fedsim.FederatedData(sizes=np.array([1]), client_data=lambda k: (ks[0][:1], ys[0][:1]), test=(kt, yt),
                             pixels="yes")
