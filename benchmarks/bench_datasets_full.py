"""The field's datasets at full size (issue 27 items 2 and 3): generated files of the published
shape, the time and memory to a first round, what ``fedsim validate`` opens, and the LEAF FEMNIST
baseline's client-steps/s beside plain torch's per-step time for the same model.

1. ``generate DIR [--scale 1.0]`` writes, at ``--scale`` 1 (pixels and text are random; only the
   shapes are the publishers'):

   - ``DIR/femnist``: LEAF FEMNIST after ``preprocess.sh -s niid --sf 1.0 -k 0 -t sample``:
     3,550 writers, about 805,000 images (sizes lognormal, mean 227), 100 writers a file as
     LEAF's ``all_data_<k>.json`` (36 files a folder), 90/10 train/test per writer, LEAF's number
     format (``json.dumps`` of pixel/255: background ``1.0``, 20% ink) -- about 5 GB of JSON;
   - ``DIR/shakespeare``: LEAF Shakespeare: 1,129 roles, about 4.2 million 80-character windows
     (sliding over each role's text, the next character as ``y``), ``-t sample`` split;
   - ``DIR/fedscale_femnist``: FedScale's FEMNIST mapping, 2,800 clients and about 640,000 rows in
     ``client_data_mapping/train.csv`` (10% more in ``test.csv``), naming 128 x 128 grey PNGs
     under ``data/raw_data/by_write/...`` (NIST's size); ``--images`` distinct files (default
     10,000) are shared by the rows, cycling.

2. ``first-round DIR [--dataset femnist|shakespeare|fedscale] [--eval-clients N]``: in a fresh
   interpreter, ``fedsim run`` of the LEAF (or FedScale) baseline scenario with 10 clients a
   round: wall time from the interpreter's start to the first row of ``rounds.csv`` (the first
   round done), and the peak RSS then (VmHWM). Also ``fedsim validate`` of the same scenario in
   another interpreter, with a Python audit hook counting the files it opens under ``DIR``.
   Goal (issue 27): FEMNIST within 30 s and 1.5 GB; validate opens no data file. ``--start-only``
   stops the run as round 1 starts (the round's own training is then not measured). The scenario
   sets ``eval.train_loss: false`` (the start then reads the evaluation sample's test parts only);
   ``--train-loss`` measures fedsim's default, which also holds the sample's training data.

3. ``speed DIR [--rounds 5]``: the LEAF FEMNIST baseline (``leaf_cnn``, 10 clients a round, one
   epoch, batch 10, FedAvg lr 0.004, no evaluation after round 0) for ``--rounds`` rounds after
   the first: client-steps/s (the steps in clients.csv over the rounds' wall time, data reading
   included), beside plain torch's own step (forward, cross-entropy, backward, SGD) on batches of
   10 for the same model and threads; the ratio is what matters.

    python benchmarks/bench_datasets_full.py generate /data/full [--scale 1.0]
    python benchmarks/bench_datasets_full.py first-round /data/full [--dataset femnist] [--train-loss] [--no-save]
    python benchmarks/bench_datasets_full.py speed /data/full [--rounds 5] [--no-save]
    python benchmarks/bench_datasets_full.py decode /data/full [--writers 100] [--images 10000] [--no-save]

4. ``decode DIR``: reading's two hot loops the old way and fedsim's way, alternately in one process
   on the same bytes (values checked equal first): LEAF user values by ``json.loads`` vs msgspec
   with json.loads's fallback, and FedScale's grey PNGs converted to RGB then resized vs resized as
   one band then repeated. ``--images`` (default 10,000) is the PNGs decoded.

Results: benchmarks/results/datasets_full_first_round.{csv,md}, datasets_full_speed.{csv,md} and
datasets_full_decode.{csv,md}. Run alone on
an idle machine (the files should be in the page cache, or the first read is the disk's speed).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo on sys.path)
from _common import ROOT, append, machine

import numpy as np

FULL = {"femnist_writers": 3550, "femnist_mean": 227, "shakespeare_roles": 1129, "shakespeare_samples": 4_226_000,
        "fedscale_clients": 2800, "fedscale_rows": 640_000}


# ---------------------------------------------------------------- generators
def _pixels() -> np.ndarray:
    vals = [repr(k / 255.0) for k in range(256)]
    vals[255] = "1.0"
    return np.array(vals, dtype=object)


def write_leaf_femnist(root: Path, writers: int, mean: float, seed: int = 0, per_file: int = 100) -> dict:
    """LEAF's FEMNIST tree (train/ and test/, ``per_file`` writers a file); returns counts and bytes."""
    rng = np.random.default_rng(seed)
    table = _pixels()
    sizes = np.maximum(2, np.round(rng.lognormal(np.log(mean) - 0.125, 0.5, writers))).astype(int)
    total_bytes = images = 0
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
    for f in range(0, writers, per_file):
        users = [f"f{u:04d}_{u % 100:02d}" for u in range(f, min(writers, f + per_file))]
        n = sizes[f:f + len(users)]
        n_train = np.maximum(1, (0.9 * n).astype(int))
        for split, counts in (("train", n_train), ("test", n - n_train)):
            path = root / split / f"all_data_{f // per_file}_niid_0_keep_0_{split}_9.json"
            with open(path, "w") as fh:
                fh.write(f'{{"users": {json.dumps(users)}, "num_samples": {json.dumps(counts.tolist())}, "user_data": {{')
                for j, (u, c) in enumerate(zip(users, counts)):
                    ink = rng.random((c, 784)) < 0.2
                    idx = np.where(ink, rng.integers(0, 255, (c, 784)), 255)
                    x = ", ".join("[" + ", ".join(table[row].tolist()) + "]" for row in idx)
                    y = ", ".join(map(str, rng.integers(0, 62, c).tolist()))
                    fh.write(("" if j == 0 else ", ") + f'"{u}": {{"x": [{x}], "y": [{y}]}}')
                    images += int(c)
                fh.write("}}")
            total_bytes += path.stat().st_size
    return {"writers": writers, "images": images, "bytes": total_bytes}


