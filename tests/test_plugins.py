"""Plug-ins (issue 17 point 5): an installed package's ``fedsim.plugins`` entry point and
``--plugin MODULE`` register names a scenario file then uses; a scenario file alone imports nothing;
a plug-in that fails, or a name registered twice, is one line, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """name: plug
seed: 0
rounds: 1
data: {name: DATA, clients: 4}
model: {name: MODEL, options: {width: 3}}
system: {speed: 2.0}
round: {policy: window, window: 2.0}
algorithm: {name: fedavg, lr: 0.1}
"""

# An installed package: its module registers a model and a dataset when the entry point loads it.
PACKAGE = '''
import numpy as np
import fedsim


def tiny(input_shape, num_classes, width=2):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), width), nn.ReLU(),
                         nn.Linear(width, num_classes))


def blobs(config, seed):
    from fedsim.data.dataset import from_arrays
    from fedsim.data.partition import PartitionSpec

    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(40, 3)).astype(np.float32), np.arange(40) % 2
    return from_arrays("blobs", x[:32], y[:32], x[32:], y[32:], 2, clients=config.clients,
                       spec=PartitionSpec("iid"), seed=seed)


fedsim.register_model("tiny_plugin", tiny)
fedsim.register_dataset("blobs_plugin", blobs)
'''


def install(site: Path, module: str, source: str, *, entry_point: bool) -> None:
    """Write ``module`` into ``site`` (a folder on PYTHONPATH), with a dist-info declaring it as a
    ``fedsim.plugins`` entry point when ``entry_point`` (what pip writes for an installed wheel)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    if entry_point:
        info = site / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[fedsim.plugins]\n{module} = {module}\n")


def fedsim(cwd: Path, site: Path | None, *args: str) -> subprocess.CompletedProcess:
    path = str(ROOT) + (f":{site}" if site else "")
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def scenario(tmp_path: Path, data="blobs_plugin", model="tiny_plugin") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.replace("DATA", data).replace("MODEL", model))
    return p


def test_an_installed_entry_point_registers_names_a_scenario_uses(tmp_path):
    site = tmp_path / "site"
    install(site, "fedsim_tinyplug", PACKAGE, entry_point=True)
    s = scenario(tmp_path)
    r = fedsim(tmp_path, site, "validate", str(s))
    assert r.returncode == 0, r.stderr
    r = fedsim(tmp_path, site, "run", str(s), "--out", "out", "--quiet")
    assert r.returncode == 0, r.stderr
    info = (tmp_path / "out" / "info.yaml").read_text()
    assert "data: blobs" in info and "model: tiny_plugin" in info
    # 3 features -> width 3 -> 2 classes: (3*3 + 3) + (3*2 + 2) parameters, the option was used
    assert "parameters: 20" in info
    assert len((tmp_path / "out" / "rounds.csv").read_text().splitlines()) == 2


def test_plugin_option_imports_a_module_before_the_scenario_is_read(tmp_path):
    mods = tmp_path / "mods"
    install(mods, "my_pieces", PACKAGE.replace("_plugin", "_local"), entry_point=False)
    s = scenario(tmp_path, "blobs_local", "tiny_local")
    # the scenario file alone imports nothing: without --plugin the names are unknown
    r = fedsim(tmp_path, mods, "validate", str(s))
    assert r.returncode == 2 and r.stderr.startswith("data.name: unknown dataset 'blobs_local'; known: ")
    assert r.stderr.count("\n") == 1
    r = fedsim(tmp_path, mods, "run", str(s), "--out", "out", "--quiet", "--plugin", "my_pieces")
    assert r.returncode == 0, r.stderr
    assert "model: tiny_local" in (tmp_path / "out" / "info.yaml").read_text()


