"""Start-up (issue 13): a command imports only what it needs; `fedsim run` validates before torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "pandas", "pyarrow", "matplotlib", "sklearn", "torchvision", "scipy")

PROBE = """
import contextlib, io, json, os, sys
code, err = None, io.StringIO()
if sys.argv[1:]:
    from fedsim.cli import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(sys.argv[1:])
print(json.dumps({"rc": code, "stderr": err.getvalue(), "modules": sorted(m for m in sys.modules if "." not in m),
                  "omp": os.environ.get("OMP_WAIT_POLICY"), "spin": os.environ.get("GOMP_SPINCOUNT")}))
"""


def probe(*argv: str, cwd: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", "import fedsim\n" + PROBE, *argv], capture_output=True, text=True,
                       cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


BAD = """name: bad
seed: 0
rounds: 1
data: {name: synthetic, clients: 10}
model: {name: logreg}
system: {speed: -1.0}
round: {policy: window, window: 5.0}
algorithm: {name: fedavg, lr: 0.1}
"""


def test_import_fedsim_is_light_and_sets_the_thread_environment(tmp_path):
    p = probe(cwd=tmp_path)
    assert not set(HEAVY + ("pydantic", "numpy")) & set(p["modules"])
    assert p["omp"] is None and p["spin"] == "10000"  # short spinning, then sleep (docs/performance.md)


@pytest.mark.parametrize("command", ["run", "validate"])
def test_invalid_scenario_fails_before_torch(tmp_path, command):
    (tmp_path / "bad.yaml").write_text(BAD)
    p = probe(command, "bad.yaml", cwd=tmp_path)
    assert p["rc"] == 2
    assert p["stderr"].startswith("system.speed: ") and p["stderr"].count("\n") == 1  # one line
    assert not set(HEAVY) & set(p["modules"])
    assert not (tmp_path / "runs").exists()  # nothing written


def test_validate_imports_neither_torch_nor_pandas(tmp_path):
    p = probe("validate", str(ROOT / "scenarios" / "quickstart.yaml"), cwd=tmp_path)
    assert p["rc"] == 0
    assert not set(HEAVY) & set(p["modules"])


def test_validate_of_a_registered_availability_model_imports_no_torch(tmp_path):
    """A model named in system.availability is a registered module (fedsim/availability/diurnal.py),
    imported to check its keys; it pulls in neither torch nor pandas."""
    (tmp_path / "d.yaml").write_text("round: {policy: window, window: 5.0}\n"
                                     "system: {availability: {model: diurnal, peak: 0.9}}\n")
    p = probe("validate", "d.yaml", cwd=tmp_path)
    assert p["rc"] == 0
    assert not set(HEAVY) & set(p["modules"])