def write_leaf_shakespeare(root: Path, roles: int, samples: int, seed: int = 0) -> dict:
    """LEAF's Shakespeare (one train and one test file, as LEAF's preprocess writes it)."""
    from fedsim.data.shakespeare import LETTERS

    rng = np.random.default_rng(seed)
    letters = np.array(list(LETTERS))
    sizes = np.maximum(2, np.round(rng.lognormal(np.log(samples / roles) - 0.5, 1.0, roles))).astype(int)
    sizes = np.maximum(2, (sizes * samples / sizes.sum()).astype(int))
    users = [f"PLAY_{r // 40:02d}_ROLE_{r:04d}" for r in range(roles)]
    total_bytes = 0
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
    handles = {s: open(root / s / f"all_data_niid_0_keep_0_{s}_8.json", "w") for s in ("train", "test")}
    n_train = np.maximum(1, (0.8 * sizes).astype(int))
    for s, counts in (("train", n_train), ("test", sizes - n_train)):
        handles[s].write(f'{{"users": {json.dumps(users)}, "num_samples": {json.dumps(counts.tolist())}, "user_data": {{')
    for j, (u, n, a) in enumerate(zip(users, sizes, n_train)):
        text = "".join(letters[rng.integers(0, len(LETTERS), n + 80)].tolist())
        xs = [text[i:i + 80] for i in range(n)]
        ys = [text[i + 80] for i in range(n)]
        for s, sl in (("train", slice(0, a)), ("test", slice(a, n))):
            handles[s].write(("" if j == 0 else ", ") + json.dumps(u) + ": "
                             + json.dumps({"x": xs[sl], "y": ys[sl]}))
    for s, fh in handles.items():
        fh.write("}}")
        fh.close()
        total_bytes += (root / s / f"all_data_niid_0_keep_0_{s}_8.json").stat().st_size
    return {"roles": roles, "samples": int(sizes.sum()), "bytes": total_bytes}


