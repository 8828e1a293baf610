"""LEAF's JSON layout (Caldas et al. 2018, github.com/TalwalkarLab/leaf), read per user on demand.

LEAF's ``preprocess.sh`` writes ``data/train/*.json`` and ``data/test/*.json``; each file is one
object ``{"users": [u, ...], "num_samples": [n_u, ...], "user_data": {u: {"x": [...], "y": [...]}}}``
(plus ``"hierarchies"`` for some datasets). With LEAF's default per-sample split (``-t sample``)
every user appears in both folders: client k trains on its train part and is tested on its test
part. With ``-t user`` the folders hold different users; the test users then form one shared test
set.

What is read is what LEAF's own reader (``models/utils/model_utils.py``, ``read_data``) reads:
the users are the keys of ``user_data``, sorted, and a user's examples are its ``x`` and ``y``
lists. ``num_samples`` is not what LEAF trains on: its ``split_data.py`` can write a count that
differs from the examples (Shakespeare's ``-t sample`` test files declare ``n - n_train`` but hold
fewer, the split leaving a gap), and LEAF's reader never checks it. So a client's size n_i is the
length of its ``y`` list as found; declared counts that differ are reported in
:attr:`FederatedData.notes <fedsim.data.federated.FederatedData.notes>` (info.yaml's
``data_notes``), not refused. A user of ``user_data`` without examples (LEAF's sample split keeps
users with fewer than 2 samples as empty entries) is left out of training, with a note.

Opening a folder builds an index -- user -> (file, byte offsets of its ``user_data`` entry,
examples found) -- by scanning each file through a memory map without parsing the examples (only
each user's ``y`` list is parsed, to count them), one file at a time; ``client_data(k)`` then
reads and parses only user k's bytes. Memory is the index plus the users a run touches, whatever
the folder's size. Folders up to ``validate_bytes`` are also parsed in full at open (every user
decoded and checked, then dropped), so a bad user fails before a run starts; in bigger folders a
user is checked when first read.

Duplicate keys are read as ``json.loads`` (LEAF's reader) reads them: the last one wins. A file
with two ``"user_data"`` objects holds the users of the second; a user twice in ``user_data`` (or
a key twice in a user's object) is its last entry.

Bounds (:mod:`fedsim.limits`): a file is a regular file of at most ``MAX_LEAF_FILE_BYTES``; JSON
nests at most ``MAX_JSON_DEPTH`` deep; a value parsed at once (``users``, ``num_samples``, one
user's examples) is at most ``MAX_JSON_VALUE_BYTES`` of text and at most ``MAX_JSON_VALUE_COST``
bytes of memory once parsed, estimated from its text before it is parsed (:func:`parsed_cost`):
a list of 15 million one-letter names is 60 MiB of text but about 1 GiB of Python strings.
"""

from __future__ import annotations

import json
import mmap
import re
from dataclasses import dataclass
from json.decoder import JSONDecodeError
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, short, test_parts, who
from fedsim.data.formats.files import open_regular
from fedsim.limits import (MAX_CLIENTS, MAX_INT, MAX_JSON_DEPTH, MAX_JSON_VALUE_BYTES, MAX_JSON_VALUE_COST,
                           MAX_LEAF_FILE_BYTES)

__all__ = ["LeafIndex", "load_leaf", "scan_leaf_file", "parsed_cost", "VALIDATE_BYTES", "LEAF_EPOCHS"]

VALIDATE_BYTES = 256 * 2**20  # folders up to this size are decoded in full when opened
#: LEAF's local epoch: ceil(n_i / B) minibatches (``models/utils/model_utils.py`` ``batch_data``
#: yields a last, smaller batch), so a writer with fewer samples than B still takes one step.
LEAF_EPOCHS = "ceil"

# decode(x, y, where, who) -> (x array, y array): raw JSON lists of one user to arrays (and checks)
Decode = Callable[[list, list, Path, str], tuple[np.ndarray, np.ndarray]]

_STRUCT = re.compile(rb'[\[\]{}"]')
_WS = re.compile(rb"[ \t\n\r]*")
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # after an opening quote, to after the closing one
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")


