"""``fedsim`` command line: run, validate (and the commands other modules register).

Exit status: 0 ok (a diverged run is a result, still 0); 2 invalid scenario or arguments, with
one line naming the field; 1 any other failure.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["main"]


class UsageError(Exception):
    """Bad command-line input: exit 2 with this one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise UsageError(f"fedsim: {message}")


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``compare`` and ``plot`` (whose modules import pandas) are added unless
    ``command`` is ``run`` or ``validate``, which then start without them."""
    p = _Parser(prog="fedsim", description="Federated learning under system heterogeneity, on a simulated clock.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run one scenario (or each of its variants)")
    r.add_argument("scenario")
    r.add_argument("--out", default=None, help="run folder (default runs/<name>)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--force", action="store_true", help="replace an existing run folder")
    r.add_argument("--resume", default=None, metavar="DIR", help="continue the run in DIR from its last checkpoint")
    r.add_argument("--schedule-only", action="store_true", help="run only the clock; write clients.csv and round times")
    r.add_argument("--format", dest="table_format", choices=("csv", "parquet"), default=None,
                   help="rounds/clients tables as CSV (default) or Parquet part folders; --resume keeps the run's")
    r.add_argument("--quiet", action="store_true")
    _add_plugin_option(r)
    v = sub.add_parser("validate", help="check a scenario without running it")
    v.add_argument("scenario")
    v.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    _add_plugin_option(v)
    f = sub.add_parser("flower", help="run a Flower ServerApp and ClientApp on the scenario's clock (docs/flower.md)")
    f.add_argument("scenario")
    f.add_argument("--server-app", required=True, metavar="MODULE:ATTR", help="the flwr ServerApp to run")
    f.add_argument("--client-app", required=True, metavar="MODULE:ATTR", help="the flwr ClientApp every node runs")
    f.add_argument("--out", default=None, help="run folder (default runs/<name>)")
    f.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    f.add_argument("--run-config", dest="run_config", action="append", default=[], metavar="KEY=VALUE",
                   help="an entry of the apps' context.run_config (values read as YAML scalars)")
    f.add_argument("--force", action="store_true", help="replace an existing run folder")
    f.add_argument("--resume", action="store_true", help="refused: a Flower strategy's state is not fedsim's to resume")
    if command not in ("run", "validate", "flower"):
        from .compare import add_compare_parser
        from .report.cli import add_plot_parser

        add_compare_parser(sub)
        add_plot_parser(sub)
        from .devices.cli import add_trace_parser

        add_trace_parser(sub)
    return p


def _add_plugin_option(parser) -> None:
    parser.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                        help="import MODULE (it registers models, datasets, algorithms) before the scenario is read")


def _load_checked(args):
    """The scenario and its variants, every check of ``fedsim validate`` done (no torch imported):
    installed plug-ins and ``--plugin`` modules loaded, the file read and ``--set`` applied once."""
    from .plugins import load_plugins
    from .scenario import expand_variants
    from .scenario.loading import load_scenario_raw

    load_plugins(args.plugins)
    sc, raw = load_scenario_raw(args.scenario, args.overrides)
    variants = expand_variants(sc, raw, Path(args.scenario).resolve().parent)
    from .validate import check_ready

    for _, vsc in variants:
        check_ready(vsc)
    return sc, variants


def _check_compute_steps(sc) -> None:
    """The steps bound of ``system.compute`` (a window's, an async ``local_time``'s) needs the model's FLOPs per step: counted here
    (the data are built for their input shape, the model on torch's meta device), so ``validate``
    refuses what the run would (:func:`fedsim.validate.check_compute_steps`)."""
    from .engine.workload import dataset_for
    from .clock_only import work_cost_for
    from .validate import check_compute_steps

    cost = work_cost_for(sc, dataset_for(sc))
    check_compute_steps(sc, None if cost is None else cost.step_flops)


def _cmd_validate(args) -> int:
    _, variants = _load_checked(args)
    for _, vsc in variants:  # the run checks this once its model is built; validate counts the FLOPs itself
        if vsc.system.compute is not None and (vsc.round.policy == "window" or vsc.round.local_time is not None):
            _check_compute_steps(vsc)
    names = ", ".join(v for v, _ in variants if v)
    print(f"{args.scenario}: ok" + (f" ({len(variants)} variants: {names})" if names else ""))
    return 0


def _cmd_run(args) -> int:
    sc, variants = _load_checked(args)  # a bad scenario fails here, before torch is imported
    if args.resume and args.out:
        raise UsageError("fedsim: --resume DIR names the run folder; give no --out with it")
    from .runner import default_out, run

    base = Path(args.resume or args.out or default_out(sc))
    from .engine import distributed
    from .engine.workload import resolve_device

    if not args.schedule_only:  # under torchrun: join the process group (fedsim/engine/distributed.py)
        from .validate import check_device_available

        check_device_available(sc.engine.device)
        distributed.init_from_env(resolve_device(sc.engine.device))
    main = distributed.is_main() and int(os.environ.get("RANK", "0")) == 0
    results = []
    from .runner.folder import variant_folder  # variant names as single path components (issue 12.4)
    try:
        for vname, vsc in variants:
            out = variant_folder(base, vname) if vname else base
            if args.schedule_only:
                from .clock_only import run_schedule

                if main:
                    run_schedule(vsc, out, force=args.force, table_format=args.table_format or "csv")
                    print(f"{vsc.name}: schedule written to {out}")
                continue
            summary = run(vsc, out, force=args.force, progress=not args.quiet, resume=bool(args.resume),
                          table_format=args.table_format)
            results.append((vname or vsc.name, summary, out))
    finally:
        distributed.shutdown()
    if results and main:
        _print_summary(results)
    return 0


def _print_summary(results) -> None:
    w = max(len(n) for n, _, _ in results)
    d = max(4, *(len(s.data) for _, s, _ in results))
    print(f"{'run':<{w}}  {'data':<{d}}  {'rounds':>6}  {'sim_time':>10}  {'test_acc':>8}  {'train_loss':>10}  folder")
    for name, s, out in results:
        acc = "" if s.test_acc != s.test_acc else f"{s.test_acc:.4f}"
        loss = "" if s.train_loss != s.train_loss else f"{s.train_loss:.4f}"
        flag = "  (diverged)" if s.diverged else ""
        print(f"{name:<{w}}  {s.data:<{d}}  {s.rounds:>6}  {s.sim_time:>10.1f}  {acc:>8}  {loss:>10}  {out}{flag}")


def _cmd_flower(args) -> int:
    """``fedsim flower``: the apps are named explicitly (the scenario file never imports code)."""
    from .scenario.loading import load_scenario, parse_value

    sc = load_scenario(args.scenario, args.overrides)
    if args.resume:
        raise UsageError("fedsim: --resume: a Flower run cannot be resumed (its strategy's state lives in the "
                         "ServerApp's main function, outside fedsim); rerun it with --force")
    run_config = {}
    for item in args.run_config:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"fedsim: --run-config {item!r}: give KEY=VALUE")
        run_config[key] = parse_value(value, f"--run-config {key}")
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise UsageError("fedsim: flower: needs the flwr package (pip install 'fedsim[flower]')") from None
    from .flower import load_app, run
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from .runner import default_out

    if "" not in sys.path:  # module:attr names a module of the current folder, as `flwr run` does
        sys.path.insert(0, "")
    server = load_app(args.server_app, ServerApp, "--server-app")
    client = load_app(args.client_app, ClientApp, "--client-app")
    out = Path(args.out) if args.out else default_out(sc)
    result = run(server, client, sc, out, run_config=run_config, force=args.force)
    print(f"{sc.name}: {len(result.exchanges)} exchanges, simulated time {result.sim_time:.1f} s, written to {out}")
    return 0


def _cmd_compare(args) -> int:
    from .compare import cmd_compare

    return cmd_compare(args)


def _cmd_plot(args) -> int:
    from .report.cli import cmd_plot

    return cmd_plot(args)


def _cmd_trace(args) -> int:
    from .devices.cli import cmd_trace

    return cmd_trace(args)


COMMANDS = {"run": _cmd_run, "validate": _cmd_validate, "flower": _cmd_flower, "compare": _cmd_compare, "plot": _cmd_plot, "trace": _cmd_trace}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _build_parser(next((a for a in argv if not a.startswith("-")), None)).parse_args(argv)
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fedsim: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI's last resort, one line unless debugging
        if _is_input_error(err):
            print(str(err).splitlines()[0] if str(err) else type(err).__name__, file=sys.stderr)
            return 2
        if os.environ.get("FEDSIM_DEBUG"):
            raise
        print(f"fedsim: error: {type(err).__name__}: {err} (set FEDSIM_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


def _is_input_error(err: Exception) -> bool:
    """Bad input (exit 2): usage, scenario (traces included), missing data files. The classes are
    imported here, on the error path, so that a good start pays for none of their modules."""
    from .data.errors import DataNotFound
    from .scenario import ScenarioError  # TraceError is one too

    return isinstance(err, (UsageError, ScenarioError, DataNotFound))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