def write_fedscale_femnist(root: Path, clients: int, rows: int, images: int, seed: int = 0) -> dict:
    """FedScale's FEMNIST layout: the mapping CSVs and 128 x 128 grey PNGs (``images`` distinct)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(images):
        w = f"f{i % 4000:04d}_{i % 100:02d}"
        rel = f"data/raw_data/by_write/hsf_{i % 8}/{w}/{w}_{i:06d}.png"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        img = np.full((128, 128), 255, np.uint8)
        ink = rng.random((128, 128)) < 0.15
        img[ink] = rng.integers(0, 255, int(ink.sum()))
        buf = io.BytesIO()
        Image.fromarray(img, mode="L").save(buf, format="PNG")
        (root / rel).write_bytes(buf.getvalue())
        paths.append(rel)
    sizes = np.maximum(1, np.round(rng.lognormal(np.log(rows / clients) - 0.125, 0.5, clients))).astype(int)
    (root / "client_data_mapping").mkdir(parents=True, exist_ok=True)
    k = 0
    for name, scale in (("train.csv", 1.0), ("test.csv", 0.1)):
        with open(root / "client_data_mapping" / name, "w") as fh:
            fh.write("client_id,sample_path,label_name,label_id\n")
            for c, n in enumerate(sizes):
                for _ in range(max(1, int(n * scale))):
                    label = int(rng.integers(0, 62))
                    fh.write(f"{c},{paths[k % len(paths)]},{label},{label}\n")
                    k += 1
    return {"clients": clients, "rows": int(sizes.sum()), "images": images}


def generate(out: Path, scale: float, images: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    info = write_leaf_femnist(out / "femnist", max(2, round(FULL["femnist_writers"] * scale)), FULL["femnist_mean"])
    print(f"femnist: {info} in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    info = write_leaf_shakespeare(out / "shakespeare", max(2, round(FULL["shakespeare_roles"] * scale)),
                                  max(100, round(FULL["shakespeare_samples"] * scale)))
    print(f"shakespeare: {info} in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    info = write_fedscale_femnist(out / "fedscale_femnist", max(2, round(FULL["fedscale_clients"] * scale)),
                                  max(10, round(FULL["fedscale_rows"] * scale)), max(1, min(images, round(images * scale) or 1)))
    print(f"fedscale_femnist: {info} in {time.perf_counter() - t:.0f} s", flush=True)


# ---------------------------------------------------------------- scenarios
def scenario(dataset: str, root: Path, rounds: int, eval_clients: int | None, eval_every: int,
             train_loss: bool = False) -> dict:
    """The baseline: LEAF's FEMNIST/Shakespeare settings (10 clients a round, 1 epoch, batch 10),
    or FedScale's FEMNIST (10 clients, 5 local steps, batch 20)."""
    data = {"femnist": "femnist", "shakespeare": "shakespeare", "fedscale": "femnist_fedscale"}[dataset]
    folder = {"femnist": "femnist", "shakespeare": "shakespeare", "fedscale": "fedscale_femnist"}[dataset]
    sc = {"name": f"full_{dataset}", "seed": 0, "rounds": rounds,
          "data": {"name": data, "root": str(root / folder)},
          "model": {"name": "char_lstm" if dataset == "shakespeare" else "leaf_cnn"},
          "system": {"speed": 5.0, "latency": 0.5},
          "round": {"policy": "wait", "clients_per_round": 10},
          "algorithm": {"name": "fedavg", "lr": 0.8 if dataset == "shakespeare" else 0.004, "batch_size": 10},
          "eval": {"every": eval_every, "train_loss": train_loss}}
    if dataset == "fedscale":
        sc["round"]["local_steps"] = 5
        sc["algorithm"].update(lr=0.05, batch_size=20)
    else:
        sc["round"]["local_epochs"] = 1
    if eval_clients is not None:
        sc["eval"]["clients"] = eval_clients
    return sc


_CHILD = r'''
import json, os, sys, threading, time
t0 = time.perf_counter()
out, scen, what = sys.argv[1], sys.argv[2], sys.argv[3]
def vmhwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
marks = []
def watch():
    seen = 0
    path = os.path.join(out, "rounds.csv")
    while True:
        try:
            with open(path) as fh:
                rows = sum(1 for _ in fh) - 1
        except OSError:
            rows = 0
        while rows > seen:
            seen += 1
            marks.append((seen, time.perf_counter() - t0, vmhwm()))
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
started = []
if what == "run":  # the loop's entry: everything before round 1 is built
    import fedsim.runner.loop as loop
    inner = loop.run_rounds
    def run_rounds(*a, **k):
        started.append((time.perf_counter() - t0, vmhwm()))
        if os.environ.get("FEDSIM_BENCH_START_ONLY") == "1":  # --start-only: stop as round 1 starts
            print(json.dumps({"rc": 0, "end_s": started[0][0], "peak_mib": started[0][1], "marks": [],
                              "started": started, "opened": None}), flush=True)
            os._exit(0)
        return inner(*a, **k)
    loop.run_rounds = run_rounds
if what == "validate":
    root = sys.argv[4]
    opened = []
    sys.addaudithook(lambda e, a: opened.append(str(a[0])) if e == "open" and str(a[0]).startswith(root) else None)
from fedsim.cli import main
args = ["validate", scen] if what == "validate" else ["run", scen, "--out", out, "--quiet", "--force"]
rc = main(args)
end = time.perf_counter() - t0
time.sleep(0.1)
print(json.dumps({"rc": rc, "end_s": end, "peak_mib": vmhwm(), "marks": marks, "started": started,
                  "opened": len(opened) if what == "validate" else None}))
'''


