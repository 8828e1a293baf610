"""LEAF's JSON layout: the per-user index, FEMNIST and Shakespeare decoding, missing and bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsim.data.errors import DataNotFound
from fedsim.data.femnist import FEMNIST_CLASSES, load_femnist
from fedsim.data.formats.errors import DataFormatError
from fedsim.data.formats.leaf import LeafIndex, load_leaf, scan_leaf_file
from fedsim.data.shakespeare import LETTERS, load_shakespeare
from fedsim.errors import ScenarioError

from _leaf_files import femnist_user, shakespeare_user, write_leaf_file, write_leaf_folder

SIZES = {"f0003_12": (5, 2), "f0001_40": (3, 1), "f0002_07": (4, 2)}


def test_femnist_clients_are_the_writers_with_their_own_test_parts(tmp_path):
    data = write_leaf_folder(tmp_path, femnist_user, SIZES)
    fd = load_femnist(tmp_path)
    assert fd.name == "femnist" and fd.num_classes == FEMNIST_CLASSES == 62
    assert fd.client_ids == ("f0001_40", "f0002_07", "f0003_12")  # sorted ids
    assert fd.sizes.tolist() == [3, 4, 5]
    assert fd.test is None
    for k, u in enumerate(fd.client_ids):
        (xtr, ytr), (xte, yte) = data[u]
        x, y = fd.client_data(k)
        assert x.dtype == np.float32 and x.shape == (len(ytr), 1, 28, 28)
        np.testing.assert_array_equal(x.reshape(len(ytr), 784), np.asarray(xtr, dtype=np.float32))
        assert y.dtype == np.int64 and y.tolist() == ytr
        xt, yt = fd.client_test(k)
        np.testing.assert_array_equal(xt.reshape(len(yte), 784), np.asarray(xte, dtype=np.float32))
        assert yt.tolist() == yte


def test_shakespeare_inputs_are_vocabulary_indices_and_targets_the_next_character(tmp_path):
    data = write_leaf_folder(tmp_path, shakespeare_user, {"ROMEO": (3, 1), "JULIET": (2, 2)})
    fd = load_shakespeare(tmp_path)
    assert fd.num_classes == 80 and len(LETTERS) == 80 and fd.client_ids == ("JULIET", "ROMEO")
    x, y = fd.client_data(1)
    (xs, ys), _ = data["ROMEO"]
    assert x.dtype == np.int64 and x.shape == (3, 80)
    assert ["".join(LETTERS[i] for i in row) for row in x] == xs
    assert [LETTERS[i] for i in y] == ys
    assert LETTERS.index("\n") == 0 and LETTERS.index("}") == 79 and LETTERS.index("a") == 11 + 10 + 4 + 26 + 2


def test_index_spans_are_byte_offsets_even_with_utf8_in_the_file(tmp_path):
    rng = np.random.default_rng(1)
    users = {"é-writer": femnist_user(rng, 2), "plain": femnist_user(rng, 3)}
    path = tmp_path / "a.json"
    write_leaf_file(path, users, ensure_ascii=False, hierarchies=["ü ∑ [{\"]"])
    names, counts, spans, found = scan_leaf_file(path)
    raw = path.read_bytes()
    assert names == list(users) and counts == [2, 3] and found == {"é-writer": 2, "plain": 3}
    for u, (x, y) in users.items():
        start, end = spans[u]
        assert json.loads(raw[start:end]) == {"x": x, "y": y}


def test_leaf_tree_under_data_and_user_split_pool_the_test_users(tmp_path):
    rng = np.random.default_rng(2)
    write_leaf_file(tmp_path / "data" / "train" / "t.json", {"a": femnist_user(rng, 2), "b": femnist_user(rng, 3)})
    held = {"c": femnist_user(rng, 2), "d": femnist_user(rng, 1)}
    write_leaf_file(tmp_path / "data" / "test" / "t.json", held)
    fd = load_femnist(tmp_path)
    assert fd.client_test is None and fd.test[0].shape == (3, 1, 28, 28)
    assert fd.test[1].tolist() == held["c"][1] + held["d"][1]


def test_clients_are_read_on_demand(tmp_path, monkeypatch):
    write_leaf_folder(tmp_path, femnist_user, SIZES)
    calls = []
    orig = LeafIndex.read
    monkeypatch.setattr(LeafIndex, "read", lambda self, i, **kw: calls.append(self.users[i]) or orig(self, i, **kw))
    fd = load_femnist(tmp_path, validate_bytes=0)  # index only: no user parsed
    assert calls == []
    fd.client_data(2)
    fd.client_test(0)
    assert calls == ["f0003_12", "f0001_40"]


def test_missing_folder_names_dataset_source_and_folder(tmp_path):
    with pytest.raises(DataNotFound) as err:
        load_femnist(tmp_path / "nowhere")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("femnist: ")
    assert "github.com/TalwalkarLab/leaf" in msg and str(tmp_path / "nowhere") in msg
    (tmp_path / "train").mkdir()
    with pytest.raises(DataNotFound, match="shakespeare: .*TalwalkarLab/leaf"):
        load_shakespeare(tmp_path)


def _bad(tmp_path, text: str, name: str = "bad.json"):
    write_leaf_folder(tmp_path, femnist_user, {"ok": (1, 1)})
    path = tmp_path / "train" / name
    path.write_text(text)
    with pytest.raises(DataFormatError) as err:
        load_femnist(tmp_path)
    assert isinstance(err.value, ScenarioError)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg


def _doc(users, counts=None, **user_data):
    return json.dumps({"users": users, "num_samples": counts if counts is not None else [1] * len(users),
                       "user_data": user_data})


PIX = [0.5] * 784


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[0.1', "malformed JSON"),
        ("[1, 2]", "expected '{'"),
        ('{"users": ["u"], "num_samples": [1]}', "no 'user_data'"),
        (_doc(["u"], [2], u={"x": [PIX, PIX], "y": [1]}), "user 'u': x has 2 examples, y 1"),
        (_doc(["u"], [1], u={"x": [PIX], "y": [62]}), "user 'u': label 62 out of range [0, 62)"),
        (_doc(["u"], [1], u={"x": [PIX], "y": [-1]}), "label -1 out of range"),
        (_doc(["u"], [1], u={"x": [[0.5] * 10], "y": [1]}), "784 numbers"),
        (_doc(["u"], [2], u={"x": [PIX], "y": []}), "user 'u': x has 1 examples, y 0"),
        (_doc(["u"], [1], u={"y": [1]}), 'user \'u\': expected {"x": [...], "y": [...]}'),
        (_doc(["u"], [2**70], u={"x": [PIX], "y": [1]}), "'num_samples': 1180591620717411303424 is not a count"),
        (_doc(["u", "v"], [1], u={"x": [PIX], "y": [1]}), "2 users but 1 num_samples"),
        (_doc(["u", "v"], [1, 1], u={"x": [PIX], "y": [1]}), "user 'v' is listed but has no user_data"),
        (_doc(["ok"], [1], ok={"x": [PIX], "y": [1]}), "user 'ok' also appears in"),
        (_doc(["u"], [1], u=[1, 2]), 'expected {"x"'),
    ],
)
def test_bad_leaf_files_are_one_line_naming_file_and_problem(tmp_path, text, problem):
    assert problem in _bad(tmp_path, text)


def test_declared_counts_that_differ_are_read_as_found_and_noted(tmp_path):
    """LEAF's reader reads the x and y lists and never checks num_samples (issue 27 item 1)."""
    rng = np.random.default_rng(4)
    a, b = femnist_user(rng, 3), femnist_user(rng, 2)
    doc = {"users": ["a", "b"], "num_samples": [5, 2], "user_data": {"a": {"x": a[0], "y": a[1]}, "b": {"x": b[0], "y": b[1]}}}
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        (tmp_path / split / "d.json").write_text(json.dumps(doc))
    fd = load_femnist(tmp_path)
    assert fd.sizes.tolist() == [3, 2] and len(fd.client_data(0)[1]) == 3 and len(fd.client_test(0)[1]) == 3
    assert len(fd.notes) == 2  # one per folder
    assert fd.notes[0] == (f"{tmp_path / 'train'}: 1 of 2 users hold other counts than num_samples declares (5 declared, "
                           "3 found; e.g. 'a': 5 declared, 3 found); the examples are read, as LEAF's reader does")