@pytest.mark.parametrize("source,message", [
    (None, "plugin no_such_module: cannot load (ModuleNotFoundError: No module named 'no_such_module')"),
    ("raise RuntimeError('boom')", "plugin broken: cannot load (RuntimeError: boom)"),
    ("import fedsim\nfedsim.register_model('logreg', lambda s, c: None)", "plugin broken: model 'logreg' is already registered by fedsim, not again by plugin module broken "
     "(replace=True replaces it)"),
    # issue 28 item 16: a plug-in that quits, or registers a piece of the wrong kind
    ("import sys\nsys.exit(0)", "plugin broken: called sys.exit(0) while loading"),
    ("import fedsim\nfedsim.register_solver('x', 42)",
     "plugin broken: local solver 'x': expected a fedsim.algorithms.parts.Solver, got int"),
    ("import fedsim\nfedsim.register_algorithm('fast', {'momentum': 5.0})",
     "plugin broken: algorithm 'fast': momentum: Input should be less than 1"),
])
def test_a_failing_plugin_is_one_line_exit_2_nothing_written(tmp_path, source, message):
    mods = tmp_path / "mods"
    name = "no_such_module" if source is None else "broken"
    if source is not None:
        install(mods, name, source, entry_point=False)
    s = tmp_path / "s.yaml"
    s.write_text("name: plug\nrounds: 1\n")
    r = fedsim(tmp_path, mods, "run", str(s), "--out", "out", "--plugin", name)
    assert r.returncode == 2
    assert r.stderr == message + "\n"
    assert not (tmp_path / "out").exists()


def test_a_scenario_naming_a_module_imports_nothing(tmp_path):
    s = tmp_path / "s.yaml"
    s.write_text("name: plug\nmodel: {name: 'os:system'}\ndata: {name: synthetic}\n")
    r = fedsim(tmp_path, None, "validate", str(s))
    assert r.returncode == 2 and r.stderr.startswith("model.name: unknown model 'os:system'; known: char_lstm, cnn, ")


def test_compare_workers_load_the_plugin_too(tmp_path):
    mods = tmp_path / "mods"
    install(mods, "my_pieces", PACKAGE.replace("_plugin", "_local"), entry_point=False)
    s = scenario(tmp_path, "blobs_local", "tiny_local")
    r = fedsim(tmp_path, mods, "compare", str(s), "--algorithms", "fedavg,fednova", "--jobs", "2", "--out", "cmp",
               "--quiet", "--plugin", "my_pieces")
    assert r.returncode == 0, r.stderr
    assert "2 run, 0 already done, 0 failed" in r.stdout


PLANTED = {
    # files an attacker leaves in the folder a user runs fedsim from (issue 28 item 2)
    "torch.py": "open('PLANTED_torch', 'w').write('x')\nraise SystemExit('planted torch imported')\n",
    "evil.py": "import os\nopen(f'PLANTED_ep_{os.getpid()}', 'w').write('x')\n",
    "evil-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 0.1\n",
    "evil-0.1.dist-info/entry_points.txt": "[fedsim.plugins]\nevil = evil\n",
}


def test_the_current_folder_is_never_on_the_import_path(tmp_path):
    """--plugin finds ./NAME.py in the current folder by its file; nothing else there is imported
    or read as an entry point, by the command or its compare workers."""
    for name, text in PLANTED.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "my_pieces.py").write_text(textwrap.dedent(PACKAGE.replace("_plugin", "_local")))
    s = scenario(tmp_path, "blobs_local", "tiny_local")
    r = fedsim(tmp_path, None, "compare", str(s), "--algorithms", "fedavg,fednova", "--jobs", "2", "--out", "cmp",
               "--quiet", "--plugin", "my_pieces")
    assert r.returncode == 0, r.stderr
    assert "2 run, 0 already done, 0 failed" in r.stdout
    assert not list(tmp_path.glob("PLANTED_*"))


def test_a_plugin_package_in_the_current_folder_and_its_submodule(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "pieces.py").write_text(textwrap.dedent(PACKAGE.replace("_plugin", "_pkg")))
    s = scenario(tmp_path, "blobs_pkg", "tiny_pkg")
    r = fedsim(tmp_path, None, "validate", str(s), "--plugin", "mypkg.pieces")
    assert r.returncode == 0, r.stderr


def test_loading_a_plugin_leaves_the_import_path_alone(tmp_path, monkeypatch):
    import fedsim.plugins as plugins
    from fedsim import registries

    (tmp_path / "path_probe_plugin.py").write_text("import fedsim\nfedsim.register_algorithm('path_probe', {})\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    try:
        plugins.load_modules(["path_probe_plugin"])
        assert sys.path == before
        assert registries.ALGORITHMS.registrant("path_probe") == "plugin module path_probe_plugin"
    finally:
        registries.ALGORITHMS.unregister("path_probe")
        sys.modules.pop("path_probe_plugin", None)
        plugins._loaded.discard("plugin path_probe_plugin")