@dataclass(frozen=True)
class LeafIndex:
    """Where each user's examples are in one LEAF folder (``train/`` or ``test/``).

    Attributes:
        files: The folder's ``*.json`` files, sorted.
        users: User ids, sorted (the keys of ``user_data`` holding examples, as LEAF's reader).
        sizes: ``int64 (users,)``: the examples found (the length of each user's ``y``).
        declared: ``int64 (users,)``: the counts ``num_samples`` declares (-1: not listed).
        spans: ``int64 (users, 3)``: file number, start and end byte of the user's ``user_data`` value.
        notes: What differs from what the files declare (one line each).
    """

    files: tuple[Path, ...]
    users: tuple[str, ...]
    sizes: np.ndarray
    declared: np.ndarray
    spans: np.ndarray
    notes: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def position(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.users)}

    def read(self, i: int, *, allow_empty: bool = False) -> tuple[list, list]:
        """User i's raw ``x`` and ``y`` lists (checked: an object with lists of equal length, the
        length found when the folder was indexed)."""
        f, start, end = (int(v) for v in self.spans[i])
        path, name = self.files[f], who("user", self.users[i])
        with open_regular(path, MAX_LEAF_FILE_BYTES) as fh:
            fh.seek(start)
            raw = fh.read(end - start)
        try:
            value = _loads(raw)
        except (JSONDecodeError, UnicodeDecodeError) as err:
            raise DataFormatError(path, f"{name}: malformed JSON ({_reason(err)})") from None
        except (RecursionError, ValueError) as err:  # nesting changed since the scan; a 5,000-digit number
            raise DataFormatError(path, f"{name}: malformed JSON ({short(err)})") from None
        if not isinstance(value, dict) or not isinstance(value.get("x"), list) or not isinstance(value.get("y"), list):
            raise DataFormatError(path, f'{name}: expected {{"x": [...], "y": [...]}}')
        if allow_empty and not value["x"] and not value["y"]:
            return [], []
        check_client(value["x"], value["y"], path, name, expected=int(self.sizes[i]))
        return value["x"], value["y"]