def test_users_without_examples_are_left_out_of_training_with_a_note(tmp_path):
    """LEAF's sample split keeps users with fewer than 2 samples as empty user_data entries."""
    rng = np.random.default_rng(5)
    a = femnist_user(rng, 2)
    for split, users in (("train", {"a": a, "z": ([], [])}), ("test", {"a": ([], []), "z": ([], [])})):
        write_leaf_file(tmp_path / split / "d.json", users, )
    fd = load_femnist(tmp_path)
    assert fd.client_ids == ("a",) and fd.sizes.tolist() == [2]
    assert "1 user(s) of user_data hold no examples and are left out (e.g. 'z'" in fd.notes[0]
    xt, yt = fd.client_test(0)  # an empty test part keeps the example shape
    assert xt.shape == (0, 1, 28, 28) and yt.shape == (0,)


def test_shakespeare_character_outside_the_vocabulary(tmp_path):
    x = "a" * 79 + "~"
    write_leaf_file(tmp_path / "train" / "s.json", {"R": ([x], ["a"])})
    write_leaf_file(tmp_path / "test" / "s.json", {"R": (["a" * 80], ["b"])})
    with pytest.raises(DataFormatError, match=r"s\.json: user 'R': character '~' is not in LEAF's 80-character"):
        load_shakespeare(tmp_path)
    write_leaf_file(tmp_path / "train" / "s.json", {"R": (["a" * 79], ["a"])})
    with pytest.raises(DataFormatError, match="strings of 80 characters"):
        load_shakespeare(tmp_path)


def test_big_folders_check_a_user_when_it_is_read(tmp_path):
    write_leaf_folder(tmp_path, femnist_user, {"a": (1, 1)})
    write_leaf_file(tmp_path / "train" / "z.json", {"b": ([PIX], [99])})
    fd = load_femnist(tmp_path, validate_bytes=0)  # opens: structure is fine
    with pytest.raises(DataFormatError, match=r"z\.json: user 'b': label 99 out of range"):
        fd.client_data(1)


