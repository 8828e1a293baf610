"""Accuracy of a trained run's final model on the devices it never heard from (issue 19 point 5).

    python analysis/devices_study/unheard.py RUN_FOLDER [RUN_FOLDER ...]

Three groups of devices: *heard* (at least one job completed), *selected, never heard* (selected
at least once, every job dropped or failed: in windows, the slow uplinks) and *never selected*.
For each run folder (``scenario.yaml``, ``clients.csv``, ``model.pt``) prints the counts and the
final model's accuracy and loss on the training data of each group (every client's rows, pooled),
so a model that never saw a group's data can be seen to fit it worse. With the study's IID data the two should agree up to noise; with
non-IID data correlated with the uplink (the slow devices are the unheard ones) they need not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedsim.engine.workload import build_workload  # noqa: E402
from fedsim.scenario import load_scenario  # noqa: E402


def group_metrics(work, params, clients) -> tuple[float, float, int]:
    """(accuracy, mean loss, samples) of ``params`` on the pooled training rows of ``clients``."""
    held = work.for_clients(list(clients))
    rows = [torch.as_tensor(held.client_indices[c]) for c in clients]  # a list or a {client: rows} mapping
    idx = torch.cat(rows) if rows else torch.empty(0, dtype=torch.long)
    if not len(idx):
        return float("nan"), float("nan"), 0
    with torch.no_grad():
        logits = held.predict(params, held.x_train[idx])
        y = held.y_train[idx]
        return float((logits.argmax(1) == y).double().mean()), float(F.cross_entropy(logits, y)), int(len(idx))


def main(folders: list[str]) -> None:
    rows = []
    for f in map(Path, folders):
        sc = load_scenario(f / "scenario.yaml")
        work = build_workload(sc, torch.device("cpu"), torch.float32)
        params = torch.load(f / "model.pt", map_location="cpu", weights_only=True)
        cl = pd.read_csv(f / "clients.csv")
        heard = set(cl.loc[cl.status == "completed", "client"].tolist())
        asked = set(cl.loc[cl.status != "offline", "client"].tolist())
        lost = sorted(asked - heard)  # selected at least once, never reported (dropped or failed)
        never = [c for c in range(work.num_clients) if c not in asked]
        for name, group in (("heard", sorted(heard)), ("selected, never heard", lost), ("never selected", never)):
            acc, loss, n = group_metrics(work, params, group)
            rows.append({"run": str(f), "group": name, "devices": len(group), "samples": n, "acc": acc, "loss": loss})
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1:])