def _loads(raw: bytes) -> Any:
    """``json.loads(raw)``: the value LEAF's reader (``json.load``) gets, decoded by msgspec where it
    can (about 3x faster on FEMNIST's number lists; numbers, strings and duplicate keys come out the
    same). A document msgspec refuses -- ``NaN``, ``1e400``, a lone surrogate, a 5,000-digit
    integer, malformed JSON -- goes to ``json.loads``, whose value or error it then is."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(raw)


def _reason(err: Exception) -> str:
    return err.msg if isinstance(err, JSONDecodeError) else short(err)


def _skip_ws(s: Any, i: int) -> int:
    return _WS.match(s, i).end()


def _string_end(s: Any, i: int, path: Path) -> int:
    """End (after the closing quote) of the JSON string whose opening quote is ``s[i]``."""
    m = _STRING_REST.match(s, i + 1)
    if m is None:
        raise DataFormatError(path, f"malformed JSON at byte {i} (a string that never ends)")
    return m.end()


def _skip_value(s: Any, i: int, path: Path, depth: int = 0) -> int:
    """End of the JSON value starting at ``s[i]`` (containers matched by depth, strings scanned;
    the inside is parsed only when it is read). ``depth``: the containers already open."""
    if i >= len(s):
        raise DataFormatError(path, "malformed JSON (file ends early)")
    c = s[i:i + 1]
    if c == b'"':
        return _string_end(s, i, path)
    if c not in (b"[", b"{"):
        m = _SCALAR.match(s, i)
        if m is None:
            raise DataFormatError(path, f"malformed JSON at byte {i} (expected a value)")
        return m.end()
    open_, j = depth, i
    while True:
        if s.find(b'"', j, j + _FAST_MIN) < 0 and len(s) - j >= _FAST_MIN:  # a long stretch without strings
            found, j, open_ = _skip_block(s, j, open_, depth, path)
            if found:
                return j
            if j >= len(s):
                raise DataFormatError(path, "malformed JSON (file ends inside a value)")
            continue
        m = _STRUCT.search(s, j)
        if m is None:
            raise DataFormatError(path, "malformed JSON (file ends inside a value)")
        c, j = m.group(), m.start()
        if c == b'"':
            j = _string_end(s, j, path)
            continue
        if c in b"[{":
            open_ += 1
            if open_ > MAX_JSON_DEPTH:
                raise DataFormatError(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels at byte {j}")
        else:
            open_ -= 1
        j += 1
        if open_ == depth:
            return j


_FAST_MIN = 1 << 16  # string-free stretches at least this long are matched with numpy
_BLOCK = 1 << 24


def _skip_block(s: Any, j: int, open_: int, depth: int, path: Path) -> tuple[bool, int, int]:
    """Match brackets from ``s[j]`` up to the next string's quote (at most ``_BLOCK`` bytes) with
    numpy, no Python loop per character: LEAF's FEMNIST ``x`` lists are megabytes of numbers,
    commas and brackets.

    Returns ``(True, end, depth)`` when the value closes there; else ``(False, next, open)`` with
    ``next`` where the stretch ends (a quote, for the caller to scan the string, or more numbers).
    """
    stop = s.find(b'"', j, j + _BLOCK)
    stop = min(len(s), j + _BLOCK) if stop < 0 else stop
    closed, too_deep, open_ = _match(s, j, stop, open_, depth)  # no view of the map outlives the call
    if too_deep >= 0:
        raise DataFormatError(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels at byte {too_deep}")
    if closed >= 0:
        return True, closed, depth
    return False, stop, open_


def _match(s: Any, j: int, stop: int, open_: int, depth: int) -> tuple[int, int, int]:
    """(end of the value or -1, byte where nesting passes MAX_JSON_DEPTH or -1, depth at ``stop``)."""
    block = np.frombuffer(s, dtype=np.uint8, count=stop - j, offset=j)
    opens = np.flatnonzero((block == 91) | (block == 123))  # [ {
    closes = np.flatnonzero((block == 93) | (block == 125))  # ] }
    del block
    if not (len(opens) or len(closes)):
        return -1, -1, open_
    at = np.concatenate([opens, closes])
    order = np.argsort(at, kind="stable")
    at = at[order]
    level = open_ + np.cumsum(np.where(order < len(opens), 1, -1), dtype=np.int64)
    if int(level.max()) > MAX_JSON_DEPTH:
        return -1, j + int(at[int(np.argmax(level > MAX_JSON_DEPTH))]), open_
    closed = np.flatnonzero(level == depth)
    if len(closed):
        return j + int(at[closed[0]]) + 1, -1, depth
    return -1, -1, int(level[-1])


def _expect(s: Any, i: int, c: bytes, path: Path) -> int:
    i = _skip_ws(s, i)
    if i >= len(s) or s[i:i + 1] != c:
        got = "end of file" if i >= len(s) else repr(s[i:i + 1].decode("latin-1"))
        raise DataFormatError(path, f"malformed JSON at byte {i} (expected {c.decode()!r}, got {got})")
    return i + 1


def _string(s: Any, i: int, path: Path) -> tuple[str, int]:
    """The JSON string starting at ``s[i]`` (a key or a user id, decoded from UTF-8) and its end."""
    end = _string_end(s, i, path)
    try:
        return json.loads(s[i:end]), end
    except (JSONDecodeError, UnicodeDecodeError) as err:
        raise DataFormatError(path, f"malformed JSON string at byte {i} ({_reason(err)})") from None


def _key(s: Any, i: int, path: Path) -> tuple[str, int]:
    i = _skip_ws(s, i)
    if i >= len(s) or s[i:i + 1] != b'"':
        got = "end of file" if i >= len(s) else repr(s[i:i + 1].decode("latin-1"))
        raise DataFormatError(path, f"malformed JSON at byte {i} (expected '\"', got {got})")
    return _string(s, i, path)


def _object_items(s: Any, i: int, path: Path):
    """Yield ``(key, value_start)`` of the object at ``s[i]``; the caller returns the value's end
    through ``send``. Ends when the object closes; the generator's return value is the end."""
    i = _expect(s, i, b"{", path)
    j = _skip_ws(s, i)
    if j < len(s) and s[j:j + 1] == b"}":
        return j + 1
    while True:
        key, i = _key(s, i, path)
        i = _skip_ws(s, _expect(s, i, b":", path))
        i = yield key, i
        i = _skip_ws(s, i)
        if i < len(s) and s[i:i + 1] == b",":
            i += 1
            continue
        return _expect(s, i, b"}", path)


#: Bytes of memory a parsed JSON value may take per element (a ``,`` ``[`` or ``:`` in its text) at
#: most, and per object (``{``) on top (:func:`parsed_cost`).
ELEMENT_COST, OBJECT_COST = 96, 192


