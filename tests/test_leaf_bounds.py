"""LEAF files: what a parsed value costs is bounded before it is parsed, and duplicate keys are read
as LEAF's reader (``json.load``) reads them (issue 38 item 7).

* A 60 MiB ``users`` list of one-letter names is under the 64 MiB bound on one JSON value's text
  but about 1 GiB of Python strings parsed (exit 1, MemoryError, under a 1 GiB data limit). The
  bound ``MAX_JSON_VALUE_COST`` is lowered here, so a file of a few hundred KiB shows the refusal.
* Two ``"user_data"`` objects in one file: ``json.loads`` keeps the last (2 users), fedsim read
  both (4 clients).
"""

from __future__ import annotations

import json
import tracemalloc

import msgspec
import pytest

from fedsim.data.femnist import load_femnist
from fedsim.data.formats import leaf
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.leaf import parsed_cost, scan_leaf_file
from fedsim.errors import ScenarioError

from _leaf_files import femnist_user, write_leaf_folder

PIX = [0.5] * 784


def test_a_users_list_that_would_cost_too_much_memory_is_refused_before_parsing(tmp_path, monkeypatch):
    n = 100_000  # 400 KB of text: '"a",' per name
    path = tmp_path / "big.json"
    path.write_text('{"users": [' + ",".join(['"a"'] * n) + '], "num_samples": [], "user_data": {}}')
    # the estimate by hand: the list's text (1 + 4n - 1 + 1 bytes) + 96 per ',' (n - 1) and per '[' (1)
    text = 4 * n + 1
    assert parsed_cost(path.read_bytes(), 10, 10 + text) == text + 96 + 96 * (n - 1) + 96 == text + 96 * (n + 1)
    monkeypatch.setattr(leaf, "MAX_JSON_VALUE_COST", 4 * 2**20)  # 4 MiB: the list's ~9.6 MB is over it
    parsed = []
    monkeypatch.setattr(leaf, "_loads", lambda raw: parsed.append(len(raw)) or msgspec.json.decode(raw))
    with pytest.raises(DataFormatError) as err:
        scan_leaf_file(path)
    msg = str(err.value)
    assert isinstance(err.value, ScenarioError) and "\n" not in msg
    assert msg == (f"{path}: 'users' would take about {text + 96 * (n + 1):,} bytes of memory parsed ({text:,} bytes "
                   f"of text), more than {4 * 2**20:,} (MAX_JSON_VALUE_COST)")
    assert parsed == []  # refused from its text: nothing was decoded


def test_a_user_whose_examples_would_cost_too_much_is_refused(tmp_path, monkeypatch):
    write_leaf_folder(tmp_path, femnist_user, {"u": (40, 1), "v": (1, 1)}, per_file=2)
    monkeypatch.setattr(leaf, "MAX_JSON_VALUE_COST", 2**20)  # 40 x 784 numbers: ~3 MB estimated
    with pytest.raises(DataFormatError, match=r"all_data_0_niid_0_keep_0_train_9\.json: user 'u': examples would take "
                                              r"about [\d,]+ bytes of memory parsed .*MAX_JSON_VALUE_COST\)$"):
        load_femnist(tmp_path)
    monkeypatch.setattr(leaf, "MAX_JSON_VALUE_COST", 256 * 2**20)  # the default reads it
    assert load_femnist(tmp_path).sizes.tolist() == [40, 1]


@pytest.mark.parametrize("value", [
    ["a"] * 20_000, ["\u4e00"] * 20_000, ["\U0001f600"] * 20_000, [0.5] * 20_000, [[]] * 20_000, [{}] * 20_000,
    [{"a": 1}] * 20_000, ["x" * 80] * 2_000, [[0.25] * 784] * 20, {"x": [[0.1] * 784] * 10, "y": [1] * 10},
    [10**6] * 20_000, [True, None] * 10_000,
])
def test_the_estimate_is_at_least_what_parsing_takes(value):
    """Measured with tracemalloc for both decoders fedsim uses (msgspec, json.loads)."""
    for text in (json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode()):
        for decode in (msgspec.json.decode, json.loads):
            tracemalloc.start()
            try:
                v = decode(text)
                took = tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
            del v
            assert parsed_cost(text, 0, len(text)) >= took, (str(value)[:30], decode)


def _doc_with_two_user_data(first: dict, second: dict) -> str:
    users = list(second)
    body = lambda d: json.dumps({u: {"x": [PIX] * n, "y": [1] * n} for u, n in d.items()})  # noqa: E731
    return (f'{{"users": {json.dumps(users)}, "num_samples": {json.dumps(list(second.values()))}, '
            f'"user_data": {body(first)}, "user_data": {body(second)}}}')


def test_two_user_data_objects_keep_the_last_as_json_loads_does(tmp_path):
    write_leaf_folder(tmp_path, femnist_user, {"t": (1, 1)})  # the folders; the train file is replaced
    for f in (tmp_path / "train").glob("*.json"):
        f.unlink()
    text = _doc_with_two_user_data({"a": 1, "b": 2}, {"c": 3, "d": 1})
    (tmp_path / "train" / "x.json").write_text(text)
    expected = json.loads(text)["user_data"]  # LEAF's reader: the last user_data
    assert sorted(expected) == ["c", "d"]
    users, counts, spans, found = scan_leaf_file(tmp_path / "train" / "x.json")
    assert sorted(spans) == ["c", "d"] and found == {"c": 3, "d": 1}
    data = load_femnist(tmp_path)
    assert data.client_ids == ("c", "d") and data.sizes.tolist() == [3, 1]


def test_a_user_twice_in_user_data_is_its_last_entry(tmp_path):
    path = tmp_path / "x.json"
    text = ('{"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": [[1]], "y": [1]}, '
            '"u": {"x": [[1], [2]], "y": [3, 4]}}}')
    path.write_text(text)
    assert json.loads(text)["user_data"]["u"]["y"] == [3, 4]
    users, counts, spans, found = scan_leaf_file(path)
    assert found == {"u": 2}
    start, end = spans["u"]
    assert json.loads(path.read_bytes()[start:end]) == {"x": [[1], [2]], "y": [3, 4]}
    index = leaf.index_folder(tmp_path)
    assert index.read(0) == ([[1], [2]], [3, 4])
