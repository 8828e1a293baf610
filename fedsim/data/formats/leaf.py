"""LEAF's JSON layout (Caldas et al. 2018, github.com/TalwalkarLab/leaf), read per user on demand.

LEAF's ``preprocess.sh`` writes ``data/train/*.json`` and ``data/test/*.json``; each file is one
object ``{"users": [u, ...], "num_samples": [n_u, ...], "user_data": {u: {"x": [...], "y": [...]}}}``
(plus ``"hierarchies"`` for some datasets). With LEAF's default per-sample split (``-t sample``)
every user appears in both folders: client k trains on its train part and is tested on its test
part. With ``-t user`` the folders hold different users; the test users then form one shared test
set.

Opening a folder builds an index -- user -> (file, byte offsets of its ``user_data`` entry) --
by scanning each file once for its structure without parsing the examples, one file in memory at a
time; ``client_data(k)`` then reads and parses only user k's bytes. Memory is the index plus the
users a run touches, whatever the folder's size. Folders up to ``validate_bytes`` are also parsed
in full at open (every user decoded and checked, then dropped), so a bad user fails before a run
starts; in bigger folders a user is checked when first read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import JSONDecodeError, scanstring
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fedsim.data.errors import DataNotFound
from fedsim.data.federated import FederatedData
from fedsim.data.formats.errors import DataFormatError, check_client, test_parts

__all__ = ["LeafIndex", "load_leaf", "scan_leaf_file", "VALIDATE_BYTES"]

VALIDATE_BYTES = 256 * 2**20  # folders up to this size are decoded in full when opened

# decode(x, y, where, who) -> (x array, y array): raw JSON lists of one user to arrays (and checks)
Decode = Callable[[list, list, Path, str], tuple[np.ndarray, np.ndarray]]

_STRUCT = re.compile(r'[\[\]{}"]')
_WS = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True)
class LeafIndex:
    """Where each user's examples are in one LEAF folder (``train/`` or ``test/``).

    Attributes:
        files: The folder's ``*.json`` files, sorted.
        users: User ids, sorted.
        sizes: ``int64 (users,)``, the declared ``num_samples``.
        spans: ``int64 (users, 3)``: file number, start and end byte of the user's ``user_data`` value.
    """

    files: tuple[Path, ...]
    users: tuple[str, ...]
    sizes: np.ndarray
    spans: np.ndarray

    @property
    def total_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def position(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.users)}

    def read(self, i: int) -> tuple[list, list]:
        """User i's raw ``x`` and ``y`` lists (checked: an object with lists of equal, declared length)."""
        f, start, end = (int(v) for v in self.spans[i])
        path, who = self.files[f], f"user {self.users[i]!r}"
        with open(path, "rb") as fh:
            fh.seek(start)
            raw = fh.read(end - start)
        try:
            value = json.loads(raw)
        except (JSONDecodeError, UnicodeDecodeError) as err:
            raise DataFormatError(path, f"{who}: malformed JSON ({_reason(err)})") from None
        if not isinstance(value, dict) or not isinstance(value.get("x"), list) or not isinstance(value.get("y"), list):
            raise DataFormatError(path, f'{who}: expected {{"x": [...], "y": [...]}}')
        check_client(value["x"], value["y"], path, who, expected=int(self.sizes[i]))
        return value["x"], value["y"]


def _reason(err: Exception) -> str:
    return err.msg if isinstance(err, JSONDecodeError) else str(err)


