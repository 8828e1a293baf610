"""Run one scenario into a run folder (the public contract of DESIGN.md)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .engine.run import RunSummary, build_simulation, progress_printer, simulate
from .report.tables import CLIENT_COLUMNS, QUADRATIC_COLUMNS, ROUND_COLUMNS, TableWriter
from .scenario import Scenario, ScenarioError, dump_scenario

__all__ = ["run", "default_out"]


def default_out(sc: Scenario) -> Path:
    return Path("runs") / sc.name


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_model(path: Path, params: dict, quadratic: bool) -> None:
    """``model.pt``: the state_dict (quadratic: the point x as one tensor), written atomically."""
    import io

    buf = io.BytesIO()
    obj = params["x"].detach().cpu().clone() if quadratic else {k: v.detach().cpu().clone() for k, v in params.items()}
    torch.save(obj, buf)
    _atomic_write_bytes(path, buf.getvalue())


def prepare_folder(sc: Scenario, out: Path, *, force: bool) -> None:
    """Create ``out``; refuse (exit 2) to overwrite another run unless ``force``."""
    out.mkdir(parents=True, exist_ok=True)
    text = dump_scenario(sc)
    existing = out / "scenario.yaml"
    if existing.exists() and (out / "rounds.csv").exists() and not force:
        if existing.read_text() != text:
            raise ScenarioError(f"--out {out}: holds a different scenario's run; use --force to replace it")
        raise ScenarioError(f"--out {out}: already holds this scenario's run; use --resume to continue or --force")
    for name in ("rounds.csv", "clients.csv", "model.pt", "partition.csv"):
        (out / name).unlink(missing_ok=True)
    _atomic_write_bytes(existing, text.encode())


def write_partition(path: Path, counts) -> None:
    rows = ["client,class,count\n"]
    for i, row in enumerate(counts):
        rows.extend(f"{i},{c},{int(n)}\n" for c, n in enumerate(row) if n)
    _atomic_write_bytes(path, "".join(rows).encode())


def run(sc: Scenario, out: Path | None = None, *, force: bool = False, progress: bool = True) -> RunSummary:
    """Run ``sc`` into ``out`` (default ``runs/<name>``); returns the final summary."""
    out = Path(out) if out is not None else default_out(sc)
    prepare_folder(sc, out, force=force)
    sim, _ = build_simulation(sc)
    if sim.work.class_counts is not None:
        write_partition(out / "partition.csv", sim.work.class_counts)
    cols = QUADRATIC_COLUMNS if sim.work.is_quadratic else ROUND_COLUMNS
    rounds_w = TableWriter(out / "rounds.csv", cols)
    clients_w = TableWriter(out / "clients.csv", CLIENT_COLUMNS)
    try:
        show = progress_printer(sc.name, sc.rounds) if progress else None
        summary = simulate(sc, (rounds_w, clients_w), progress=show, sim=sim)
    finally:
        rounds_w.close()
        clients_w.close()
    save_model(out / "model.pt", sim.params, sim.work.is_quadratic)
    return summary
