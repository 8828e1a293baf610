"""What an Arrow IPC file or stream declares, read from its message headers before any batch is
decoded: rows per record batch and, for compressed batches, the bytes they decompress to.

An uncompressed batch read from a memory map is a view of the file (it costs no memory); a
compressed one (LZ4 or ZSTD, e.g. ``pandas.to_feather``'s default) is decompressed when read,
and a 20 KB stream can declare gigabytes. Each compressed buffer starts with its uncompressed
length (Arrow's columnar format, "Compression"), and the buffer list is in the batch's header: a
FlatBuffers table (``Message.fbs``: ``Message.header`` -> ``RecordBatch {length, nodes, buffers,
compression}``), read here with the dozen lines FlatBuffers' layout needs.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from fedsim.data.formats.errors import DataFormatError, short

__all__ = ["scan_ipc", "IPC_MAGIC"]

IPC_MAGIC = b"ARROW1"
_SCHEMA, _DICTIONARY, _RECORD_BATCH = 1, 2, 3  # Message.fbs MessageHeader


class _Table:
    """One FlatBuffers table: ``field(i)`` is the absolute position of field i, or None."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        (soffset,) = struct.unpack_from("<i", buf, pos)
        self.vtable = pos - soffset
        (self.vsize,) = struct.unpack_from("<H", buf, self.vtable)

    def field(self, i: int) -> int | None:
        at = 4 + 2 * i
        if at >= self.vsize:
            return None
        (off,) = struct.unpack_from("<H", self.buf, self.vtable + at)
        return None if off == 0 else self.pos + off

    def scalar(self, i: int, fmt: str, default: Any = 0) -> Any:
        at = self.field(i)
        return default if at is None else struct.unpack_from(fmt, self.buf, at)[0]

    def table(self, i: int) -> "_Table | None":
        at = self.field(i)
        return None if at is None else _Table(self.buf, at + struct.unpack_from("<I", self.buf, at)[0])

    def vector(self, i: int) -> tuple[int, int]:
        """(start, length) of the vector in field i ((0, 0) when absent)."""
        at = self.field(i)
        if at is None:
            return 0, 0
        vec = at + struct.unpack_from("<I", self.buf, at)[0]
        return vec + 4, struct.unpack_from("<I", self.buf, vec)[0]


def _root(buf: bytes) -> _Table:
    return _Table(buf, struct.unpack_from("<I", buf, 0)[0])


def _batch(meta: bytes, body: Any) -> tuple[int, int]:
    """(rows, bytes once decompressed: 0 for an uncompressed batch, a view of the file)."""
    msg = _root(meta)
    kind = msg.scalar(1, "<B")
    header = msg.table(2)
    if header is None:
        return 0, 0
    if kind == _DICTIONARY:
        header = header.table(1)  # DictionaryBatch.data
        if header is None:
            return 0, 0
    rows = header.scalar(0, "<q")
    if header.field(3) is None:  # no BodyCompression: buffers are views of the body
        return rows, 0
    start, count = header.vector(2)
    decoded = 0
    data = memoryview(body) if body is not None else memoryview(b"")
    for j in range(count):
        offset, length = struct.unpack_from("<qq", meta, start + 16 * j)
        if length == 0:
            continue
        if length < 8 or offset < 0 or offset + 8 > len(data):
            raise ValueError("a compressed buffer lies outside the message body")
        (size,) = struct.unpack_from("<q", data, offset)
        decoded += (length - 8) if size == -1 else size
    return rows, decoded


def scan_ipc(path: Path, source: Any) -> list[tuple[int, int]]:
    """``(rows, decompressed bytes)`` of every record batch of the IPC file or stream ``source``
    (a memory map of ``path``), in order; dictionary batches count in the next record batch."""
    import pyarrow as pa

    source.seek(0)
    if source.read(len(IPC_MAGIC)) == IPC_MAGIC:
        source.seek(8)  # the file format: magic, padding, then the stream format
    else:
        source.seek(0)
    out: list[tuple[int, int]] = []
    pending = 0
    try:
        reader = pa.ipc.MessageReader.open_stream(source)
        while True:
            try:
                m = reader.read_next_message()
            except StopIteration:
                break
            if m.type not in ("record batch", "dictionary"):
                continue
            rows, decoded = _batch(m.metadata.to_pybytes(), m.body)
            if m.type == "dictionary":
                pending += decoded
            else:
                out.append((rows, decoded + pending))
                pending = 0
    except (struct.error, ValueError, OSError, pa.ArrowException) as err:
        raise DataFormatError(path, f"not a readable Arrow IPC file ({short(err)})") from None
    return out