def _utf8(text: str, path: Path) -> str:
    """A string scanned from the Latin-1 view back to the file's UTF-8."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise DataFormatError(path, f"{text!r} is not UTF-8") from None


def _skip_ws(s: str, i: int) -> int:
    return _WS.match(s, i).end()


def _skip_value(s: str, i: int, path: Path) -> int:
    """End of the JSON value starting at ``s[i]`` (containers matched by depth, strings scanned)."""
    if i >= len(s):
        raise DataFormatError(path, "malformed JSON (file ends early)")
    if s[i] not in "[{":
        try:
            return json.JSONDecoder().raw_decode(s, i)[1]
        except JSONDecodeError as err:
            raise DataFormatError(path, f"malformed JSON at byte {err.pos} ({err.msg})") from None
    depth, j = 0, i
    while True:
        m = _STRUCT.search(s, j)
        if m is None:
            raise DataFormatError(path, "malformed JSON (file ends inside a value)")
        c, j = m.group(), m.start()
        if c == '"':
            try:
                j = scanstring(s, j + 1)[1]
            except JSONDecodeError as err:
                raise DataFormatError(path, f"malformed JSON at byte {err.pos} ({err.msg})") from None
            continue
        depth += 1 if c in "[{" else -1
        j += 1
        if depth == 0:
            return j


def _expect(s: str, i: int, c: str, path: Path) -> int:
    i = _skip_ws(s, i)
    if i >= len(s) or s[i] != c:
        got = "end of file" if i >= len(s) else repr(s[i])
        raise DataFormatError(path, f"malformed JSON at byte {i} (expected {c!r}, got {got})")
    return i + 1


def _key(s: str, i: int, path: Path) -> tuple[str, int]:
    i = _expect(s, i, '"', path)
    try:
        return scanstring(s, i)
    except JSONDecodeError as err:
        raise DataFormatError(path, f"malformed JSON at byte {err.pos} ({err.msg})") from None


def _object_items(s: str, i: int, path: Path):
    """Yield ``(key, value_start)`` of the object at ``s[i]``; the caller returns the value's end
    through ``send``. Ends when the object closes; the generator's return value is the end."""
    i = _expect(s, i, "{", path)
    j = _skip_ws(s, i)
    if j < len(s) and s[j] == "}":
        return j + 1
    while True:
        key, i = _key(s, i, path)
        i = _skip_ws(s, _expect(s, i, ":", path))
        i = yield key, i
        i = _skip_ws(s, i)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        return _expect(s, i, "}", path)


