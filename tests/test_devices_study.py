"""analysis/devices_study.ipynb runs top to bottom on its stored results (FEDSIM_NB_SMALL=1).

The notebook reads analysis/devices_study/{curves,jobs,population}.csv, draws its figure, and
reruns 3 windows of scenarios/devices_vgg11.yaml with --schedule-only, asserting they equal the
stored jobs.csv rows (so the stored schedule is what the clock gives today).
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ANALYSIS = Path(__file__).resolve().parents[1] / "analysis"


def test_devices_study_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSIM_NB_SMALL", "1")
    monkeypatch.setenv("FEDSIM_NB_OUT", str(tmp_path))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(ANALYSIS / "devices_study.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(ANALYSIS)}})
    client.execute()  # raises CellExecutionError, with the failing cell, on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the notebook drew no figure"
    assert (tmp_path / "devices_study_check" / "window" / "clients.csv").is_file()


def test_stated_three_seed_accuracies_are_the_stored_grid_summary():
    """docs/devices.md and the README state the study's accuracies at equal time (issue 19 point
    5); they are grid_summary.csv's (written by analysis/devices_study/run_seeds.sh)."""
    import pandas as pd

    root = ANALYSIS.parent
    s = pd.read_csv(ANALYSIS / "devices_study" / "grid_summary.csv")
    devices, readme = (root / "docs" / "devices.md").read_text(), (root / "README.md").read_text()
    for scenario, t in (("devices_mlp", 840), ("devices_mlp_slownet", 2280)):
        g = s[s.scenario == scenario]
        assert g.sim_time.max() == t and (g[g.sim_time == t].seeds == 3).all()
        for variant in ("fednova-window", "fedavg-wait", "fedbuff-async"):
            row = g[(g.sim_time == t) & (g.variant == variant)].iloc[0]
            assert f"{row.test_acc_mean:.3f} ± {row.test_acc_std:.3f}" in devices, (scenario, variant)
            if scenario == "devices_mlp_slownet":
                assert f"{row.test_acc_mean:.2f} ± {row.test_acc_std:.2f}" in readme, variant
