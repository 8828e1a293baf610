"""``fedsim`` with a fault injected, for the crash tests: ``python tests/_faults.py POINT ARGS...``
runs ``fedsim ARGS...`` and SIGKILLs itself at POINT:

- ``round:N``      right after round N's rows are written (before its checkpoint);
- ``checkpoint:N`` halfway through writing the checkpoint that resumes at round N (half the
  bytes are in ``checkpoint.pt.tmp``, the previous checkpoint is untouched).

The faults wrap public functions of the product (``Tables.write``, the checkpoint module's
``write_atomic``); production code holds no test hook.
"""

import io
import os
import signal
import sys

import torch

import fedsim.runner.checkpoint as checkpoint
from fedsim.cli import main
from fedsim.runner.folder import Tables


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def inject(point: str) -> None:
    kind, n = point.split(":")
    n = int(n)
    if kind == "round":
        write = Tables.write

        def write_then_die(self, record, clients):
            write(self, record, clients)
            if record.round == n:
                _die()

        Tables.write = write_then_die
    elif kind == "checkpoint":
        write_atomic = checkpoint.write_atomic

        def half_then_die(path, data):
            if torch.load(io.BytesIO(data), weights_only=True)["next_round"] == n:
                with open(path.with_name(path.name + ".tmp"), "wb") as f:
                    f.write(data[: len(data) // 2])
                _die()
            write_atomic(path, data)

        checkpoint.write_atomic = half_then_die
    else:
        raise SystemExit(f"unknown fault point {point!r}")


if __name__ == "__main__":
    inject(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
