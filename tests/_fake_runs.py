"""Hand-written run folders (no clock, no torch) for report, compare and plot tests."""

from __future__ import annotations

from pathlib import Path

from dataclasses import astuple

import pandas as pd
import yaml

from fedsim.records import ClientRecord, RoundRecord, client_columns, columns

# the columns a classification run writes: the records' fields (dist_to_opt only for quadratic data)
ROUND_COLS = columns(RoundRecord, omit=("dist_to_opt",))
CLIENT_COLS = client_columns()  # a run without the levers' columns (resumed, cut)


def write_run(folder: Path, *, seed: int = 0, algorithm: str = "fedavg", policy: str = "window",
              rounds: int = 4, window: float = 10.0, latency: float = 0.5, speed_bias: float = 0.0,
              partition: bool = True) -> Path:
    """A plausible 4-client run: client 3 is a straggler, client 2 is offline in round 1."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(yaml.safe_dump({
        "name": "fake", "seed": seed, "rounds": rounds,
        "system": {"latency": latency}, "round": {"policy": policy, "window": window},
        "algorithm": {"name": algorithm},
    }))
    rows, crow = [], []
    speeds = [8.0, 6.0, 4.0, 1.0]
    lat = float(latency)
    for r in range(rounds):
        t0, t1 = r * window, (r + 1) * window
        taus = []
        for c, s in enumerate(speeds):
            if r == 1 and c == 2:
                crow.append(ClientRecord(r, c, "offline", 0, 0.0, t0, t0, r, 0, 0.0))
                continue
            if r == 2 and c == 3:
                crow.append(ClientRecord(r, c, "dropped", 0, 0.0, t0, t1, r, 0, 0.0, download=lat))
                continue
            if r == 3 and c == 1:
                crow.append(ClientRecord(r, c, "failed", 0, 0.0, t0, t0 + 4.0, r, 0, 0.0, download=lat))
                continue
            tau = int((window - 2 * latency) * s) - (3 if c == 1 else 0)  # client 1 idles at the end
            taus.append(tau)
            end = t0 + 2 * latency + tau / s
            crow.append(ClientRecord(r, c, "completed", tau, float(tau), t0, end, r, 0, 0.25, download=lat, upload=lat))
        acc = min(0.95, 0.3 + 0.15 * r + speed_bias + 0.01 * seed)
        rows.append(RoundRecord(r, t1, len(taus), sum(taus) / len(taus), min(taus), max(taus),
                                train_loss=2.0 / (r + 1), test_loss=2.1 / (r + 1), test_acc=acc, lr=0.05,
                                available=3 if r == 1 else 4))
    pd.DataFrame([[getattr(x, k) for k in ROUND_COLS] for x in rows], columns=ROUND_COLS).to_csv(
        folder / "rounds.csv", index=False)
    pd.DataFrame([[getattr(x, c) for c in CLIENT_COLS] for x in crow], columns=CLIENT_COLS).to_csv(folder / "clients.csv", index=False)
    (folder / "model.pt").write_bytes(b"fake")
    if partition:
        part = [[c, k, 5 + 3 * ((c + k) % 3)] for c in range(4) for k in range(3) if (c + k) % 4]
        pd.DataFrame(part, columns=["client", "class", "count"]).to_csv(folder / "partition.csv", index=False)
    return folder


def write_compare(out: Path, cells=(("fedavg", "window", 0.0), ("fednova", "window", 0.1)), seeds=(0, 1),
                  target: float | None = 0.6) -> Path:
    """A comparison folder as ``fedsim compare`` writes it, with fake runs."""
    out = Path(out)
    runs = []
    for algo, pol, bias in cells:
        cell = f"{algo}-{pol}"
        for s in seeds:
            write_run(out / cell / f"seed{s}", seed=s, algorithm=algo, policy=pol, speed_bias=bias)
            runs.append({"cell": cell, "seed": s, "folder": f"{cell}/seed{s}",
                         "keys": {"algorithm": algo, "policy": pol}})
    (out / "compare.yaml").write_text(yaml.safe_dump(
        {"scenario": None, "target": target, "keys": ["algorithm", "policy"], "runs": runs}, sort_keys=False))
    return out