def _child(what: str, sc: dict, root: Path, start_only: bool = False) -> dict:
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump(sc))
        out = Path(tmp) / "run"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDSIM_BENCH_START_ONLY": "1" if start_only else "0"}
        r = subprocess.run([sys.executable, "-c", _CHILD, str(out), str(path), what, str(root)], env=env,
                           capture_output=True, text=True, timeout=7200)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        if what == "run" and (out / "info.yaml").exists():
            res["info"] = yaml.safe_load((out / "info.yaml").read_text())
        if what == "run" and (out / "clients.csv").exists():
            import pandas as pd

            res["steps"] = {str(k): int(v) for k, v in
                            pd.read_csv(out / "clients.csv").groupby("round")["steps"].sum().items()}
        return res


def first_round(root: Path, dataset: str, eval_clients: int | None, save: bool, start_only: bool = False,
                train_loss: bool = False) -> dict:
    sc = scenario(dataset, root, 1, eval_clients, 1000, train_loss)
    v = _child("validate", sc, root)
    r = _child("run", sc, root, start_only)
    first = r["marks"][0] if r["marks"] else (None, None, None)
    start = r["started"][0] if r["started"] else (None, None)
    row = dict(what="first_round", dataset=dataset, eval_clients=eval_clients if eval_clients is not None else "default",
               train_loss=train_loss,
               round1_starts_s=round(start[0], 1) if start[0] else "", peak_mib_at_start=round(start[1]) if start[1] else "",
               round1_done_s=round(first[1], 1) if first[1] else "", peak_mib_round1=round(first[2]) if first[2] else "",
               round1_client_steps=r.get("steps", {}).get("0", ""),
               validate_s=round(v["end_s"], 1), validate_opened_data_files=v["opened"], validate_rc=v["rc"], **machine())
    print(f"{dataset}: round 1 starts at {row['round1_starts_s']} s (peak {row['peak_mib_at_start']} MiB), done at "
          f"{row['round1_done_s']} s (peak {row['peak_mib_round1']} MiB, {row['round1_client_steps']} client-steps); "
          f"validate {row['validate_s']} s, opened {row['validate_opened_data_files']} files under {root}", flush=True)
    if save:
        append("datasets_full_first_round", [row],
               "Full-size datasets: time and peak memory to the first round; files fedsim validate opens")
    return row


# ---------------------------------------------------------------- speed
_TORCH = r'''
import json, sys, time
import fedsim  # its OpenMP settings, as in the run
import torch
import torch.nn.functional as F
from fedsim.models.leaf import leaf_cnn
batch, steps, threads = (int(v) for v in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = leaf_cnn((1, 28, 28), 62)
opt = torch.optim.SGD(model.parameters(), lr=0.004)
x, y = torch.rand(batch, 1, 28, 28), torch.randint(0, 62, (batch,))
for i in range(steps + 20):
    if i == 20:
        t = time.perf_counter()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
print(json.dumps({"step_s": (time.perf_counter() - t) / steps, "threads": torch.get_num_threads()}))
'''


