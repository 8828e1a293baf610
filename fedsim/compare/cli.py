"""``fedsim compare``: the command line of a comparison (argument parsing, table and figure output)."""

from __future__ import annotations

import sys
from typing import Callable

from ..validate import check_target, parse_seeds

__all__ = ["add_compare_parser", "cmd_compare"]


def _list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def _main_log(quiet: bool) -> Callable[[str], None] | None:
    if quiet:
        return None
    return lambda line: print(line, file=sys.stderr, flush=True)


def add_compare_parser(sub) -> None:
    """Register ``fedsim compare`` on the CLI's subparsers."""
    c = sub.add_parser(
        "compare",
        help="run a grid of algorithms x round policies x settings x seeds and summarize it",
        description="Every cell of a seed runs on the same system trace; finished cells are not run again.",
    )
    c.add_argument("scenario")
    c.add_argument("--algorithms", default=None, metavar="A,B", help="algorithm.name values (default: the scenario's)")
    c.add_argument("--policies", default=None, metavar="P,Q", help="round.policy values (default: the scenario's)")
    c.add_argument("--variants", default=None, metavar="V,W",
                   help="use only these of the scenario's variants (default: all, as one more axis)")
    c.add_argument("--seeds", default=None, metavar="0,1,2", help="scenario seeds (default: the scenario's seed)")
    c.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="more axes (repeatable)")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override the base scenario for every cell")
    c.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                   help="import MODULE (it registers models, datasets, algorithms) before the scenario is read")
    c.add_argument("--target", type=float, default=None, help="test accuracy for time-to-target")
    c.add_argument("--jobs", type=int, default=1, help="parallel processes (default 1)")
    c.add_argument("--no-stack", dest="stack", action="store_false",
                   help="one program per run (default: runs with the same data and model shapes train as one stack)")
    c.add_argument("--stack-rows", type=int, default=None, metavar="N",
                   help="most clients one stack trains at once, over its runs (default: from the model's size)")
    c.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local processes (default) or a task per run on a Ray cluster (pip install 'fedsim[ray]')")
    c.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                   help="with --executor ray: the cluster (default: a Ray instance on this machine only)")
    c.add_argument("--retries", type=int, default=None, metavar="N",
                   help="with --executor ray: times a run is submitted again after its worker or node was lost (default 3)")
    c.add_argument("--gpus-per-cell", type=float, default=None, metavar="F",
                   help="with --executor ray: GPU fraction of a run with engine.device cuda (default 1)")
    c.add_argument("--out", default=None, help="comparison folder (default runs/<name>-compare)")
    c.add_argument("--force", action="store_true", help="rerun cells that are already complete")
    c.add_argument("--format", dest="table_format", choices=("csv", "parquet"), default="csv",
                   help="tables of the runs started: CSV (default) or Parquet part folders")
    c.add_argument("--plot", action="store_true", help="also write the figures to OUT/figures")
    c.add_argument("--quiet", action="store_true")


def cmd_compare(args) -> int:
    from ..report.results import format_summary, read_manifest
    from .execute import run_compare
    from .plan import parse_grid

    res = run_compare(
        args.scenario,
        out=args.out,
        algorithms=_list(args.algorithms),
        policies=_list(args.policies),
        seeds=parse_seeds(args.seeds),
        grid=parse_grid(args.grid),
        overrides=args.overrides,
        variants=_list(args.variants),
        target=check_target(args.target),
        jobs=args.jobs,
        force=args.force,
        log=_main_log(args.quiet),
        progress=not args.quiet,
        table_format=args.table_format,
        plugins=args.plugins,
        executor=args.executor,
        address=args.address,
        retries=args.retries,
        gpus_per_cell=args.gpus_per_cell,
        stack=args.stack,
        stack_rows=args.stack_rows,
    )
    man = read_manifest(res.out) or {}
    print(format_summary(res.summary, man.get("keys")))
    print(f"{len(res.ran)} run, {len(res.skipped)} already done, {len(res.failed)} failed; "
          f"tables: {res.out / 'summary.csv'}, {res.out / 'runs.csv'}")
    if args.plot and not res.runs.empty:
        from ..report.plots import plot_dir

        files = plot_dir(res.out, res.out / "figures", target=args.target)
        print(f"{len(files)} figures in {res.out / 'figures'}")
    if res.failed:
        for line in res.failed:
            print(f"fedsim: failed: {line}", file=sys.stderr)
        return 1
    return 0
