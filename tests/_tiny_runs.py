"""Shared by the run-folder and trust tests: a two-client quadratic scenario whose run takes
milliseconds (exact gradients, checkpoints every 2 rounds), and the exit-2 contract of the CLI."""

from __future__ import annotations

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


def exit_2(capsys, argv, *needles) -> str:
    """``fedsim argv`` exits 2 with one line on stderr, no traceback, containing every needle."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err
