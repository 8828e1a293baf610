"""A plug-in part that fails mid-run, whatever it raises, ``sys.exit`` included (issue 38 item 7):
``fedsim run`` exits 1 with one line naming the part by its scenario key and registered name
(a selection rule too; only its answers out of contract are exit 2, docs/selection.md), keeps the rows written so
far and leaves its folder unlocked. Before, ``sys.exit(0)`` in a compressor or a loss ended
fedsim with exit 0, a header-only rounds.csv and no message; ``sys.exit(3)`` exited 3."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each part works while the run is built (fedsim probes it) and fails once the run is under way.
PLUGIN = '''
import os
import sys
from dataclasses import dataclass

import fedsim
from fedsim.clock.selection import Picked, SelectionRule
from fedsim.compression import CompressionSection, Compressor
from fedsim.selection.section import SelectionSection

HOW = os.environ["HOW"]
CALLS = {"compress": 0, "loss": 0}


def fail():
    if HOW == "exit0":
        sys.exit(0)
    if HOW == "exit3":
        sys.exit(3)
    raise RuntimeError("boom")


@dataclass(frozen=True)
class Quitter(SelectionRule):
    def select(self, state, request):
        if request.key >= 1:
            fail()
        return state, Picked.of(request.online()[: request.k], request.p)


class QuitterSection(SelectionSection):
    def clock_value(self):
        return Quitter()


@dataclass(frozen=True)
class QuitComp(Compressor):
    def payload_bytes(self, n, b):
        return float(n * b)

    def compress_rows(self, rows, gens):
        CALLS["compress"] += 1
        if CALLS["compress"] > 3:  # the build-time probe calls it 3 times
            if HOW == "nan":
                return rows * float("nan")
            fail()
        return rows.clone()


class QuitCompSection(CompressionSection):
    def compressor(self):
        return QuitComp()


def quit_loss(outputs, targets):
    import torch.nn.functional as F

    CALLS["loss"] += 1
    if CALLS["loss"] > 8:  # the build-time checks call it fewer times
        fail()
    return F.cross_entropy(outputs, targets)


fedsim.register_selector("quit_rule", QuitterSection)
fedsim.register_compressor("quit_comp", QuitCompSection)
fedsim.register_loss("quit_loss", quit_loss)
'''

SCENARIO = """name: quits
seed: 0
rounds: 4
data: {name: synthetic, clients: 4}
model: {name: logreg}
system: {speed: 2.0}
round: {policy: window, window: 2.0, clients_per_round: 4}
algorithm: {name: fedavg, lr: 0.1}
"""


def _run(tmp_path: Path, how: str, key: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "quit_parts.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "fedsim", "run", "s.yaml", "--out", str(out), "--quiet",
                        "--plugin", "quit_parts", "--set", key], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOW": how},
                       timeout=300)
    return r, out


def _unlocked(out: Path) -> bool:
    fd = os.open(out / "run.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize("how, key, code, line", [
    ("exit0", "algorithm.compression.name=quit_comp", 1,
     "fedsim: error: PartError: algorithm.compression: compressor 'quit_comp': compress_rows failed: SystemExit: 0"),
    ("exit3", "algorithm.compression.name=quit_comp", 1,
     "fedsim: error: PartError: algorithm.compression: compressor 'quit_comp': compress_rows failed: SystemExit: 3"),
    ("nan", "algorithm.compression.name=quit_comp", 1,
     "fedsim: error: PartError: algorithm.compression: compressor 'quit_comp': compress_rows returned NaN for "
     "client 0's update (job key 0), which was finite"),
    ("exit0", "loss.name=quit_loss", 1, "fedsim: error: PartError: loss 'quit_loss': raised SystemExit: 0"),
    ("exit0", "round.selection.name=quit_rule", 1,
     "fedsim: error: SelectionFailed: round.selection: quit_rule.select() failed: SystemExit: 0"),
], ids=["compressor-exit0", "compressor-exit3", "compressor-nan", "loss-exit0", "selection-exit0"])
def test_a_part_failing_mid_run_is_one_line_naming_it(tmp_path, how, key, code, line):
    r, out = _run(tmp_path, how, key)
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stderr)
    assert err.count("\n") == 0 and "Traceback" not in err and err.startswith(line), err
    assert (out / "rounds.csv").exists() and not (out / "model.pt").exists()  # it failed mid-run
    assert _unlocked(out)
