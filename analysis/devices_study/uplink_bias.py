"""Non-IID data correlated with uplink speed: what windows lose by never hearing the slow uplinks
(issue 19 point 5).

    python analysis/devices_study/uplink_bias.py [--seeds 0,1,2] [--rounds 45,180] [--out runs/uplink_bias]

The stored table: ``--seeds 0,1,2 --rounds 45,180`` (1.5 to 4 minutes on 2 cores, depending on other load).

Population and clock: ``scenarios/devices_mlp_slownet.yaml`` unchanged (1,000 clients replaying
``population_slownet.csv``, client i = device i), MLP; each seed draws its own data, sampling
and training (``seed=``), the device population stays the same. Only the data change:

* Each client's uplink quartile q (0 = slowest) is the quartile of its device's ``up_kbps``
  among the 1,000 devices (250 clients each).
* Concept shift by uplink: every client has 50 examples x ~ N(0, I_60) and labels
  y = argmax(x W_q + b_q) over 10 classes, with W_q = W_0 + D_q, b_q = b_0 + e_q (all entries
  N(0, 1), drawn from the seed): half of every quartile's labelling rule is shared, half is its
  own. Test set: 2,000 examples per quartile drawn the same way (8,000 in all; the runs' overall
  test accuracy is their mean).

Policies (the scenario's variants, run through ``fedsim.run`` with ``variants=null`` plus the
variant's keys): windows (FedNova, 60 s windows, at most 50 steps, N rounds; the scenario's
N = 45 is 2,700 s; ``--rounds 45,180`` runs two horizons) and waiting (FedAvg, 20 steps, eval
every 2 rounds). Waiting is cut at the last round that closes at or before N x 60 s (found with
``fedsim.schedule``, the same clock), so both final models are the models standing at the same
simulated time: waiting's has no update between its last close and N x 60 s. Both runs also
write ``evals.csv`` on a 60 s grid. Run folders: ``OUT/<N x 60>s/seed<S>/{window,wait}``.

Per policy: the final model's accuracy on the whole test set and on each quartile's, and from
``clients.csv`` the share of each quartile's clients ever selected and ever heard from (at
least one completed job); with several seeds also mean and standard deviation. Writes
``analysis/devices_study/uplink_bias.txt`` and prints it.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import fedsim  # noqa: E402
from fedsim.models import mlp  # noqa: E402

SCENARIO = ROOT / "scenarios" / "devices_mlp_slownet.yaml"
TRACE = ROOT / "analysis" / "devices_study" / "population_slownet.csv"
TABLE = ROOT / "analysis" / "devices_study" / "uplink_bias.txt"
CLIENTS, DIM, CLASSES, PER_CLIENT, TEST_PER_Q = 1000, 60, 10, 50, 2000
WINDOW_ROUNDS, WINDOW_S = 45, 60.0
COMMON = ["variants=null", "eval.every_seconds=60"]
WINDOW = ["algorithm.name=fednova", "round.policy=window"]
WAIT = ["algorithm.name=fedavg", "round.policy=wait", "round.local_steps=20", "eval.every=2"]


def uplink_quartiles() -> np.ndarray:
    """Quartile (0 = slowest uplink) of each fedsim client's device (client i = device i mod N)."""
    tr = pd.read_csv(TRACE, comment="#")
    up = tr.groupby("client")["up_kbps"].first().sort_index()
    dev_q = pd.qcut(up.rank(method="first"), 4, labels=False).to_numpy()
    n = len(up)
    return np.array([dev_q[i % n] for i in range(CLIENTS)]), up.to_numpy()


def make_data(q: np.ndarray, seed: int) -> tuple[fedsim.FederatedData, list]:
    g = np.random.default_rng(seed)
    w0, b0 = g.standard_normal((DIM, CLASSES)), g.standard_normal(CLASSES)
    rules = [(w0 + g.standard_normal((DIM, CLASSES)), b0 + g.standard_normal(CLASSES)) for _ in range(4)]

    def draw(rng, n, k):
        x = rng.standard_normal((n, DIM)).astype(np.float32)
        w, b = rules[k]
        return x, np.argmax(x @ w + b, axis=1).astype(np.int64)

    clients = [draw(g, PER_CLIENT, int(q[i])) for i in range(CLIENTS)]
    tests = [draw(g, TEST_PER_Q, k) for k in range(4)]
    test = (np.concatenate([t[0] for t in tests]), np.concatenate([t[1] for t in tests]))
    fd = fedsim.FederatedData.from_clients(clients, test=test, num_classes=CLASSES, name="uplink-concept-shift")
    return fd, tests


def accuracy(folder: Path, x: np.ndarray, y: np.ndarray) -> float:
    net = mlp((DIM,), CLASSES)
    net.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
    net.eval()
    with torch.no_grad():
        return float((net(torch.as_tensor(x)).argmax(1).numpy() == y).mean())


