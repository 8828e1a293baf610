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
