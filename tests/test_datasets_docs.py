"""docs/datasets.md states what the code has: dataset names, classes, models and their parameter
counts, the scenario settings, the readers, and the validation threshold."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from fedsim.data import femnist as femnist_mod
from fedsim.data import shakespeare as shakespeare_mod
from fedsim.data.formats.leaf import VALIDATE_BYTES
from fedsim.models.leaf import char_lstm, leaf_cnn
from fedsim.scenario_yaml import load_yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "datasets.md").read_text()


def _rows(first_header: str) -> list[list[str]]:
    """The body rows of the table whose first header cell is ``first_header``."""
    lines = PAGE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _count(text: str) -> int:
    return int(re.match(r"([\d,]+)", text).group(1).replace(",", ""))


def test_named_datasets_table():
    rows = {r[0].strip("`"): r for r in _rows("`data.name`")}
    assert set(rows) == {"femnist", "shakespeare", "femnist_fedscale"}
    factories = {"femnist": femnist_mod.femnist, "shakespeare": shakespeare_mod.shakespeare,
                 "femnist_fedscale": femnist_mod.femnist_fedscale}
    classes = {"femnist": femnist_mod.FEMNIST_CLASSES, "shakespeare": len(shakespeare_mod.LETTERS),
               "femnist_fedscale": femnist_mod.FEMNIST_CLASSES}
    for name, row in rows.items():
        assert callable(factories[name])
        assert int(row[4]) == classes[name]
        assert row[5].strip("`") in ("leaf_cnn", "char_lstm")


def _params(m) -> int:
    return sum(p.numel() for p in m.parameters())


def test_models_table_parameter_counts():
    rows = {r[0].strip("`"): r for r in _rows("`model.name`")}
    assert _count(rows["leaf_cnn"][2]) == _params(leaf_cnn((1, 28, 28), 62))
    assert _count(rows["char_lstm"][2]) == _params(char_lstm((80,), 80))
    torch_cell = re.search(r"two biases per gate, ([\d,]+) parameters", PAGE).group(1)
    assert int(torch_cell.replace(",", "")) == _params(char_lstm((80,), 80, cell="torch"))


@pytest.mark.parametrize("row", _rows("file"), ids=lambda r: r[0])
def test_scenario_table_matches_the_files(row):
    path = ROOT / row[0].strip("`")
    raw = load_yaml(path.read_text())
    text = row[1]
    assert f"lr {raw['algorithm']['lr']}" in text and f"batch {raw['algorithm']['batch_size']}" in text
    assert f"{raw['rounds']} rounds" in text
    every = raw["eval"]["every"]
    assert ("evaluation every round" in text) if every == 1 else (f"evaluation every {every}" in text)


def test_readers_table_names_real_functions():
    for row in _rows("reader"):
        module, _, fn = row[0].strip("`").rpartition(".")
        assert callable(getattr(importlib.import_module(module), fn)), row[0]


def test_validation_threshold():
    mib = int(re.search(r"LEAF folders up to (\d+) MiB are decoded in full", PAGE).group(1))
    assert mib * 2**20 == VALIDATE_BYTES


# ---------------------------------------------------------------- issue 27: formats, options, sizes
def test_named_datasets_options_column_matches_the_factories():
    from types import SimpleNamespace

    from fedsim.errors import ScenarioError

    rows = {r[0].strip("`"): r for r in _rows("`data.name`")}
    factories = {"femnist": femnist_mod.femnist, "shakespeare": shakespeare_mod.shakespeare,
                 "femnist_fedscale": femnist_mod.femnist_fedscale}
    for name, row in rows.items():
        key, _, values = row[6].partition(": ")  # `epoch_rule`: `ceil` or `floor`
        key, choices = key.strip("`"), [v.strip("` ") for v in values.split(" or ")]
        with pytest.raises(ScenarioError) as err:  # the message lists the same choices, default first
            factories[name](SimpleNamespace(root="/nonexistent", options={key: "?"}), 0)
        assert str(err.value).startswith(f"data.options.{key}: must be " + " or ".join(repr(c) for c in choices))


def test_formats_statements_match_the_code():
    from fedsim.data.formats import fedjax_sqlite, pfl_hdf5
    from fedsim.data.formats.images import FEDSCALE_MNIST
    from fedsim.data.formats.leaf import LEAF_EPOCHS

    text = " ".join(PAGE.split())
    assert FEDSCALE_MNIST.mode == "RGB" and FEDSCALE_MNIST.size == (32, 32) and "`Resize((32, 32))`" in text
    assert FEDSCALE_MNIST.mean == (0.1307,) * 3 and FEDSCALE_MNIST.std == (0.3081,) * 3
    assert "`Normalize((0.1307,), (0.3081,))` on each channel" in text
    assert LEAF_EPOCHS == "ceil" and "tau_i = E ceil(n_i / B)" in text
    assert pfl_hdf5.TFF_KEYS == ("pixels", "label") and pfl_hdf5.PFL_KEYS == ("inputs", "targets")
    import inspect

    assert 'preprocess: Literal["emnist"] | None = "emnist"' in inspect.getsource(fedjax_sqlite.load_fedjax_sqlite)
    assert "--tf 0.8" in shakespeare_mod.SHAKESPEARE_SOURCE and " -tf 0.8" not in shakespeare_mod.SHAKESPEARE_SOURCE
    assert "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample --tf 0.8" in text
    assert "`Image.ANTIALIAS`" in text and "Pillow 10" in text


def test_model_size_statements():
    import torch

    from fedsim.models.size import LARGE_MODEL_PARAMETERS, size_note
    from fedsim.scenario import parse_scenario

    text = " ".join(PAGE.split())
    for shape, words in (((1, 28, 28), "at 1x28x28"), ((3, 32, 32), "at FedScale's 3x32x32"),
                         ((3, 128, 128), "at NIST's stored 3x128x128")):
        with torch.device("meta"):
            n = _params(leaf_cnn(shape, 62))
        assert f"{n:,} {words}" in text or f"{n:,} parameters {words}" in text, (shape, n)
    assert LARGE_MODEL_PARAMETERS == 10_000_000 and "more than 10 million parameters" in text
    sc = parse_scenario({"data": {"name": "digits", "clients": 2}, "model": {"name": "leaf_cnn"},
                         "round": {"policy": "window", "window": 5.0}})
    with torch.device("meta"):
        big = leaf_cnn((3, 128, 128), 62)
    note = size_note(sc, (3, 128, 128), 62, big)
    assert f"`{note}`" in text