def run_seed(seed: int, q: np.ndarray, out: Path, windows_rounds: int) -> tuple[pd.DataFrame, pd.DataFrame, dict, int]:
    """One seed: (per-policy row table, 60 s grid of overall test accuracy, run times, waiting rounds)."""
    fd, tests = make_data(q, seed)
    keys_seed = [f"seed={seed}"]
    # waiting's rounds: the last close at or before the windows run's end (same clock, no training)
    end = windows_rounds * WINDOW_S
    sch = fedsim.schedule(SCENARIO, data=fd, overrides=COMMON + keys_seed + WAIT + [f"rounds={windows_rounds}"])
    closes = sch.rounds["sim_time"].to_numpy()
    if closes[-1] <= end:  # every scheduled round fits: the cut is not known (rounds shorter than 60 s)
        raise RuntimeError(f"seed {seed}: {windows_rounds} waiting rounds close by {closes[-1]:.0f} s <= {end:.0f} s")
    wait_rounds = int((closes <= end + 1e-9).sum())
    runs = {"windows": (WINDOW + [f"rounds={windows_rounds}"], out / f"{end:.0f}s" / f"seed{seed}" / "window"),
            "waiting": (WAIT + [f"rounds={wait_rounds}"], out / f"{end:.0f}s" / f"seed{seed}" / "wait")}
    rows, times = [], {}
    for name, (keys, folder) in runs.items():
        s = time.time()
        res = fedsim.run(SCENARIO, data=fd, out=folder, overrides=COMMON + keys_seed + keys, force=True)
        times[name] = time.time() - s
        cl = res.clients
        heard = set(cl.loc[cl.status == "completed", "client"])
        asked = set(cl.loc[cl.status != "offline", "client"])
        row = {"seed": seed, "policy": name, "rounds": len(res.rounds),
               "last close s": float(res.rounds["sim_time"].iloc[-1]), "test acc": accuracy(folder, *fd.test)}
        for k in range(4):
            row[f"acc q{k}"] = accuracy(folder, *tests[k])
        for k in range(4):  # the share of a quartile's most frequent test label: a constant predictor's accuracy
            row[f"majority q{k}"] = float(np.bincount(tests[k][1], minlength=CLASSES).max() / len(tests[k][1]))
        for what, group in (("heard", heard), ("selected", asked)):
            for k in range(4):
                row[f"{what} q{k}"] = float(np.mean([c in group for c in np.flatnonzero(q == k)]))
        rows.append(row)
    grid = pd.DataFrame({name: pd.read_csv(folder / "evals.csv").set_index("sim_time")["test_acc"]
                         for name, (_, folder) in runs.items()}).dropna()
    grid["seed"] = seed
    return pd.DataFrame(rows), grid, times, wait_rounds


def section(seeds: list[int], q: np.ndarray, out: Path, windows_rounds: int, buf: io.StringIO) -> None:
    """Run every seed at one horizon (windows_rounds x 60 s) and write its tables to ``buf``."""
    tables, grids, times = [], [], []
    for seed in seeds:
        df, grid, t, _ = run_seed(seed, q, out, windows_rounds)
        tables.append(df)
        grids.append(grid)
        times.append(t)
    df = pd.concat(tables)
    fmt = lambda v: f"{v:.3f}"  # noqa: E731
    end = windows_rounds * WINDOW_S
    buf.write(f"\n# ===== both models standing at {end:.0f} s: windows {windows_rounds} x 60 s, waiting cut at "
              f"its last close <= {end:.0f} s\n# run times per seed, windows / waiting: "
              + ", ".join(f"{t['windows']:.0f} / {t['waiting']:.0f} s" for t in times) + "\n")
    buf.write("## per seed\n")
    buf.write(df.set_index(["seed", "policy"]).T.to_string(float_format=fmt) + "\n")
    if len(seeds) > 1:
        stats = df.drop(columns="seed").groupby("policy", sort=False).agg(["mean", "std"])
        summary = pd.DataFrame({c: [f"{stats.loc[p, (c, 'mean')]:.3f} +- {stats.loc[p, (c, 'std')]:.3f}"
                                    for p in stats.index] for c in df.columns if c not in ("seed", "policy")},
                               index=stats.index).T
        buf.write(f"## mean +- standard deviation over seeds {','.join(map(str, seeds))}\n")
        buf.write(summary.to_string() + "\n")
    g = pd.concat(grids)
    last = g.groupby("seed").apply(lambda d: d.index.max()).reindex(g.seed).to_numpy()
    g = g[(g.index % 600 == 0) | (g.index == last)]
    buf.write("## overall test accuracy on the 60 s grid (evals.csv), every 600 s and each seed's last common time\n")
    buf.write(g.reset_index().set_index(["seed", "sim_time"]).to_string(float_format=fmt) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    ap.add_argument("--rounds", default=str(WINDOW_ROUNDS),
                    help="windows rounds (horizons of 60 s each), comma-separated, e.g. 45,180")
    ap.add_argument("--out", default=str(ROOT / "runs" / "uplink_bias"))
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    t0 = time.time()
    q, up = uplink_quartiles()
    edges = np.quantile(up, [0.25, 0.5, 0.75])
    buf = io.StringIO()
    for r in (int(x) for x in a.rounds.split(",")):
        section(seeds, q, Path(a.out), r, buf)
    head = io.StringIO()
    head.write(f"# Non-IID data correlated with uplink speed (issue 19 point 5), seeds {a.seeds}\n")
    head.write(f"# Made by: python analysis/devices_study/uplink_bias.py --seeds {a.seeds} --rounds {a.rounds} "
               f"({time.time() - t0:.0f} s wall on 2 cores)\n")
    head.write("# scenarios/devices_mlp_slownet.yaml, its data replaced: clients in uplink quartiles q0 (slowest)\n"
               "# .. q3 of up_kbps (edges %.1f / %.1f / %.1f kbit/s), 50 examples each, x ~ N(0, I_60),\n"
               "# y = argmax(x (W0 + D_q) + b0 + e_q); test 2,000 per quartile. Final models of both policies,\n"
               "# standing at the same simulated time: windows N x 60 s; waiting cut at its last close <= N x 60 s\n"
               "# (no update after it before then). acc: final model on each test set; majority: a constant\n"
               "# predictor's accuracy (the quartile's most frequent test label); heard / selected: share of the\n"
               "# quartile's 250 clients with >= 1 completed / attempted (not offline) job.\n" % tuple(edges))
    TABLE.write_text(head.getvalue() + buf.getvalue())
    print(head.getvalue() + buf.getvalue(), end="")


if __name__ == "__main__":
    main()
