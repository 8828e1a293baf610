"""Figures for runs and comparisons (matplotlib, Agg backend: no display needed).

Every ``plot_*`` function takes DataFrames (``load_run`` / ``load_compare`` tables), draws on a new
figure (or on ``ax``) and returns the figure; :func:`save_figure` writes a PNG of exactly
``figsize * dpi`` pixels. :func:`plot_dir` is what ``fedsim plot`` runs: it draws the tables
:mod:`.plot_inputs` reads from run folders (this module reads no file).

Seeds are summarized as a mean line with a +-1 standard-deviation band. Against simulated time,
seeds of a cell may evaluate at different times (e.g. ``wait`` rounds last as long as their
slowest client), so each seed is linearly interpolated onto the union of the cell's evaluation
times, and the mean is drawn over the time range that every seed covers.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Sequence

import matplotlib

# Headless by default (scripts, CLI, tests); leave notebooks (inline backend) and explicit choices alone.
if "matplotlib.pyplot" not in sys.modules and "ipykernel" not in sys.modules and not os.environ.get("MPLBACKEND"):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .plot_inputs import cell_runs, collect, target_times  # noqa: E402
from .summary import time_to_target  # noqa: E402

__all__ = [
    "plot_curves",
    "plot_accuracy",
    "plot_loss",
    "plot_time_to_target",
    "plot_tau_heatmap",
    "plot_client_timeline",
    "plot_class_mix",
    "plot_client_accuracy",
    "save_figure",
    "plot_dir",
    "PHASE_COLORS",
]

FIGSIZE = (8.0, 5.0)
DPI = 100

LABELS = {
    "test_acc": "test accuracy",
    "test_loss": "test loss",
    "train_loss": "training objective sum_i p_i F_i(x)",
    "dist_to_opt": "distance to optimum ||x - x*||",
    "sim_time": "simulated wall-clock time (s)",
    "round": "rounds completed",
    "tau_mean": "mean local steps tau",
}

#: Colours of the client-timeline phases (also used by the heatmap's status overlay).
PHASE_COLORS = {
    "download": "#9ecae1",
    "compute": "#31a354",
    "upload": "#fd8d3c",
    "idle": "#f0f0f0",
    "offline": "#969696",
    "dropped": "#de2d26",
    "failed": "#54278f",
}


def _new(ax, figsize, title=None):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize or FIGSIZE, dpi=DPI, layout="constrained")
    else:
        fig = ax.figure
    if title:
        ax.set_title(title)
    return fig, ax


def save_figure(fig, path: str | Path, dpi: int = DPI) -> Path:
    """Write ``fig`` as PNG (``figsize * dpi`` pixels) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    plt.close(fig)
    return path


def _colors(n: int):
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _legend(ax, n: int) -> None:
    if n == 0:
        return
    if n <= 6:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="x-small")


def _groups(df: pd.DataFrame, by: str):
    if by in df.columns:
        return list(dict.fromkeys(df[by].tolist()))
    return [None]


def _linestyles(df: pd.DataFrame, by: str) -> dict:
    """One line style per algorithm (so identical curves of two algorithms stay visible)."""
    if by not in df.columns or "algorithm" not in df.columns:
        return {}
    algos = list(dict.fromkeys(df["algorithm"].tolist()))
    ls = ["-", "--", ":", "-."]
    first = df.drop_duplicates(by).set_index(by)["algorithm"]
    return {k: ls[algos.index(a) % len(ls)] for k, a in first.items()}


def _seed_curves(g: pd.DataFrame, x: str, y: str) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    seeds = g.groupby("seed", sort=False, dropna=False) if "seed" in g.columns else [(None, g)]
    for _, s in seeds:
        d = s[[x, y]].apply(pd.to_numeric, errors="coerce").dropna().sort_values(x, kind="stable")
        if x == "round":
            d = d.assign(round=d["round"] + 1)
        if len(d):
            out.append((d[x].to_numpy(float), d[y].to_numpy(float)))
    return out


