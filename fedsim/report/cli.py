"""``fedsim plot``: figures for run folders and comparison folders."""

from __future__ import annotations

from pathlib import Path

__all__ = ["add_plot_parser", "cmd_plot"]


def add_plot_parser(sub) -> None:
    """Register ``fedsim plot`` on the CLI's subparsers (matplotlib is imported only when it runs)."""
    p = sub.add_parser(
        "plot",
        help="write PNG figures for run or comparison folders",
        description="Accuracy/loss vs simulated time and rounds, time-to-target, tau heatmaps, "
        "client timelines and class mixes.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run folders, comparison folders or folders of runs")
    p.add_argument("--out", default=None, help="figure folder (default DIR/figures of the first DIR)")
    p.add_argument("--target", type=float, default=None, help="test accuracy for the time-to-target bars "
                   "(default: the one recorded by fedsim compare)")
    p.add_argument("--rounds", type=int, default=3, dest="first_rounds", metavar="N", help="rounds in the client timeline (default 3)")
    p.add_argument("--dpi", type=int, default=100)


def cmd_plot(args) -> int:
    from ..errors import ScenarioError
    from .plots import plot_dir

    for d in args.dirs:
        if not Path(d).is_dir():
            raise ScenarioError(f"{d}: no such folder")
    from ..limits import MAX_DPI, MAX_ROUNDS
    from ..validate import check_target

    if not 1 <= args.first_rounds <= MAX_ROUNDS:
        raise ScenarioError(f"--rounds: must be in [1, {MAX_ROUNDS:,}]")
    if not 1 <= args.dpi <= MAX_DPI:
        raise ScenarioError(f"--dpi {args.dpi}: must be in [1, {MAX_DPI}]")
    check_target(args.target)
    out = Path(args.out) if args.out else Path(args.dirs[0]) / "figures"
    try:
        files = plot_dir(args.dirs, out, target=args.target, first_rounds=args.first_rounds, dpi=args.dpi)
    except FileNotFoundError as err:
        raise ScenarioError(str(err)) from None
    for f in files:
        print(f)
    return 0
