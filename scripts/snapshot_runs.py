"""Short runs of every scenario in scenarios/, hashed: the before/after check of a refactoring.

    python scripts/snapshot_runs.py OUT.json          # run and record sha256 of every table
    python scripts/snapshot_runs.py OUT.json --diff BEFORE.json
    python scripts/snapshot_runs.py OUT.json --diff BEFORE.json --drop available,download,upload

Each scenario (every variant) runs 3 rounds (paper scenarios shrunk to their tiny stand-ins as in
tests/test_paper_scenarios.py) with one thread, into a temporary folder; the hashes cover
rounds.csv, clients.csv, partition.csv and model.pt's tensors. A restructuring that changes no
output leaves every hash equal. ``--drop COLS`` hashes the tables without those columns (columns
added on purpose since BEFORE), so the rest can still be compared byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["rounds=3", "engine.threads=1"]
TINY = ["data.standin=true", "data.n_train=200", "eval.train_loss=false", "round.local_steps=1", "data.n_test=8",
        "algorithm.batch_size=2"]  # fmt: skip
SHRINK = {
    "fednova_table1": TINY + ["data.clients=2", "round.local_epochs=null"],
    "fedlada": TINY + ["data.clients=3", "round.clients_per_round=1"],
}


#: Scenarios meant to run with --schedule-only (their header says so: training them on CPU is out
#: of any budget): snapshotted as schedules.
SCHEDULE_ONLY = {"devices_vgg11"}


def overrides(path: Path) -> list[str]:
    for prefix, extra in SHRINK.items():
        if path.name.startswith(prefix):
            return COMMON + extra
    return COMMON


def tensor_digest(path: Path) -> str:
    import torch

    obj = torch.load(path, weights_only=True)
    items = [("x", obj)] if isinstance(obj, torch.Tensor) else sorted(obj.items())
    h = hashlib.sha256()
    for k, v in items:
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def table_bytes(path: Path, drop: set[str]) -> bytes:
    """The table's bytes, without the columns in ``drop`` (fedsim's CSV cells hold no commas)."""
    data = path.read_bytes()
    if not drop:
        return data
    lines = data.decode().split("\n")
    keep = [i for i, c in enumerate(lines[0].split(",")) if c not in drop]
    return "\n".join(",".join(line.split(",")[i] for i in keep) if line else line for line in lines).encode()


def snapshot(drop: set[str] = frozenset()) -> dict[str, str]:
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sc in sorted((ROOT / "scenarios").glob("*.yaml")):
            folder = Path(tmp) / sc.stem
            cmd = [sys.executable, "-m", "fedsim", "run", str(sc), "--out", str(folder), "--quiet"]
            if sc.stem in SCHEDULE_ONLY:
                cmd.append("--schedule-only")
            for o in overrides(sc):
                cmd += ["--set", o]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if r.returncode != 0:
                out[f"{sc.stem}/ERROR"] = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else str(r.returncode)
                continue
            for f in sorted(folder.rglob("*")):
                rel = f"{sc.stem}/{f.relative_to(folder)}"
                if f.name in ("rounds.csv", "clients.csv", "partition.csv"):
                    out[rel] = hashlib.sha256(table_bytes(f, drop)).hexdigest()
                elif f.name == "model.pt":
                    out[rel] = tensor_digest(f)
    return out


def main() -> int:
    dest = Path(sys.argv[1])
    drop = set(sys.argv[sys.argv.index("--drop") + 1].split(",")) if "--drop" in sys.argv else set()
    snap = snapshot(drop)
    dest.write_text(json.dumps(snap, indent=1, sort_keys=True))
    if "--diff" in sys.argv:
        before = json.loads(Path(sys.argv[sys.argv.index("--diff") + 1]).read_text())
        keys = sorted(set(before) | set(snap))
        bad = [k for k in keys if before.get(k) != snap.get(k)]
        for k in bad:
            print(f"differs: {k}")
        print(f"{len(keys) - len(bad)} equal, {len(bad)} differ")
        return 1 if bad else 0
    print(f"{len(snap)} hashes -> {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