def torch_step_time(threads: int, batch: int = 10, steps: int = 200) -> tuple[float, int]:
    """Seconds per SGD step of LEAF's CNN on batches of ``batch`` 1x28x28 images: plain torch
    (forward, cross-entropy, backward, ``torch.optim.SGD``), in a fresh interpreter with the run's
    threads."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _TORCH, str(batch), str(steps), str(threads)], env=env,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return res["step_s"], res["threads"]


def speed(root: Path, rounds: int, save: bool) -> dict:
    sc = scenario("femnist", root, 1 + rounds, 10, 10**6)
    r = _child("run", sc, root)
    marks = {m[0]: m[1] for m in r["marks"]}
    steps = sum(v for k, v in r["steps"].items() if int(k) >= 1)  # rounds are numbered from 0
    wall = marks[1 + rounds] - marks[1]
    run_threads = int(r.get("info", {}).get("threads", {}).get("threads") or 1)
    per_step, threads = torch_step_time(run_threads)
    row = dict(what="speed", dataset="femnist", rounds=rounds, client_steps=steps, wall_s=round(wall, 2),
               client_steps_s=round(steps / wall, 1), torch_step_ms=round(per_step * 1e3, 2),
               torch_steps_s=round(1 / per_step, 1), ratio=round(steps / wall * per_step, 3), torch_threads=threads,
               **machine())
    print(f"femnist baseline: {row['client_steps_s']} client-steps/s over {rounds} rounds ({steps} steps); "
          f"plain torch {row['torch_steps_s']} steps/s ({row['torch_step_ms']} ms/step, {threads} threads): "
          f"ratio {row['ratio']}", flush=True)
    if save:
        append("datasets_full_speed", [row], "Full-size LEAF FEMNIST baseline: client-steps/s beside plain torch's step")
    return row


# ---------------------------------------------------------------- decode
def decode(root: Path, writers: int, images: int, save: bool) -> dict:
    """Reading's two hot loops, old way and fedsim's way alternately in one process on the same
    bytes: LEAF user values (``json.loads``, LEAF's reader, vs ``formats.leaf._loads``: msgspec,
    json.loads where msgspec refuses) and FedScale's grey PNGs (Pillow's convert("RGB") then
    resize, FedScale's transform, vs ``decode_image``: the one band resized, then repeated)."""
    from PIL import Image

    from fedsim.data.formats.images import FEDSCALE_MNIST, decode_image
    from fedsim.data.formats.leaf import _loads, index_folder

    index = index_folder(root / "femnist" / "train")
    raws = []
    for i in np.linspace(0, len(index.users) - 1, writers).astype(int):
        f, a, b = (int(v) for v in index.spans[i])
        with open(index.files[f], "rb") as fh:
            fh.seek(a)
            raws.append(fh.read(b - a))
    pngs = [p.read_bytes() for p in sorted((root / "fedscale_femnist" / "data").rglob("*.png"))[:images]]

    def old_image(data):
        img = Image.open(io.BytesIO(data)).convert("RGB").resize((32, 32), Image.BILINEAR)
        return (np.asarray(img, dtype=np.float32) / 255.0).transpose(2, 0, 1)

    cases = {"leaf_json": (lambda: [json.loads(r) for r in raws], lambda: [_loads(r) for r in raws]),
             "fedscale_png": (lambda: [old_image(d) for d in pngs], lambda: [decode_image(d, "x", "y", FEDSCALE_MNIST) for d in pngs])}
    rows = []
    for name, (old, new) in cases.items():
        assert all(np.array_equal(np.asarray(a["x"] if isinstance(a, dict) else a), np.asarray(b["x"] if isinstance(b, dict) else b))
                   for a, b in zip(old(), new()))  # the same values before timing
        best = {"old": float("inf"), "new": float("inf")}
        for _ in range(3):  # alternately, the best of three each
            for which, fn in (("old", old), ("new", new)):
                t = time.perf_counter()
                fn()
                best[which] = min(best[which], time.perf_counter() - t)
        n = len(raws) if name == "leaf_json" else len(pngs)
        rows.append(dict(what="decode", case=name, items=n, old_s=round(best["old"], 3), new_s=round(best["new"], 3),
                         speedup=round(best["old"] / best["new"], 2), **machine()))
        print(f"{name}: {n} items, old {best['old']:.3f} s, fedsim {best['new']:.3f} s: {best['old'] / best['new']:.2f}x", flush=True)
    if save:
        append("datasets_full_decode", rows, "Reading's hot loops: the old way and fedsim's, alternately in one process")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("generate", "first-round", "speed", "decode"))
    ap.add_argument("--writers", type=int, default=100, help="decode: LEAF writers read")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--dataset", choices=("femnist", "shakespeare", "fedscale"), default="femnist")
    ap.add_argument("--eval-clients", type=int, default=None)
    ap.add_argument("--start-only", action="store_true",
                    help="first-round: stop when round 1 starts (its training is not timed: Shakespeare's "
                         "char_lstm epoch over a role takes minutes on a CPU)")
    ap.add_argument("--train-loss", action="store_true",
                    help="first-round: eval.train_loss true (fedsim's default): the training objective over the "
                         "evaluation sample's training data at every evaluation, round 0's included")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    if a.what == "generate":
        generate(a.dir, a.scale, a.images)
    elif a.what == "first-round":
        first_round(a.dir.resolve(), a.dataset, a.eval_clients, not a.no_save, a.start_only, a.train_loss)
    elif a.what == "decode":
        decode(a.dir.resolve(), a.writers, a.images, not a.no_save)
    else:
        speed(a.dir.resolve(), a.rounds, not a.no_save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