def _mean_band(curves):
    """Union grid over the range every seed covers, per-seed linear interpolation, mean and std.

    Beyond the shortest seed the mean would change which seeds it averages (a jump, not a
    trend), so the curve stops there.
    """
    lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    grid = np.unique(np.concatenate([c[0] for c in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)] if lo <= hi else grid[:0]
    stack = np.full((len(curves), grid.size), np.nan)
    for i, (cx, cy) in enumerate(curves):
        inside = (grid >= cx[0]) & (grid <= cx[-1])
        stack[i, inside] = np.interp(grid[inside], cx, cy)
    return grid, _nanmean(stack), _nanstd(stack)


def _nanmean(a):
    n = np.sum(~np.isnan(a), axis=0)
    s = np.nansum(a, axis=0)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def _nanstd(a):
    n = np.sum(~np.isnan(a), axis=0)
    m = _nanmean(a)
    d = np.where(np.isnan(a), 0.0, a - m)
    var = np.sum(d * d, axis=0) / np.maximum(n - 1, 1)
    return np.where(n > 1, np.sqrt(var), np.nan)


def plot_curves(
    df: pd.DataFrame,
    y: str = "test_acc",
    x: str = "sim_time",
    *,
    by: str = "cell",
    target: float | None = None,
    ax=None,
    title: str | None = None,
    figsize=None,
    colors: dict | None = None,
):
    """``y`` against ``x`` (``sim_time`` or ``round``), one line per ``by`` group, band over seeds.

    Rows without a value of ``y`` (rounds between evaluations) are skipped. A ``target`` draws a
    dashed horizontal line.
    """
    fig, ax = _new(ax, figsize)
    groups = _groups(df, by)
    cols = colors or dict(zip(groups, _colors(len(groups))))
    styles = _linestyles(df, by)
    drawn = 0
    for key in groups:
        g = df if key is None else df[df[by] == key]
        curves = _seed_curves(g, x, y) if y in g.columns and x in g.columns else []
        if not curves:
            continue
        grid, mean, std = _mean_band(curves)
        if grid.size == 0:
            continue
        label = "run" if key is None else str(key)
        if len(curves) > 1:
            label += f" (n={len(curves)})"
        c = cols.get(key)
        ax.plot(grid, mean, color=c, label=label, lw=1.6, ls=styles.get(key, "-"),
                marker="o" if grid.size <= 12 else None, ms=3)
        band = ~np.isnan(std)
        if band.any():
            ax.fill_between(grid, mean - np.where(band, std, 0), mean + np.where(band, std, 0),
                            where=band, color=c, alpha=0.2, lw=0)
        drawn += 1
    if target is not None and not (isinstance(target, float) and math.isnan(target)):
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
        drawn += 1
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.grid(alpha=0.3)
    if title is None:
        title = f"{LABELS.get(y, y).capitalize()} vs {'simulated time' if x == 'sim_time' else 'rounds'}"
        if "seed" in df.columns and df["seed"].nunique() > 1:
            title += " (mean ± 1 std over seeds)"
    ax.set_title(title)
    if drawn == 0:
        ax.text(0.5, 0.5, f"no {y} values", ha="center", va="center", transform=ax.transAxes)
    _legend(ax, drawn)
    return fig


def plot_accuracy(df: pd.DataFrame, x: str = "sim_time", **kw):
    """Test accuracy vs ``x`` (``sim_time`` or ``round``), mean and band over seeds."""
    return plot_curves(df, "test_acc", x, **kw)


def _loss_column(df: pd.DataFrame) -> str:
    for c in ("test_loss", "train_loss"):
        if c in df.columns and pd.to_numeric(df[c], errors="coerce").notna().any():
            return c
    return "test_loss"


def plot_loss(df: pd.DataFrame, x: str = "sim_time", **kw):
    """Test loss (training objective when there is no test split) vs ``x``, band over seeds."""
    return plot_curves(df, _loss_column(df), x, **kw)


def plot_time_to_target(
    runs: pd.DataFrame,
    target: float | None = None,
    *,
    by: str = "cell",
    metric: str = "test_acc",
    ax=None,
    title: str | None = None,
    figsize=None,
    colors: dict | None = None,
):
    """Horizontal bars: simulated time until ``metric`` first reaches ``target``, per ``by`` group.

    ``runs`` is either a per-run table with a ``time_to_target`` column (``runs.csv``) or a long
    rounds table (``load_compare``), from which the times are computed with ``target``. Bars show
    the mean over the seeds that reached the target (+-1 std whisker), dots the single seeds, and
    ``k/n`` how many seeds reached it; groups where none did are marked "not reached".
    """
    fig, ax = _new(ax, figsize)
    if "round" in runs.columns and "sim_time" in runs.columns:  # a rounds table: compute the times
        if target is None:
            raise ValueError("plot_time_to_target: a target is needed to compute times from rounds")
        rows = []
        for key, g in runs.groupby([by, "seed"] if "seed" in runs.columns else [by], sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            rows.append({by: key[0], "seed": key[1] if len(key) > 1 else 0,
                         "time_to_target": time_to_target(g.sort_values("round"), target, metric=metric)})
        runs = pd.DataFrame(rows)
    if target is None and "target" in runs.columns and runs["target"].notna().any():
        target = float(runs["target"].dropna().iloc[0])
    groups = _groups(runs, by)
    cols = colors or dict(zip(groups, _colors(len(groups))))
    ypos = np.arange(len(groups))[::-1]
    tmax = pd.to_numeric(runs["time_to_target"], errors="coerce").max()
    tmax = 1.0 if not np.isfinite(tmax) or tmax <= 0 else tmax
    for yi, key in zip(ypos, groups):
        t = pd.to_numeric(runs[runs[by] == key]["time_to_target"], errors="coerce").to_numpy(float)
        reached = t[~np.isnan(t)]
        if reached.size:
            mu = reached.mean()
            sd = reached.std(ddof=1) if reached.size > 1 else 0.0
            ax.barh(yi, mu, color=cols.get(key), alpha=0.85, xerr=sd if reached.size > 1 else None, capsize=3)
            ax.plot(reached, np.full(reached.size, yi), "k.", ms=4)
            right = max(mu + sd, reached.max())
            ax.text(right + 0.01 * tmax, yi, f" {mu:.1f}s  ({reached.size}/{t.size})", va="center", fontsize="small")
        else:
            ax.text(0.01 * tmax, yi, f"not reached (0/{t.size})", va="center", fontsize="small", color="0.3")
    ax.set_yticks(ypos, [str(g) for g in groups])
    ax.set_ylim(-0.6, len(groups) - 0.4)
    ax.set_xlim(0, tmax * 1.3)
    what = "test accuracy" if metric == "test_acc" else metric
    ax.set_xlabel(f"simulated time to reach {what} {target:g} (s)" if target is not None else "simulated time to target (s)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or "Time to target (bar: mean ± 1 std over seeds that reached it; dots: seeds)")
    return fig


def _status_rgba(status: str):
    return matplotlib.colors.to_rgba(PHASE_COLORS[status])


def plot_tau_heatmap(
    clients: pd.DataFrame,
    *,
    ax=None,
    title: str | None = None,
    figsize=None,
    max_rounds: int | None = 200,
):
    """Heatmap of tau_i (local steps done) per client (rows) and round (columns).

    Clients that were not selected are blank; ``offline``, ``dropped`` and ``failed`` cells are
    painted in their status colour so stragglers and outages stand out.
    """
    fig, ax = _new(ax, figsize)
    c = clients.copy()
    if max_rounds is not None and len(c):
        first = sorted(c["round"].unique())[:max_rounds]
        c = c[c["round"].isin(first)]
    if c.empty:
        ax.text(0.5, 0.5, "no client rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title or "Local steps tau_i per client and round")
        return fig
    rounds = np.sort(c["round"].unique())
    ids = np.sort(c["client"].unique())
    ri = {r: k for k, r in enumerate(rounds)}
    ci = {q: k for k, q in enumerate(ids)}
    tau = np.full((ids.size, rounds.size), np.nan)
    overlay = np.zeros((ids.size, rounds.size, 4))
    statuses = set()
    for r, q, st, steps in zip(c["round"], c["client"], c["status"], pd.to_numeric(c["steps"], errors="coerce")):
        i, j = ci[q], ri[r]
        if st == "completed":
            tau[i, j] = steps
        else:
            overlay[i, j] = _status_rgba(st) if st in PHASE_COLORS else (0, 0, 0, 1)
            statuses.add(st)
    extent = (rounds[0] - 0.5, rounds[-1] + 0.5, ids[-1] + 0.5, ids[0] - 0.5)
    finite = tau[np.isfinite(tau)]
    vmax = finite.max() if finite.size else 1.0
    im = ax.imshow(np.ma.masked_invalid(tau), aspect="auto", interpolation="nearest", cmap="viridis",
                   vmin=0, vmax=max(vmax, 1.0), extent=extent)
    ax.imshow(overlay, aspect="auto", interpolation="nearest", extent=extent)
    fig.colorbar(im, ax=ax, label="tau_i (local steps done)")
    ax.set_xlabel("round")
    ax.set_ylabel("client")
    ax.set_title(title or "Local steps tau_i per client and round")
    handles = [Patch(color=PHASE_COLORS[s], label=s) for s in ("offline", "dropped", "failed") if s in statuses]
    handles.append(Patch(facecolor="white", edgecolor="0.5", label="not selected"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.1), ncol=len(handles), fontsize="small",
              frameon=False)
    return fig


def _round_spans(rounds: pd.DataFrame | None, clients: pd.DataFrame) -> dict:
    spans = {}
    if rounds is not None and len(rounds) and "sim_time" in rounds.columns:
        r = rounds.sort_values("round")
        prev = 0.0
        for k, t in zip(r["round"], pd.to_numeric(r["sim_time"], errors="coerce")):
            spans[int(k)] = (prev, float(t))
            prev = float(t)
    for k, g in clients.groupby("round"):
        if int(k) not in spans:
            s = pd.to_numeric(g["start"], errors="coerce").min()
            e = pd.to_numeric(g["end"], errors="coerce").max()
            spans[int(k)] = (float(s) if s == s else 0.0, float(e) if e == e else 0.0)
    return spans


def plot_client_timeline(
    clients: pd.DataFrame,
    rounds: pd.DataFrame | None = None,
    *,
    latency: float = 0.0,
    first_rounds: int = 3,
    max_clients: int | None = 40,
    ax=None,
    title: str | None = None,
    figsize=None,
):
    """Gantt chart of the first rounds: what every client does at each simulated second.

    A completed job is drawn as download ``[start, start+L]``, compute ``[start+L, end-L]`` and
    upload ``[end-L, end]`` (``L = latency``, the scenario's ``system.latency``), then idle until the
    round closes. ``offline`` clients are grey for the whole round, ``dropped`` ones red from their
    start to their end (or to the round's close), ``failed`` ones purple until they went offline.
    Round boundaries (from ``rounds.csv``) are dotted lines. Stragglers are the long green bars.
    Asynchronous runs (jobs that start before the update that reports them) show the jobs of the
    first server updates, without idle bars: a client not in flight is simply free.
    """
    fig, ax = _new(ax, figsize)
    shown = sorted(clients["round"].unique())[:first_rounds] if len(clients) else []
    c = clients[clients["round"].isin(shown)]
    if max_clients is not None and len(c):
        keep = sorted(c["client"].unique())[:max_clients]
        c = c[c["client"].isin(keep)]
    spans = {k: v for k, v in _round_spans(rounds, c).items() if k in set(int(r) for r in shown)} if len(c) else {}
    L = float(latency or 0.0)
    # asynchronous runs: jobs span server updates and a free client simply is not in flight
    sync = all(s0 >= spans.get(int(r), (s0, s0))[0] - 1e-9
               for r, s0 in zip(c["round"], pd.to_numeric(c["start"], errors="coerce")) if s0 == s0)
    bars: dict[str, list[tuple[float, float, int]]] = {k: [] for k in PHASE_COLORS}
    for r, q, st, s, e in zip(c["round"], c["client"], c["status"],
                              pd.to_numeric(c["start"], errors="coerce"), pd.to_numeric(c["end"], errors="coerce")):
        open_, close = spans.get(int(r), (s, e))
        if st == "offline" or (s != s):
            bars["offline" if st == "offline" else st if st in bars else "dropped"].append((open_, close, q))
            continue
        if e != e:
            e = close
        if st == "completed":
            d_end = min(s + L, e)
            u_start = max(e - L, d_end)
            if sync and s > open_:
                bars["idle"].append((open_, s, q))
            bars["download"].append((s, d_end, q))
            bars["compute"].append((d_end, u_start, q))
            bars["upload"].append((u_start, e, q))
            if sync and close > e:
                bars["idle"].append((e, close, q))
        elif st == "failed":
            d_end = min(s + L, e)
            bars["download"].append((s, d_end, q))
            bars["failed"].append((d_end, e, q))
            if sync and close > e:
                bars["offline"].append((e, close, q))
        else:  # dropped (or an unknown status)
            end = e if e > s else close
            bars["dropped"].append((s, end, q))
            if sync and close > end:
                bars["idle"].append((end, close, q))
    for phase, items in bars.items():
        items = [(a, b, q) for a, b, q in items if b > a]
        if not items:
            continue
        ys = np.array([q for _, _, q in items], dtype=float)
        ax.barh(ys, [b - a for a, b, _ in items], left=[a for a, _, _ in items], height=0.8,
                color=PHASE_COLORS[phase], edgecolor="none", label=phase,
                hatch="//" if phase in ("dropped", "failed") else None)
    for r, (a, b) in sorted(spans.items()):
        ax.axvline(b, color="k", ls=":", lw=0.8)
    if spans:
        ax.axvline(0.0 if not spans else min(a for a, _ in spans.values()), color="k", ls=":", lw=0.8)
    ax.set_xlabel(LABELS["sim_time"])
    ax.set_ylabel("client")
    ax.invert_yaxis()
    if len(c):
        ids = sorted(c["client"].unique())
        if len(ids) <= 40:
            ax.set_yticks(ids)
            ax.tick_params(axis="y", labelsize="x-small" if len(ids) > 20 else "small")
    n = len(spans)
    unit = "round" if sync else "server update"
    ax.set_title(title or f"Client timeline, first {n} {unit}{'s' if n != 1 else ''} (latency {L:g}s per transfer)")
    handles = [Patch(color=PHASE_COLORS[p], label=p) for p in PHASE_COLORS if any(b > a for a, b, _ in bars[p])]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    return fig


def plot_class_mix(
    partition: pd.DataFrame,
    *,
    normalize: bool = False,
    max_clients: int | None = 100,
    ax=None,
    title: str | None = None,
    figsize=None,
):
    """Stacked bars of each client's training samples per class (from ``partition.csv``).

    ``normalize=True`` shows fractions instead of counts (the bar lengths then no longer show
    how much data each client has).
    """
    fig, ax = _new(ax, figsize)
    if partition.empty:
        ax.text(0.5, 0.5, "no partition", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title or "Class mix per client")
        return fig
    tab = partition.pivot_table(index="client", columns="class", values="count", aggfunc="sum", fill_value=0)
    if max_clients is not None:
        tab = tab.iloc[:max_clients]
    if normalize:
        tab = tab.div(tab.sum(axis=1).replace(0, 1), axis=0)
    classes = list(tab.columns)
    cmap = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
    left = np.zeros(len(tab))
    for k, cl in enumerate(classes):
        vals = tab[cl].to_numpy(float)
        ax.barh(tab.index.to_numpy(), vals, left=left, height=0.85, color=cmap(k % cmap.N), label=str(cl))
        left += vals
    ax.invert_yaxis()
    ax.set_xlabel("fraction of the client's samples" if normalize else "training samples")
    ax.set_ylabel("client")
    if len(classes) <= 20:
        ax.legend(title="class", loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    ax.set_title(title or f"Class mix per client ({len(tab)} clients, {len(classes)} classes)")
    return fig


def plot_client_accuracy(df: pd.DataFrame, *, colors: dict | None = None, figsize=(11, 4)):
    """``client_evals.csv`` of several cells (``load_compare(path, "client_evals")``), mean over
    seeds at each time: left, the accuracy of the average client (solid) and of the worst 10 %
    (dashed); right, the slowest device tier's mean accuracy (solid) and the fastest tier's
    (dotted). x: simulated seconds."""
    fig, (left, right) = plt.subplots(1, 2, figsize=figsize, dpi=DPI, layout="constrained")
    cells = _groups(df, "cell")
    colors = colors or dict(zip(cells, _colors(len(cells))))
    tiers = sorted({g for g in df["group"].unique() if str(g).startswith("tier")}, key=lambda g: int(str(g)[4:]))
    for cell in cells:
        g = df if cell is None else df[df["cell"] == cell]
        c = colors.get(cell)
        for group, col, ax, ls, label in (("all", "acc_mean", left, "-", f"{cell}: mean"),
                                          ("all", "acc_worst10", left, "--", f"{cell}: worst 10%")):
            m = g[g["group"] == group].groupby("sim_time")[col].mean()
            ax.plot(m.index, m.values, ls, color=c, label=label)
        if tiers:
            for tier, ls in ((tiers[0], "-"), (tiers[-1], ":")):
                m = g[g["group"] == tier].groupby("sim_time")["acc_mean"].mean()
                right.plot(m.index, m.values, ls, color=c, label=f"{cell}: {tier}")
    left.set_title("Accuracy on the clients' own test data")
    right.set_title("Slowest (tier0, solid) and fastest tier (dotted)")
    for ax in (left, right):
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("accuracy")
        _legend(ax, 2 * len(cells))
    return fig


# --------------------------------------------------------------------------- fedsim plot
def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "run"


def plot_dir(
    paths: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    target: float | None = None,
    first_rounds: int = 3,
    dpi: int = DPI,
    per_cell: bool = True,
) -> list[Path]:
    """Write every figure for the runs under ``paths`` into ``out``; returns the PNG paths.

    Curves (``acc_vs_time``, ``acc_vs_round``, ``loss_vs_time``, ``loss_vs_round``, and
    ``dist_vs_time`` for quadratic runs) compare all cells; against time, a run with a time grid
    (``evals.csv``) is drawn from it, and its time to target is the first grid time reaching it; ``time_to_target`` needs a target
    (given, or recorded by ``fedsim compare``); ``client_accuracy`` when runs have
    ``client_evals.csv`` (:func:`plot_client_accuracy`). For each cell's first seed: ``tau_<cell>``,
    ``timeline_<cell>`` and, when the data is partitioned, ``classes_<cell>`` (written once when
    every cell shares the same partition).

    Raises:
        FileNotFoundError: no run with a rounds table under ``paths``.
        ScenarioError: a run's ``scenario.yaml`` holds no readable ``system.latency`` (the client
            timeline's transfer time; :func:`fedsim.report.plot_inputs.read_latency`).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = Path(out)
    found = collect(list(paths))
    rounds, timed, runs, recorded = found.rounds, found.timed, found.runs, found.target
    if rounds.empty:
        raise FileNotFoundError(f"no runs with a rounds.csv under {', '.join(map(str, paths))}")
    target = target if target is not None else recorded
    cells = list(dict.fromkeys(rounds["cell"].tolist()))
    colors = dict(zip(cells, _colors(len(cells))))
    written: list[Path] = []
    has_acc = "test_acc" in rounds.columns and pd.to_numeric(rounds["test_acc"], errors="coerce").notna().any()
    for x, tag in (("sim_time", "time"), ("round", "round")):
        df = timed if x == "sim_time" else rounds  # against time: the time grids where runs have them
        if has_acc:
            written.append(save_figure(plot_accuracy(df, x, target=target, colors=colors), out / f"acc_vs_{tag}.png", dpi))
        written.append(save_figure(plot_loss(df, x, colors=colors), out / f"loss_vs_{tag}.png", dpi))
    if "dist_to_opt" in rounds.columns and pd.to_numeric(rounds["dist_to_opt"], errors="coerce").notna().any():
        fig = plot_curves(rounds, "dist_to_opt", "sim_time", colors=colors)
        fig.axes[0].set_yscale("log")
        written.append(save_figure(fig, out / "dist_vs_time.png", dpi))
    if has_acc and target is not None:
        written.append(save_figure(plot_time_to_target(target_times(timed, target), target, colors=colors),
                                   out / "time_to_target.png", dpi))
    if found.client_evals is not None and len(found.client_evals):  # eval.per_client
        written.append(save_figure(plot_client_accuracy(found.client_evals, colors=colors),
                                   out / "client_accuracy.png", dpi))
    if not per_cell:
        return written
    partitions: list[tuple[str, pd.DataFrame]] = []
    for run in cell_runs(runs):
        cell, slug = run.cell, _slug(run.cell)
        written.append(save_figure(
            plot_tau_heatmap(run.clients, title=f"Local steps tau_i per client and round: {cell} (seed {run.seed})"),
            out / f"tau_{slug}.png", dpi))
        written.append(save_figure(
            plot_client_timeline(run.clients, run.rounds, latency=run.latency, first_rounds=first_rounds,
                                 title=f"Client timeline, first rounds: {cell} (seed {run.seed}, "
                                       f"latency {run.latency:g}s)"),
            out / f"timeline_{slug}.png", dpi))
        if run.partition is not None:
            partitions.append((cell, run.partition))
    if partitions:
        same = all(p.equals(partitions[0][1]) for _, p in partitions[1:])
        for cell, part in partitions[:1] if same else partitions:
            name = "classes.png" if same else f"classes_{_slug(cell)}.png"
            written.append(save_figure(plot_class_mix(part), out / name, dpi))
    return written