def scan_leaf_file(path: Path) -> tuple[list[str], list[int], dict[str, tuple[int, int]]]:
    """One LEAF JSON file's ``users``, ``num_samples`` and the byte span of each ``user_data`` entry.

    The file is read as Latin-1 so that character offsets are byte offsets (JSON's structure is
    ASCII, and UTF-8 continuation bytes never equal a structural character).
    """
    try:
        s = path.read_bytes().decode("latin-1")
    except OSError as err:
        raise DataFormatError(path, f"cannot read ({err.strerror or err})") from None
    head: dict[str, Any] = {}
    seen: set[str] = set()
    spans: dict[str, tuple[int, int]] = {}
    items = _object_items(s, _skip_ws(s, 0), path)
    try:
        key, i = next(items)
        while True:
            key = _utf8(key, path)
            seen.add(key)
            if key == "user_data":
                inner = _object_items(s, i, path)
                try:
                    user, j = next(inner)
                    while True:
                        end = _skip_value(s, j, path)
                        user = _utf8(user, path)
                        if user in spans:
                            raise DataFormatError(path, f"user {user!r} appears twice in user_data")
                        spans[user] = (j, end)
                        user, j = inner.send(end)
                except StopIteration as stop:
                    end = stop.value
            elif key in ("users", "num_samples"):
                end = _skip_value(s, i, path)
                try:
                    head[key] = json.loads(s[i:end].encode("latin-1"))
                except (JSONDecodeError, UnicodeDecodeError) as err:
                    raise DataFormatError(path, f"{key}: malformed JSON ({_reason(err)})") from None
            else:  # "hierarchies" and anything else LEAF or a converter adds
                end = _skip_value(s, i, path)
            key, i = items.send(end)
    except StopIteration as stop:
        end = stop.value
    if s[_skip_ws(s, end):].strip():
        raise DataFormatError(path, f"malformed JSON at byte {end} (extra data after the object)")
    for key in ("users", "num_samples", "user_data"):
        if key not in seen:
            raise DataFormatError(path, f"no {key!r} (LEAF files hold users, num_samples and user_data)")
    users, counts = head["users"], head["num_samples"]
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise DataFormatError(path, "'users' must be a list of strings")
    if not isinstance(counts, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        raise DataFormatError(path, "'num_samples' must be a list of integers")
    if len(users) != len(counts):
        raise DataFormatError(path, f"{len(users)} users but {len(counts)} num_samples")
    if len(set(users)) != len(users):
        raise DataFormatError(path, "a user is listed twice in 'users'")
    missing = [u for u in users if u not in spans]
    if missing:
        raise DataFormatError(path, f"user {missing[0]!r} is listed but has no user_data")
    extra = [u for u in spans if u not in set(users)]
    if extra:
        raise DataFormatError(path, f"user_data has user {extra[0]!r}, which 'users' does not list")
    for u, n in zip(users, counts):
        if n < 1:
            raise DataFormatError(path, f"user {u!r}: no samples")
    return users, counts, spans


def index_folder(folder: Path) -> LeafIndex:
    """Index every ``*.json`` file of one LEAF folder (users must be unique across files)."""
    files = tuple(sorted(p for p in folder.glob("*.json") if p.is_file()))
    where: dict[str, tuple[int, int, int, int]] = {}
    for f, path in enumerate(files):
        users, counts, spans = scan_leaf_file(path)
        for u, n in zip(users, counts):
            if u in where:
                raise DataFormatError(path, f"user {u!r} also appears in {files[where[u][0]].name}")
            where[u] = (f, *spans[u], n)
    users = tuple(sorted(where))
    spans = np.array([where[u][:3] for u in users], dtype=np.int64).reshape(-1, 3)
    sizes = np.array([where[u][3] for u in users], dtype=np.int64)
    return LeafIndex(files=files, users=users, sizes=sizes, spans=spans)


def load_leaf(
    root: str | Path,
    decode: Decode,
    *,
    name: str,
    num_classes: int | None,
    source: str,
    validate_bytes: int = VALIDATE_BYTES,
    **kw: Any,
) -> FederatedData:
    """A LEAF dataset: ``root/train/*.json`` and ``root/test/*.json`` (or ``root/data/train`` ...,
    LEAF's own tree under ``data/<dataset>/``).

    Args:
        root: The folder holding ``train/`` and ``test/``.
        decode: Turns one user's raw ``x``, ``y`` lists into arrays, raising DataFormatError.
        name: Dataset name (messages, info.yaml).
        num_classes: Classes of ``y`` (checked by ``decode``).
        source: Where to get the files, for the missing-files message.
        validate_bytes: Decode every user at open when the folders total at most this many bytes.
        **kw: Passed to FederatedData (mean, std, ...).

    Raises:
        DataNotFound: No JSON files under ``root/train`` or ``root/test``.
        DataFormatError: A malformed file or user.
    """
    base = Path(root).expanduser().resolve()
    folders = _leaf_folders(base)
    if folders is None:
        raise DataNotFound(f"{name}: no LEAF JSON files in {base}/train and {base}/test; {source}")
    train, test = (index_folder(f) for f in folders)
    if not train.users:
        raise DataNotFound(f"{name}: no users in {folders[0]}; {source}")
    if not test.users:
        raise DataNotFound(f"{name}: no users in {folders[1]}; {source}")

    def user_arrays(index: LeafIndex, i: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = index.read(i)
        return decode(x, y, index.files[int(index.spans[i, 0])], f"user {index.users[i]!r}")

    if train.total_bytes + test.total_bytes <= validate_bytes:
        for index in (train, test):
            for i in range(len(index.users)):
                user_arrays(index, i)

    def client_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        return user_arrays(train, k)

    # LEAF's per-user split (each client has its test part) or its -t user split (held-out users)
    test_part, client_test = test_parts(train.users, test.users, lambda i: user_arrays(test, i))
    return FederatedData(
        sizes=train.sizes,
        client_data=client_data,
        test=test_part,
        client_test=client_test,
        num_classes=num_classes,
        name=name,
        client_ids=train.users,
        **kw,
    )


def _leaf_folders(base: Path) -> tuple[Path, Path] | None:
    for cand in (base, base / "data"):
        tr, te = cand / "train", cand / "test"
        if tr.is_dir() and te.is_dir() and any(tr.glob("*.json")) and any(te.glob("*.json")):
            return tr, te
    return None
