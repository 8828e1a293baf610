"""``fedsim trace``: make device trace files (import FedScale's, generate a population)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from fedsim.scenario import ScenarioError

__all__ = ["add_trace_parser", "cmd_trace"]


def add_trace_parser(sub) -> None:
    """Register ``fedsim trace import-fedscale`` and ``fedsim trace generate`` on ``sub``."""
    t = sub.add_parser("trace", help="make device trace files (FedScale import, generated populations)")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=type(t))
    imp = tsub.add_parser("import-fedscale", help="convert FedScale's capacity and behaviour pickles")
    imp.add_argument("capacity", help="FedScale client_device_capacity pickle")
    imp.add_argument("behavior", help="FedScale client_behave_trace pickle")
    imp.add_argument("--out", required=True, help="trace CSV to write")
    imp.add_argument("--force", action="store_true", help="replace an existing --out file")
    imp.add_argument("--assign", choices=("sorted", "fedscale"), default="sorted",
                     help="sorted: i-th client ids ascending (default); fedscale: FedScale's own assignment")
    imp.add_argument("--clients", type=int, default=None,
                     help="--assign fedscale: how many clients to write (default: the behaviour entries)")
    gen = tsub.add_parser("generate", help="draw a FedScale-shaped population from a seed")
    gen.add_argument("--out", required=True, help="trace CSV to write")
    gen.add_argument("--force", action="store_true", help="replace an existing --out file")
    from .population import PopulationSpec

    for f in fields(PopulationSpec):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "clients":
            gen.add_argument(flag, type=int, required=True)
        else:
            gen.add_argument(flag, type=type(f.default), default=f.default, help=f"(default {f.default})")


def cmd_trace(args: argparse.Namespace) -> int:
    """Run ``fedsim trace ...``; bad input is a ScenarioError (one line, exit 2)."""
    if args.trace_command == "import-fedscale":
        from .fedscale import import_fedscale

        if args.clients is not None and args.assign != "fedscale":
            raise ScenarioError("--clients: only with --assign fedscale")
        notes: list[str] = []
        n = import_fedscale(args.capacity, args.behavior, args.out, force=args.force, assign=args.assign,
                            clients=args.clients, notes=notes)
        for note in notes:
            print(note, file=sys.stderr)
        print(f"{args.out}: {n} devices from FedScale")
        return 0
    from .population import PopulationSpec, write_population
    from .traceio import check_out

    check_out(args.out, args.force)
    values = {f.name: getattr(args, f.name) for f in fields(PopulationSpec)}
    try:
        spec = PopulationSpec(**values)
    except ValueError as err:
        raise ScenarioError(str(err)) from None
    rows = write_population(spec, args.out)
    print(f"{args.out}: {spec.clients} devices, {rows} intervals")
    return 0
