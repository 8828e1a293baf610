"""Every figure: a non-empty PNG of the expected pixel size, from hand-written and tiny real runs."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest

import fedsim
from fedsim import report
from fedsim.cli import main
from fedsim.report import plots

from _fake_runs import write_compare, write_run

W, H = 800, 500  # FIGSIZE (8, 5) at 100 dpi


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_png(path, size=(W, H)):
    assert path.is_file() and path.stat().st_size > 5000, f"{path} missing or nearly empty"
    assert png_size(path) == size
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.shape[:2] == (size[1], size[0])
    rgba = np.ascontiguousarray((img * 255).astype(np.uint8)[..., :3])
    colours = np.unique(rgba.reshape(-1, 3) @ np.array([1, 256, 65536]))
    assert colours.size > 20, "figure looks blank"


@pytest.fixture(scope="module")
def fake_cmp(tmp_path_factory):
    return write_compare(tmp_path_factory.mktemp("fake") / "cmp")


@pytest.mark.parametrize("x", ["sim_time", "round"])
def test_curves(tmp_path, fake_cmp, x):
    df = fedsim.load_compare(fake_cmp)
    for fn in (report.plot_accuracy, report.plot_loss):
        fig = fn(df, x, target=0.6) if fn is report.plot_accuracy else fn(df, x)
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None
        assert_png(report.save_figure(fig, tmp_path / f"{fn.__name__}_{x}.png"))


def test_mean_band_over_seeds_with_different_times():
    # two seeds evaluated at different times: union grid, interpolated, mean where both have data
    df = pd.DataFrame({"cell": "a", "seed": [0, 0, 0, 1, 1], "round": [0, 1, 2, 0, 1],
                       "sim_time": [1.0, 3.0, 5.0, 2.0, 4.0], "test_acc": [0.0, 1.0, 1.0, 0.0, 1.0]})
    fig = plots.plot_accuracy(df)
    line = fig.axes[0].lines[0]
    np.testing.assert_allclose(line.get_xdata(), [2, 3, 4])
    np.testing.assert_allclose(line.get_ydata(), [0.25, 0.75, 1.0])
    plots.plt.close(fig)


def test_time_to_target_bars(tmp_path, fake_cmp):
    df = fedsim.load_compare(fake_cmp)
    assert_png(report.save_figure(report.plot_time_to_target(df, 0.6), tmp_path / "ttt.png"))
    # from a per-run table, with a cell that never reaches the target
    runs = pd.DataFrame({"cell": ["a", "a", "b"], "seed": [0, 1, 0], "time_to_target": [10.0, 14.0, np.nan]})
    fig = report.plot_time_to_target(runs, 0.8)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("not reached" in t for t in texts) and any("2/2" in t for t in texts)
    assert_png(report.save_figure(fig, tmp_path / "ttt2.png"))


def test_tau_heatmap_timeline_class_mix(tmp_path, fake_cmp):
    folder = fake_cmp / "fedavg-window" / "seed0"
    run = fedsim.load_run(folder)
    fig = report.plot_tau_heatmap(run.clients)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"offline", "dropped", "failed"} <= set(labels)
    assert_png(report.save_figure(fig, tmp_path / "tau.png"))
    fig = report.plot_client_timeline(run.clients, run.rounds, latency=0.5, first_rounds=3)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"download", "compute", "upload", "idle", "offline", "dropped"} <= set(labels)
    assert "failed" not in labels  # the failure is in round 3, after the first three rounds
    assert_png(report.save_figure(fig, tmp_path / "timeline.png"))
    part = pd.read_csv(folder / "partition.csv")
    assert_png(report.save_figure(report.plot_class_mix(part), tmp_path / "classes.png"))
    assert_png(report.save_figure(report.plot_class_mix(part, normalize=True), tmp_path / "classes_n.png"))


def test_timeline_phases_match_latency(fake_cmp):
    run = fedsim.load_run(fake_cmp / "fedavg-window" / "seed0")
    fig = report.plot_client_timeline(run.clients, run.rounds, latency=0.5, first_rounds=1)
    ax = fig.axes[0]
    by_label = {c.get_label(): c for c in ax.containers}
    # client 0 (speed 8, 72 steps) in round 0: download [0, 0.5], compute [0.5, 9.5], upload [9.5, 10]
    rects = {lab: [(r.get_x(), r.get_x() + r.get_width()) for r in by_label[lab] if round(r.get_y() + r.get_height() / 2) == 0]
             for lab in ("download", "compute", "upload")}
    assert rects["download"] == [(0.0, 0.5)] and rects["compute"] == [(0.5, 9.5)] and rects["upload"] == [(9.5, 10.0)]
    plots.plt.close(fig)


def test_timeline_async_jobs_span_updates():
    # jobs that started before the update reporting them: asynchronous, so no idle bars
    clients = pd.DataFrame({"round": [0, 0, 1], "client": [0, 1, 2], "status": ["completed"] * 3,
                            "steps": [5, 5, 5], "start": [0.0, 0.0, 0.5], "end": [3.0, 4.0, 6.0]})
    rounds = pd.DataFrame({"round": [0, 1], "sim_time": [4.0, 6.0]})
    fig = report.plot_client_timeline(clients, rounds, latency=0.5)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "idle" not in labels and "server updates" in fig.axes[0].get_title()
    plots.plt.close(fig)


def test_custom_size_and_dpi(tmp_path, fake_cmp):
    df = fedsim.load_compare(fake_cmp)
    fig = report.plot_accuracy(df, figsize=(4, 3))
    assert png_size(report.save_figure(fig, tmp_path / "small.png", dpi=50)) == (200, 150)


def test_plot_dir_and_cli(tmp_path, fake_cmp, capsys):
    out = tmp_path / "figs"
    assert main(["plot", str(fake_cmp), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted([
        "acc_vs_time.png", "acc_vs_round.png", "loss_vs_time.png", "loss_vs_round.png", "time_to_target.png",
        "tau_fedavg-window.png", "tau_fednova-window.png", "timeline_fedavg-window.png",
        "timeline_fednova-window.png", "classes.png",
    ])
    for p in out.glob("*.png"):
        assert_png(p)
    assert len(capsys.readouterr().out.splitlines()) == len(names)
    # several folders at once: a single run and a folder of runs; labels say where they come from
    solo = write_run(tmp_path / "solo", seed=3, partition=False)
    files = plots.plot_dir([solo, fake_cmp], tmp_path / "figs2", target=0.5)
    assert any(f.name.startswith("tau_solo") for f in files) and any(f.name == "time_to_target.png" for f in files)
    assert main(["plot", str(tmp_path / "nothing-here")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2


def test_plot_reads_each_timeline_latency_or_refuses_the_folder(tmp_path, capsys):
    """The timeline's latency comes from the run's scenario.yaml; an unreadable or missing one is
    one line naming the file (exit 2), never a silent latency 0 (issue 30)."""
    from fedsim.report.plot_inputs import read_latency

    run = write_run(tmp_path / "run", latency=0.75)
    assert read_latency(run) == 0.75
    files = plots.plot_dir(run, tmp_path / "figs")
    assert any(f.name.startswith("timeline_") for f in files)
    for text in ("system: {latency: .nan}\n", "system: {}\n", "system: {latency: -1}\n", "[unclosed\n"):
        (run / "scenario.yaml").write_text(text)
        assert main(["plot", str(run), "--out", str(tmp_path / "f2")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(run / "scenario.yaml") in err, err
    (run / "scenario.yaml").unlink()
    assert main(["plot", str(run), "--out", str(tmp_path / "f3")]) == 2
    assert "scenario.yaml" in capsys.readouterr().err


def _has_clock():
    try:
        from fedsim.clock import Clock  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_clock(), reason="fedsim.clock not available yet")
def test_plots_from_a_tiny_real_comparison(tmp_path):
    from fedsim.compare import run_compare

    base = {
        "name": "tiny_digits", "seed": 0, "rounds": 2,
        "data": {"name": "digits", "clients": 6, "partition": {"name": "dirichlet", "alpha": 0.5}},
        "model": {"name": "logreg"},
        "system": {"speed": {"dist": "lognormal", "median": 4.0, "sigma": 0.7}, "latency": 0.25,
                   "availability": {"model": "markov", "mean_online": 20.0, "mean_offline": 5.0}},
        "round": {"policy": "window", "window": 3.0, "deadline": 3.0, "local_steps": 5, "max_local_steps": 20},
        "algorithm": {"name": "fednova", "lr": 0.05, "batch_size": 16},
    }
    res = run_compare(base, out=tmp_path / "cmp", algorithms=["fedavg", "fednova"],
                      policies=["window", "deadline"], target=0.2)
    assert len(res.ran) == 4 and not res.failed
    # the hand-written runs have a real run's columns (tests/_fake_runs.py derives them from the records)
    fake = write_run(tmp_path / "fake")
    real = tmp_path / "cmp" / "fedavg-window" / "seed0"
    for table in ("rounds.csv", "clients.csv"):
        assert list(pd.read_csv(fake / table).columns) == list(pd.read_csv(real / table).columns), table
    files = plots.plot_dir(tmp_path / "cmp", tmp_path / "figs")
    assert {"acc_vs_time.png", "time_to_target.png", "classes.png", "timeline_fednova-window.png"} <= {f.name for f in files}
    for f in files:
        assert_png(f)