def parsed_cost(s: Any, start: int, end: int) -> int:
    """An upper estimate of the bytes of memory ``json.loads(s[start:end])`` takes: the text's bytes
    (a string's characters) plus ``ELEMENT_COST`` per ``,``, ``[`` and ``:`` (each element and key:
    its object and pointer) and ``OBJECT_COST`` more per ``{`` (a dict's table), plus one
    ``ELEMENT_COST`` for the value itself. Such bytes inside strings count too (an overestimate).
    Counted with numpy over the text (about 1 GB/s), without parsing it."""
    n = end - start
    if n <= 0:
        return 0
    block = np.frombuffer(s, dtype=np.uint8, count=n, offset=start)
    try:
        elements = sum(int(np.count_nonzero(block == c)) for c in b",[:")
        objects = int(np.count_nonzero(block == ord("{")))
    finally:
        del block  # no view of a memory map outlives the call
    return n + ELEMENT_COST * (1 + elements + objects) + OBJECT_COST * objects


def _check_cost(s: Any, start: int, end: int, path: Path, what: str) -> None:
    """DataFormatError (one line naming the file and the value) when parsing ``s[start:end]`` could
    take more than ``MAX_JSON_VALUE_COST`` bytes of memory (:func:`parsed_cost`); a value too short
    to reach it is not counted."""
    if (end - start) * (ELEMENT_COST + OBJECT_COST + 1) <= MAX_JSON_VALUE_COST:
        return
    cost = parsed_cost(s, start, end)
    if cost > MAX_JSON_VALUE_COST:
        raise DataFormatError(path, f"{what} would take about {cost:,} bytes of memory parsed ({end - start:,} bytes "
                                    f"of text), more than {MAX_JSON_VALUE_COST:,} (MAX_JSON_VALUE_COST)")


def _parse(s: Any, start: int, end: int, path: Path, what: str) -> Any:
    """``json.loads`` of ``s[start:end]``, at most ``MAX_JSON_VALUE_BYTES`` of text and
    ``MAX_JSON_VALUE_COST`` bytes of memory parsed (checked before parsing)."""
    if end - start > MAX_JSON_VALUE_BYTES:
        raise DataFormatError(path, f"{what} is larger than {MAX_JSON_VALUE_BYTES:,} bytes")
    _check_cost(s, start, end, path, what)
    try:
        return _loads(s[start:end])
    except (JSONDecodeError, UnicodeDecodeError) as err:
        raise DataFormatError(path, f"{what}: malformed JSON ({_reason(err)})") from None
    except (RecursionError, ValueError) as err:  # a 5,000-digit number; the depth is bounded before
        raise DataFormatError(path, f"{what}: malformed JSON ({short(err)})") from None


def _user_value(s: Any, i: int, path: Path, user: str) -> tuple[int, int]:
    """End of user ``user``'s ``{"x": ..., "y": ...}`` at ``s[i]`` and the length of its ``y``."""
    if s[i:i + 1] != b"{":
        raise DataFormatError(path, f'{who("user", user)}: expected {{"x": [...], "y": [...]}}')
    found, x_span = None, None
    items = _object_items(s, i, path)
    try:
        key, j = next(items)
        while True:
            end = _skip_value(s, j, path, 3)  # inside the file's object, user_data and the user's
            if key == "x":
                x_span = (j, end)
            elif key == "y":
                y = _parse(s, j, end, path, f'{who("user", user)}: "y"')
                if not isinstance(y, list):
                    raise DataFormatError(path, f'{who("user", user)}: expected {{"x": [...], "y": [...]}}')
                found = len(y)
            key, j = items.send(end)
    except StopIteration as stop:
        end = stop.value
    if end - i > MAX_JSON_VALUE_BYTES:
        raise DataFormatError(path, f"{who('user', user)}: examples larger than {MAX_JSON_VALUE_BYTES:,} bytes")
    _check_cost(s, i, end, path, f"{who('user', user)}: examples")
    if found is None or x_span is None:
        raise DataFormatError(path, f'{who("user", user)}: expected {{"x": [...], "y": [...]}}')
    if found == 0:  # no examples, unless x has some: then the user is damaged, not empty
        x = _parse(s, *x_span, path, f'{who("user", user)}: "x"')
        if not isinstance(x, list):
            raise DataFormatError(path, f'{who("user", user)}: expected {{"x": [...], "y": [...]}}')
        if x:
            raise DataFormatError(path, f"{who('user', user)}: x has {len(x)} examples, y 0")
    return end, found


