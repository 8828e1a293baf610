"""What the engine and the clock call: compress a cohort's updates (with error feedback), compress
the broadcast model, and the bytes of each transfer (docs/compression.md).

Where a run calls these (the engine wires them; nothing here knows the engine):

- uplink: after local training, before aggregation, on the reporting clients' stacked deltas:
  ``applied, residuals = compress_cohort(comp, deltas, clients, keys, residuals, seed=seed)``;
  the server aggregates ``applied`` (FedNova normalises those), ``residuals`` is client state
  (checkpointed like SCAFFOLD's c_i).
- downlink: the clients of model version v train from ``compress_model(compressor, x_v, seed=seed,
  version=v)``; the server keeps x_v.
- bytes: ``upload_bytes(compressor, params)`` and ``download_bytes(compressor, params)`` are known
  from the parameter count before training.

Randomness: client i's draws for its job keyed k come from a ``torch.Generator`` seeded
``seed_int(seed, "compress", i, k)`` (the broadcast of version v: ``seed_int(seed,
"compress-down", v)``), on the updates' device, so a client's result does not depend on the
cohort it is compressed with, nor on the chunking or the order of the cohort.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from ..errors import PartError, ScenarioError
from ..factory_options import failure
from ..rng import seed_int
from .base import Compression, Compressor, flatten, unflatten
from .section import DOWNLINK, UPLINK, check_payload

Tensors = dict[str, torch.Tensor]

__all__ = [
    "compress_cohort", "compress_model", "generators", "upload_bytes", "download_bytes", "payload_of",
    "check_compression", "UP", "DOWN",
]

#: The purposes of the two links' random streams (fedsim.rng).
UP = "compress"
DOWN = "compress-down"


def generators(seed: int, purpose: str, keys: Sequence[tuple[int, ...]], device: torch.device) -> list[torch.Generator]:
    """One ``torch.Generator`` on ``device`` per key tuple, seeded ``seed_int(seed, purpose, *key)``."""
    gens = []
    for key in keys:
        g = torch.Generator(device=device)
        g.manual_seed(seed_int(seed, purpose, *key))
        gens.append(g)
    return gens


def compress_cohort(
    comp: Compression, deltas: Tensors, clients: Sequence[int], keys: Sequence[int],
    residuals: Mapping[int, Tensors] | None = None, *, seed: int,
) -> tuple[Tensors, dict[int, Tensors]]:
    """The updates the server receives from a cohort, and the clients' new residuals.

    Args:
        comp: The uplink's compressor and error-feedback switch.
        deltas: The clients' updates Delta_i stacked ``{name: (C, ...)}``, row i for ``clients[i]``.
        clients: Client index of each row.
        keys: Each row's job key (``Job.key``: the round in sync, the job's number in async).
        residuals: Error feedback's e_i by client (``{name: tensor of the parameter's shape}``);
            a client without one has e_i = 0. Not modified.
        seed: The scenario seed (the random compressors' streams).

    Returns:
        ``(applied, residuals)``: the decompressed updates C(Delta_i + e_i), same shapes and dtypes
        as ``deltas``; and a new residual mapping with e_i' = Delta_i + e_i - applied_i for every
        row's client (the others as they were). Without error feedback: C(Delta_i) and
        ``residuals`` unchanged (a new dict). A client twice in one cohort (possible only in
        async) is compressed in row order, each row from the residual the previous one left.
    """
    residuals = dict(residuals or {})
    if len(clients) != len(keys):
        raise ValueError(f"compress_cohort: {len(clients)} clients but {len(keys)} keys")
    c = len(clients)
    if c == 0 or comp.compressor.lossless:
        return dict(deltas), residuals
    rows = flatten(deltas)
    if rows.shape[0] != c:
        raise ValueError(f"compress_cohort: {rows.shape[0]} rows for {c} clients")
    name = comp.name or type(comp.compressor).__name__
    if not comp.error_feedback:
        out = _rows(comp.compressor, rows, clients, keys, seed, name=name)
        return unflatten(out, deltas), residuals
    spans = _spans(deltas)
    passes = _passes(clients)  # one in sync; a client twice (async) is compressed in row order
    out = None if len(passes) == 1 else torch.empty_like(rows)
    for idx in passes:
        u = rows if len(passes) == 1 else rows[idx]  # rows is flatten's copy: ours to write
        for j, i in enumerate(idx):  # u_i = Delta_i + e_i (no residual yet: e_i = 0)
            e = residuals.get(clients[i])
            if e is not None:
                for k, (a, b, _) in spans.items():
                    u[j, a:b] += e[k].reshape(-1).to(device=u.device, dtype=u.dtype)
        applied = _rows(comp.compressor, u, [clients[i] for i in idx], [keys[i] for i in idx], seed, name=name)
        rest = u.sub_(applied)  # e_i' = u_i - C(u_i), in place: u is not needed any more
        for j, i in enumerate(idx):  # each residual its own storage (a view would hold the cohort's)
            residuals[clients[i]] = {k: rest[j, a:b].view(shape).clone() for k, (a, b, shape) in spans.items()}
        if out is None:
            out = applied
        else:
            out[idx] = applied
    return unflatten(out, deltas), residuals


def _spans(deltas: Tensors) -> dict[str, tuple[int, int, tuple[int, ...]]]:
    """Each tensor's columns [a, b) in a flattened row, and its shape without the client dimension."""
    spans, off = {}, 0
    for k, v in deltas.items():
        shape = tuple(v.shape[1:])
        size = math.prod(shape)
        spans[k] = (off, off + size, shape)
        off += size
    return spans


def _passes(clients: Sequence[int]) -> list[list[int]]:
    """Row indices grouped so that no client is twice in a group, a client's rows in order."""
    seen: dict[int, int] = {}
    groups: list[list[int]] = []
    for row, cl in enumerate(clients):
        n = seen.get(cl, 0)
        seen[cl] = n + 1
        if n == len(groups):
            groups.append([])
        groups[n].append(row)
    return groups


def _rows(compressor: Compressor, rows: torch.Tensor, clients: Sequence[int], keys: Sequence[int], seed: int,
          purpose: str = UP, *, name: str | None = None,
          gen_keys: Sequence[tuple[int, ...]] | None = None) -> torch.Tensor:
    """``compressor.compress_rows`` on ``rows`` (row i: ``clients[i]``'s job ``keys[i]``), checked:
    whatever it raises (``sys.exit`` included; not KeyboardInterrupt) and a non-finite result where
    the row was finite are a one-line :class:`PartError` naming the compressor (``name``) and its
    link. ``gen_keys``: the random streams' keys (default: ``(client, key)`` per row). A result
    that is ``rows`` itself or a view of it is copied: error feedback subtracts it from ``rows`` in
    place (e' = u - C(u)), which would otherwise zero what the server receives."""
    name = name or type(compressor).__name__
    path = UPLINK if purpose == UP else DOWNLINK
    if gen_keys is None:
        gen_keys = [(int(i), int(k)) for i, k in zip(clients, keys)]
    gens = generators(seed, purpose, gen_keys, rows.device) if compressor.random else None
    try:
        out = compressor.compress_rows(rows, gens)
    except (Exception, SystemExit) as err:  # noqa: BLE001 -- a user's compressor mid-run: one line naming it
        raise PartError(f"{path}: compressor {name!r}: compress_rows failed: {failure(err)}") from err
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(rows.shape) or out.dtype != rows.dtype:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise PartError(f"{path}: compressor {name!r}: compress_rows returned {got} for rows "
                        f"{tuple(rows.shape)} {rows.dtype}")
    if _shares_memory(out, rows):
        out = out.clone()
    _check_finite(rows, out, compressor, name, path, clients, keys)
    return out


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are views of one storage."""
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _check_finite(rows: torch.Tensor, out: torch.Tensor, compressor: Compressor, name: str, path: str,
                  clients: Sequence[int], keys: Sequence[int]) -> None:
    """A :class:`PartError` when a finite row of ``rows`` came out with a NaN (or an infinity,
    unless the compressor ``overflows``): the compressor's fault, not the model diverging. One
    pass when every row sums to a finite number (then every entry is finite)."""
    if bool(out.sum(1).isfinite().all()):
        return
    bad = out.isnan().any(1) if compressor.overflows else ~out.isfinite().all(1)
    if not bool(bad.any()):
        return
    culprits = (bad & rows.isfinite().all(1)).nonzero()
    if len(culprits):
        i = int(culprits[0, 0])
        what = "NaN" if bool(out[i].isnan().any()) else "an infinity"
        whose = (f"the broadcast of model version {int(keys[i])}" if path == DOWNLINK
                 else f"client {int(clients[i])}'s update (job key {int(keys[i])})")
        raise PartError(f"{path}: compressor {name!r}: compress_rows returned {what} for {whose}, which was "
                        "finite; its output must be finite where its input is")


def compress_model(compressor: Compressor, params: Tensors, *, seed: int, version: int,
                   name: str | None = None) -> Tensors:
    """The broadcast of model version ``version``: C(x) of the whole flattened model ``params``
    (unstacked: ``{name: parameter}``), its randomness keyed ``(seed, "compress-down", version)``,
    the same for every client that downloads that version."""
    if compressor.lossless:
        return dict(params)
    stacked = {k: v.unsqueeze(0) for k, v in params.items()}
    out = unflatten(_rows(compressor, flatten(stacked), [-1], [version], seed, DOWN, name=name,
                           gen_keys=[(int(version),)]), stacked)
    return {k: v[0] for k, v in out.items()}


def payload_of(params: Mapping[str, torch.Tensor]) -> tuple[int, int]:
    """(n, b): the entries of one copy of ``params`` and the bytes of one entry (one shared
    floating dtype, as :func:`fedsim.compression.base.flatten` requires)."""
    ts = list(params.values())
    dtypes = {t.dtype for t in ts}
    if not ts or len(dtypes) != 1 or not ts[0].is_floating_point():
        raise ValueError(f"the parameters must share one floating dtype to be compressed, got {sorted(map(str, dtypes))}")
    return int(sum(t.numel() for t in ts)), int(ts[0].element_size())


def upload_bytes(compressor: Compressor, params: Mapping[str, torch.Tensor], *, control_variates: bool = False) -> float:
    """Bytes of one upload: the compressed update, plus the model-sized control-variate change
    uncompressed when the algorithm sends one (``AlgoSpec.uses_control_variates``, as
    :func:`fedsim.devices.cost.upload_bytes`)."""
    n, b = payload_of(params)
    return _declared(compressor, n, b, UPLINK) + (n * b if control_variates else 0)


def download_bytes(compressor: Compressor, params: Mapping[str, torch.Tensor]) -> float:
    """Bytes of one download: the compressed model."""
    n, b = payload_of(params)
    return _declared(compressor, n, b, DOWNLINK)


def _declared(compressor: Compressor, n: int, b: int, path: str, name: str | None = None) -> float:
    """The checked payload as a float, or :class:`ScenarioError` (one line naming ``path``)."""
    try:
        return check_payload(compressor, n, b, path, name or type(compressor).__name__)
    except ValueError as err:
        raise ScenarioError(str(err)) from None


def check_compression(compressor: Compressor, params: Mapping[str, torch.Tensor], path: str = UPLINK,
                      name: str | None = None) -> None:
    """Refuse, with one line naming ``path`` (:class:`ScenarioError`), a compressor that cannot
    serve this model: its payload for the model's (n, b) is not a number of bytes in [0,
    ``MAX_PAYLOAD_BYTES``], or its transform on a probe (two rows of the model's n, dtype and
    device: row 0 standard normal, row 1 64 times another, from a fixed generator) raises (``sys.exit``
    included), writes its input, returns another shape, dtype or device, returns NaN or an
    infinity (an infinity is allowed to a compressor that ``overflows``), or mixes rows: a row
    compressed alone (with its own generator) differs from the same row compressed beside the
    other in more than n // 10,000 entries (2 more for a ``random`` one: a reduction summed in
    another order may move a random rounding's threshold by a last bit) by more than 1e-3 of the
    largest magnitude of either.
    Called when a run is built, before its folder is touched."""
    name = name or type(compressor).__name__
    try:
        n, b = payload_of(params)
    except ValueError as err:
        raise ScenarioError(f"{path}: {err}") from None
    _declared(compressor, n, b, path, name)
    t0 = next(iter(params.values()))
    g = torch.Generator(device=t0.device)
    g.manual_seed(0)
    probe = torch.randn((2, n), generator=g, dtype=t0.dtype, device=t0.device)
    probe[1] *= 64  # a row of another scale: one scale or one top-k shared by the rows shows
    before = probe.clone()
    keys = [(0, 0), (1, 0)]
    out = _probe(compressor, probe, keys, path, name)
    if not torch.equal(probe, before):
        raise ScenarioError(f"{path}: compressor {name!r}: compress_rows wrote into its input")
    if not isinstance(out, torch.Tensor):
        raise ScenarioError(f"{path}: compressor {name!r}: compress_rows returned {type(out).__name__}, not a tensor")
    for what, got, want in (("shape", tuple(out.shape), (2, n)), ("dtype", out.dtype, probe.dtype),
                            ("device", out.device, probe.device)):
        if got != want:
            raise ScenarioError(f"{path}: compressor {name!r}: compress_rows changed the update's {what} "
                                f"({_show(want)} -> {_show(got)})")
    bad = out.isnan() if compressor.overflows else ~out.isfinite()
    if bool(bad.any()):
        what = "NaN" if bool(out.isnan().any()) else "an infinity"
        raise ScenarioError(f"{path}: compressor {name!r}: compress_rows returned {what} for a finite probe update")
    for row in (0, 1):
        alone = _probe(compressor, probe[row : row + 1].clone(), keys[row : row + 1], path, name)
        if not (isinstance(alone, torch.Tensor) and tuple(alone.shape) == (1, n)):
            raise ScenarioError(f"{path}: compressor {name!r}: compress_rows changed the update's shape "
                                f"({_show((1, n))} -> {_show(tuple(getattr(alone, 'shape', ())))})")
        a, c = alone[0].to(torch.float64), out[row].to(torch.float64)
        scale = max(float(a.abs().max()), float(c.abs().max()), float(torch.finfo(probe.dtype).tiny))
        differ = int(((a - c).abs() > 1e-3 * scale).sum()) if bool(a.isfinite().all() and c.isfinite().all()) \
            else int((a != c).sum())
        if differ > n // 10_000 + (2 if compressor.random else 0):  # a random rounding may flip on a last bit
            raise ScenarioError(f"{path}: compressor {name!r}: compress_rows mixes rows: row {row} of a probe "
                                f"compressed alone differs in {differ} of {n} entries from the same row compressed "
                                "beside another; compress each row (one client's update) on its own")


def _probe(compressor: Compressor, rows: torch.Tensor, keys, path: str, name: str):
    """``compress_rows`` on a probe (generators keyed ``keys``), its failure one line naming it."""
    try:
        return compressor.compress_rows(rows, generators(0, UP, keys, rows.device) if compressor.random else None)
    except (Exception, SystemExit) as err:  # noqa: BLE001 -- a user's compressor: one line naming it
        raise ScenarioError(f"{path}: compressor {name!r}: compress_rows failed on a probe update: "
                            f"{failure(err)}") from None


def _show(x) -> str:
    return str(tuple(x)) if isinstance(x, tuple) else str(x)