def test_generic_loader_passes_options_through(tmp_path):
    write_leaf_folder(tmp_path, femnist_user, {"a": (2, 1)})
    fd = load_leaf(tmp_path, lambda x, y, w, who: (np.asarray(x), np.asarray(y)), name="mine", num_classes=None,
                   source="make it", mean=(0.5,), std=(0.25,))
    assert fd.name == "mine" and fd.mean == (0.5,) and fd.num_classes is None


@pytest.mark.parametrize("dump", [dict(indent=2), dict(separators=(",", ":")), dict(indent="\t", sort_keys=True)])
def test_any_json_formatting_of_the_same_document(tmp_path, dump):
    rng = np.random.default_rng(3)
    users = {"w1": femnist_user(rng, 2), "w0": femnist_user(rng, 1)}
    doc = {"user_data": {u: {"y": y, "x": x} for u, (x, y) in users.items()}, "hierarchies": [],
           "num_samples": [2, 1], "users": ["w1", "w0"]}
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        (tmp_path / split / "a.json").write_text(json.dumps(doc, **dump))
    fd = load_femnist(tmp_path)
    assert fd.client_ids == ("w0", "w1") and fd.sizes.tolist() == [1, 2]
    assert fd.client_test(1)[1].tolist() == users["w1"][1]


@pytest.mark.parametrize("block", [4096, 1 << 24])
def test_long_numeric_stretches_are_matched_in_blocks(tmp_path, monkeypatch, block):
    """Stretches without strings (FEMNIST's x: megabytes of numbers) are matched with numpy a block
    at a time; the spans must equal the ones JSON itself gives, whatever the block size."""
    from fedsim.data.formats import leaf

    monkeypatch.setattr(leaf, "_BLOCK", block)
    rng = np.random.default_rng(6)
    users = {"big": femnist_user(rng, 40), 'b[r]a{c}e"s': femnist_user(rng, 2), "z": femnist_user(rng, 30)}
    path = tmp_path / "a.json"
    write_leaf_file(path, users, hierarchies=[[["]"]]])
    assert path.stat().st_size > 3 * leaf._FAST_MIN
    names, counts, spans, found = scan_leaf_file(path)
    raw = path.read_bytes()
    for u, (x, y) in users.items():
        start, end = spans[u]
        assert json.loads(raw[start:end]) == {"x": x, "y": y} and found[u] == len(y)
    deep = "[" * 40 + "1, " * 30000 + "1" + "]" * 40
    text = '{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": ' + deep + ', "y": [1]}}}'
    path.write_text(text)
    at = text.index("[[") + 29  # the file, user_data and the user are 3 levels; x's 30th bracket is the 33rd
    with pytest.raises(DataFormatError, match=rf"a\.json: JSON nested deeper than 32 levels at byte {at}$"):
        scan_leaf_file(path)


def _outcome(f, text):
    try:
        v = f(text)
    except Exception as err:  # noqa: BLE001 -- the error is the outcome compared
        return ("error", type(err).__name__)
    return ("value", json.dumps(v), repr(v))  # repr: 17 digits, so float bits are compared exactly


def test_leaf_decoding_gives_json_loads_value_or_error():
    """LEAF's reader is ``json.load``; fedsim decodes with msgspec where it can and with json.loads
    where msgspec refuses: every document below gives json.loads's value (floats bit for bit,
    -0.0, subnormals, huge integers, the last of duplicate keys) or json.loads's error."""
    import random
    import struct

    from fedsim.data.formats.leaf import _loads

    docs = ["[1e400, -1e400]", "[NaN]", "[Infinity, -Infinity]", '["\\ud800"]', "[" + "9" * 5000 + "]",
            "[123456789012345678901234567890]", "[9007199254740993]", "[-0.0, 0.0, -0]", "[1E5, 1e-400, 5e-324]",
            "[2.4703282292062327e-324, 2.4703282292062328e-324, 1.7976931348623157e308, 1.7976931348623159e308]",
            "[1.00000000000000011102230246251565404236316680908203125, 0.1e1, 1e0, 1E+2, 1e-2]",
            '{"a": 1, "a": 2}', '{"x": [[1.0, 0.5019607843137255]], "y": [3]}', '"\\u00e9\\n"', "[01]", "[1.]",
            "[.5]", "[1,]", "[+1]", "[1 2]", "", "[", "tru", "[1e]", '{"a" 1}', "[\"a\x00\"]", "[0x10]",
            "[" * 100_000 + "]" * 100_000, "[" * 2000 + "]" * 2000]  # too deep for either: RecursionError
    rng = random.Random(0)
    for _ in range(2000):
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if x == x and abs(x) != float("inf"):
            docs.append(f"[{x!r}, {x:.17e}, {x:.25g}, {x:.9g}, {rng.getrandbits(70)}]")
    for doc in docs:
        for text in (doc, doc.encode("utf-8", "surrogatepass")):
            assert _outcome(_loads, text) == _outcome(json.loads, text), doc[:80]
