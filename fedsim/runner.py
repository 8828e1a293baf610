"""Run one scenario into a run folder (the public contract of DESIGN.md)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .checkpoint import _fault, load_checkpoint, save_checkpoint
from .engine import distributed
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
    for name in ("rounds.csv", "clients.csv", "model.pt", "partition.csv", "info.yaml", "checkpoint.pt"):
        (out / name).unlink(missing_ok=True)
    _atomic_write_bytes(existing, text.encode())


def write_partition(path: Path, counts) -> None:
    rows = ["client,class,count\n"]
    for i, row in enumerate(counts):
        rows.extend(f"{i},{c},{int(n)}\n" for c, n in enumerate(row) if n)
    _atomic_write_bytes(path, "".join(rows).encode())


def _truncate(path: Path, size: int) -> None:
    if path.exists():
        with open(path, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())


def _check_resumable(sc: Scenario, out: Path) -> None:
    stored = out / "scenario.yaml"
    if not stored.exists():
        raise ScenarioError(f"--resume {out}: no run there (no scenario.yaml)")
    if stored.read_text() != dump_scenario(sc):
        raise ScenarioError(f"--resume {out}: holds a different scenario's run")


def run(
    sc: Scenario, out: Path | None = None, *, force: bool = False, progress: bool = True, resume: bool = False
) -> RunSummary:
    """Run ``sc`` into ``out`` (default ``runs/<name>``); returns the final summary.

    With ``resume`` the run continues from the folder's last checkpoint (or from the start when
    there is none); rows written after that checkpoint are cut back first.
    """
    out = Path(out) if out is not None else default_out(sc)
    main = distributed.is_main()  # under torchrun only rank 0 touches the run folder

    def open_folder():
        if not resume:
            return prepare_folder(sc, out, force=force)
        _check_resumable(sc, out)
        ck = load_checkpoint(out)
        sizes = ck["table_sizes"] if ck else {"rounds.csv": 0, "clients.csv": 0}
        for name, size in sizes.items():
            _truncate(out / name, size)
        return ck

    ck = distributed.agree(open_folder)
    sim, _ = build_simulation(sc)
    start = 0
    if ck is not None:
        sim.load_state(ck["sim"])
        start = int(ck["next_round"])
    if main and sim.work.class_counts is not None:
        write_partition(out / "partition.csv", sim.work.class_counts)
    cols = QUADRATIC_COLUMNS if sim.work.is_quadratic else ROUND_COLUMNS
    rounds_w = TableWriter(out / "rounds.csv", cols) if main else _NoWriter()
    clients_w = TableWriter(out / "clients.csv", CLIENT_COLUMNS) if main else _NoWriter()
    every = sc.checkpoint.every

    def on_round(sim, plan) -> None:
        _fault(f"round:{plan.round}")
        nxt = plan.round + 1
        if main and every and nxt % every == 0 and nxt < sc.rounds:
            rounds_w.sync()  # the rows a checkpoint refers to are on disk before it is
            clients_w.sync()
            sizes = {n: (out / n).stat().st_size for n in ("rounds.csv", "clients.csv")}
            save_checkpoint(out, {"next_round": nxt, "table_sizes": sizes, "sim": sim.state_dict()})

    if main:
        _atomic_write_bytes(out / "info.yaml", _info(sc, sim).encode())
    try:
        show = progress_printer(sc.name, sc.rounds) if progress and main else None
        simulate(sc, (rounds_w, clients_w), progress=show, sim=sim, start_round=start, on_round=on_round)
    finally:
        rounds_w.close()
        clients_w.close()
    if main:
        save_model(out / "model.pt", sim.params, sim.work.is_quadratic)
    return distributed.agree(lambda: summarize(out, data=sim.work.name))


class _NoWriter:
    """The run-folder writers of ranks other than 0 (they write nothing)."""

    def write(self, rows) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


def _info(sc: Scenario, sim) -> str:
    """``info.yaml``: what actually ran (dataset, e.g. ``cifar10-standin``; model size; device)."""
    import yaml

    from . import __version__

    work = sim.work
    info = {
        "data": work.name,
        "standin": work.name.endswith("-standin"),
        "model": sc.model_name,
        "parameters": int(sum(v.numel() for v in work.init_params.values())),
        "clients": work.num_clients,
        "train_samples": int(work.x_train.shape[0]),
        "test_samples": 0 if work.x_test is None else int(work.x_test.shape[0]),
        "device": str(work.x_train.device),
        "dtype": str(work.x_train.dtype).replace("torch.", ""),
        "clients_per_batch": sim.chunk,
        "fedsim": __version__,
        "torch": str(torch.__version__),
    }
    return yaml.safe_dump(info, sort_keys=False)


def summarize(out: Path, data: str = "") -> RunSummary:
    """Final numbers of a run folder, read back from ``rounds.csv``."""
    import pandas as pd

    rounds = pd.read_csv(Path(out) / "rounds.csv")
    if rounds.empty:
        nan = float("nan")
        return RunSummary(0, 0.0, nan, nan, nan, False, data=data)
    last = rounds.iloc[-1]
    get = lambda col: float(last[col]) if col in rounds and pd.notna(last[col]) else float("nan")  # noqa: E731
    return RunSummary(
        rounds=int(last["round"]) + 1,
        sim_time=float(last["sim_time"]),
        test_acc=get("test_acc"),
        test_loss=get("test_loss"),
        train_loss=get("train_loss"),
        diverged=bool(rounds["diverged"].max() > 0) if "diverged" in rounds else False,
        dist_to_opt=get("dist_to_opt") if "dist_to_opt" in rounds else None,
        data=data,
    )