def _map(path: Path):
    """``path`` (a regular file of at most MAX_LEAF_FILE_BYTES) as a read-only memory map."""
    with open_regular(path, MAX_LEAF_FILE_BYTES) as fh:
        size = fh.seek(0, 2)
        if size == 0:
            raise DataFormatError(path, "malformed JSON (empty file)")
        try:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as err:
            raise DataFormatError(path, f"cannot read ({short(err)})") from None
    if hasattr(mmap, "MADV_SEQUENTIAL"):  # read once, front to back: read ahead, drop behind
        try:
            m.madvise(mmap.MADV_SEQUENTIAL)
        except OSError:
            pass
    return m


def scan_leaf_file(path: Path) -> tuple[list[str], list[int], dict[str, tuple[int, int]], dict[str, int]]:
    """One LEAF JSON file's ``users``, ``num_samples``, the byte span of each ``user_data`` entry
    and the examples each entry holds (the length of its ``y``)."""
    s = _map(path)
    try:
        return _scan(s, path)
    finally:
        s.close()


def _scan(s: Any, path: Path):
    head: dict[str, Any] = {}
    seen: set[str] = set()
    spans: dict[str, tuple[int, int]] = {}
    found: dict[str, int] = {}
    items = _object_items(s, _skip_ws(s, 0), path)
    try:
        key, i = next(items)
        while True:
            seen.add(key)
            if key == "user_data":  # a second "user_data" replaces the first, as in json.loads
                spans, found = {}, {}
                inner = _object_items(s, i, path)
                try:
                    user, j = next(inner)
                    while True:  # a user twice: its last entry, as in json.loads
                        if user not in spans and len(spans) >= MAX_CLIENTS:
                            raise DataFormatError(path, f"more than {MAX_CLIENTS:,} users")
                        end, found[user] = _user_value(s, j, path, user)
                        spans[user] = (j, end)
                        user, j = inner.send(end)
                except StopIteration as stop:
                    end = stop.value
            elif key in ("users", "num_samples"):
                end = _skip_value(s, i, path, 1)
                head[key] = _parse(s, i, end, path, repr(key))
            else:  # "hierarchies" and anything else LEAF or a converter adds
                end = _skip_value(s, i, path, 1)
            key, i = items.send(end)
    except StopIteration as stop:
        end = stop.value
    rest = _skip_ws(s, end)
    if rest < len(s):
        raise DataFormatError(path, f"malformed JSON at byte {end} (extra data after the object)")
    for key in ("users", "num_samples", "user_data"):
        if key not in seen:
            raise DataFormatError(path, f"no {key!r} (LEAF files hold users, num_samples and user_data)")
    users, counts = head["users"], head["num_samples"]
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise DataFormatError(path, "'users' must be a list of strings")
    if not isinstance(counts, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        raise DataFormatError(path, "'num_samples' must be a list of integers")
    for n in counts:
        if not 0 <= n <= MAX_INT:
            raise DataFormatError(path, f"'num_samples': {short(n, 40)} is not a count of examples")
    if len(users) != len(counts):
        raise DataFormatError(path, f"{len(users)} users but {len(counts)} num_samples")
    if len(set(users)) != len(users):
        raise DataFormatError(path, "a user is listed twice in 'users'")
    missing = [u for u in users if u not in spans]
    if missing:
        raise DataFormatError(path, f"{who('user', missing[0])} is listed but has no user_data")
    return users, counts, spans, found


def index_folder(folder: Path, *, train: bool = True) -> LeafIndex:
    """Index every ``*.json`` file of one LEAF folder (users must be unique across files).

    Users are the keys of ``user_data`` (LEAF's reader); in a training folder a user without
    examples is left out (a note says how many), in a test folder it is kept (an empty test part).
    """
    files = tuple(sorted(p for p in folder.glob("*.json") if not p.is_dir()))
    where: dict[str, tuple[int, int, int, int, int]] = {}
    for f, path in enumerate(files):
        users, counts, spans, found = scan_leaf_file(path)
        declared = dict(zip(users, counts))
        for u, (start, end) in spans.items():
            if u in where:
                raise DataFormatError(path, f"{who('user', u)} also appears in {files[where[u][0]].name}")
            where[u] = (f, start, end, found[u], declared.get(u, -1))
    if len(where) > MAX_CLIENTS:
        raise DataFormatError(folder, f"more than {MAX_CLIENTS:,} users")
    empty = sorted(u for u, w in where.items() if w[3] == 0)
    notes = []
    if train and empty:
        notes.append(f"{folder}: {len(empty)} user(s) of user_data hold no examples and are left out "
                     f"(e.g. {short(empty[0])!r}; LEAF's split keeps users with fewer than 2 samples as empty entries)")
        for u in empty:
            del where[u]
    users = tuple(sorted(where))
    spans = np.array([where[u][:3] for u in users], dtype=np.int64).reshape(-1, 3)
    sizes = np.array([where[u][3] for u in users], dtype=np.int64)
    declared = np.array([where[u][4] for u in users], dtype=np.int64)
    differ = (declared >= 0) & (declared != sizes)
    if differ.any():
        k = int(np.argmax(differ))
        notes.append(
            f"{folder}: {int(differ.sum())} of {len(users)} users hold other counts than num_samples declares "
            f"({int(declared[differ].sum()):,} declared, {int(sizes[differ].sum()):,} found; e.g. "
            f"{short(users[k])!r}: {int(declared[k])} declared, {int(sizes[k])} found); the examples are read, "
            "as LEAF's reader does")
    unlisted = int((declared < 0).sum())
    if unlisted:
        notes.append(f"{folder}: {unlisted} user(s) of user_data are not in 'users' and are read, as LEAF's reader does")
    return LeafIndex(files=files, users=users, sizes=sizes, declared=declared, spans=spans, notes=tuple(notes))


def load_leaf(
    root: str | Path,
    decode: Decode,
    *,
    name: str,
    num_classes: int | None,
    source: str,
    validate_bytes: int = VALIDATE_BYTES,
    epoch_rule: str = LEAF_EPOCHS,
    **kw: Any,
) -> FederatedData:
    """A LEAF dataset: ``root/train/*.json`` and ``root/test/*.json`` (or ``root/data/train`` ...,
    LEAF's own tree under ``data/<dataset>/``).

    Args:
        root: The folder holding ``train/`` and ``test/``.
        decode: Turns one user's raw ``x``, ``y`` lists into arrays, raising DataFormatError
            (it must accept empty lists: an empty test part).
        name: Dataset name (messages, info.yaml).
        num_classes: Classes of ``y`` (checked by ``decode``).
        source: Where to get the files, for the missing-files message.
        validate_bytes: Decode every user at open when the folders total at most this many bytes.
        epoch_rule: Local steps per epoch (:attr:`FederatedData.epoch_rule`); default LEAF's
            ``ceil``: ceil(n_i / B) minibatches.
        **kw: Passed to FederatedData (mean, std, ...).

    Raises:
        DataNotFound: No JSON files under ``root/train`` or ``root/test``.
        DataFormatError: A malformed file or user.
    """
    base = Path(root).expanduser().resolve()
    folders = _leaf_folders(base)
    if folders is None:
        raise DataNotFound(f"{name}: no LEAF JSON files in {base}/train and {base}/test; {source}")
    train, test = index_folder(folders[0]), index_folder(folders[1], train=False)
    if not train.users:
        raise DataNotFound(f"{name}: no users with examples in {folders[0]}; {source}")
    if not test.users:
        raise DataNotFound(f"{name}: no users in {folders[1]}; {source}")

    def user_arrays(index: LeafIndex, i: int, allow_empty: bool = False) -> tuple[np.ndarray, np.ndarray]:
        x, y = index.read(i, allow_empty=allow_empty)
        return decode(x, y, index.files[int(index.spans[i, 0])], who("user", index.users[i]))

    if train.total_bytes + test.total_bytes <= validate_bytes:
        for index in (train, test):
            for i in range(len(index.users)):
                user_arrays(index, i, allow_empty=index is test)

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return user_arrays(train, k)

    # LEAF's per-user split (each client has its test part) or its -t user split (held-out users)
    test_part, client_test = test_parts(train.users, test.users, lambda i: user_arrays(test, i, allow_empty=True))
    return FederatedData(
        sizes=train.sizes,
        client_data=client_data,
        test=test_part,
        client_test=client_test,
        num_classes=num_classes,
        name=name,
        client_ids=train.users,
        notes=train.notes + test.notes,
        epoch_rule=epoch_rule,
        **kw,
    )


def _leaf_folders(base: Path) -> tuple[Path, Path] | None:
    for cand in (base, base / "data"):
        tr, te = cand / "train", cand / "test"
        if tr.is_dir() and te.is_dir() and any(tr.glob("*.json")) and any(te.glob("*.json")):
            return tr, te
    return None
