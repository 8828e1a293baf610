"""Shared by the run-folder and trust tests: a two-client quadratic scenario whose run takes
milliseconds (exact gradients, checkpoints every 2 rounds), and the exit-2 contract of the CLI."""

from __future__ import annotations

import time

from fedsim.cli import main

QUAD = {
    "name": "quad",
    "seed": 0,
    "rounds": 6,
    "data": {"name": "quadratic", "centers": [[1.0], [3.0]]},
    "round": {"policy": "wait", "local_steps": 2},
    "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 1},
    "checkpoint": {"every": 2},
}


def exit_2(capsys, argv, *needles, seconds: float | None = None, max_chars: int | None = None) -> str:
    """``fedsim argv`` exits 2 with one line on stderr, no traceback, containing every needle
    (and, when given, within ``seconds`` and shorter than ``max_chars``)."""
    t = time.perf_counter()
    assert main(argv) == 2
    assert seconds is None or time.perf_counter() - t < seconds
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert max_chars is None or len(err) < max_chars, err
    for n in needles:
        assert n in err, err
    return err
