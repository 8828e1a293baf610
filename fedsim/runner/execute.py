"""``run(scenario, out)``: one scenario into one run folder (the run folder of README.md, "Run folder").

Order: check the folder (read only) -> build workload, engine and clock -> lock the folder and
prepare it (or cut it back to its checkpoint for ``--resume``) -> the round loop
(:func:`fedsim.runner.loop.round_loop`) writing rows and checkpoints -> ``model.pt``. Under torchrun
every rank builds and runs the same; only rank 0 touches the folder.
"""

from __future__ import annotations

from contextlib import ExitStack, closing
from pathlib import Path

from .checkpoint import observed_log, save_checkpoint
from ..engine import distributed
from ..engine.request import drive
from ..engine.threads import hold_cores
from ..records import RunSummary
from ..scenario import Scenario
from ..progress import progress_bar
from .build import adopt_clients, build_run
from .files import write_atomic
from .folder import (
    Tables, check_folder, check_unlocked, default_out, info_text, locked, open_for_resume, prepare_folder,
    save_model, uses_levers, write_partition,
)
from .evals import EvalGrid
from .loop import round_loop
from .ranks import agree

__all__ = ["run", "run_cell"]


def run(
    sc: Scenario, out: Path | None = None, *, force: bool = False, progress: bool = True, resume: bool = False,
    table_format: str | None = None, model=None, data=None, loss=None,
) -> RunSummary:
    """Run ``sc`` into ``out`` (default ``runs/<name>``); returns the final summary.

    :func:`run_cell` driven alone: each round's local training by the run's own trainer
    (:func:`fedsim.engine.request.drive`); see :func:`run_cell` for the arguments."""
    return drive(run_cell(sc, out, force=force, progress=progress, resume=resume, table_format=table_format,
                          model=model, data=data, loss=loss))


def run_cell(
    sc: Scenario, out: Path | None = None, *, force: bool = False, progress: bool = True, resume: bool = False,
    table_format: str | None = None, model=None, data=None, loss=None, build=build_run, hold=None, on_round=None,
):
    """Run ``sc`` into ``out`` as a generator: yields each round's
    :class:`~fedsim.engine.request.TrainRequest`, receives its result, returns the final
    :class:`~fedsim.records.RunSummary`. Everything but the local training happens here.

    With ``resume`` the run continues from the folder's last checkpoint (or from the start when
    there is none); rows written after that checkpoint are cut back first. A folder that is not
    this run's to write is refused (:class:`~fedsim.runner.files.FolderError`, exit 2) before
    anything is built, and one another run holds before anything is written.

    ``table_format``: ``csv`` (default) or ``parquet`` (:class:`fedsim.runner.folder.Tables`); a
    resumed run keeps its folder's format and refuses another one.

    ``model``, ``data``, ``loss``: Python objects replacing the scenario's named pieces
    (:func:`fedsim.runner.build.build_run`; the public form is :func:`fedsim.run`).

    ``build``: builds the run (default :func:`~fedsim.runner.build.build_run`; a comparison's stack
    passes one that shares its data). ``hold``: wraps each round's compute (default: the run's
    share of the cores, :func:`fedsim.engine.threads.hold_cores`; a stack holds the cores itself).
    ``on_round(record)``: called with each round's record once it is written (a comparison's progress).
    """
    sc, data = adopt_clients(sc, data)  # natural partitions: the data decide data.clients
    out = Path(out) if out is not None else default_out(sc)
    main = distributed.is_main()  # under torchrun only rank 0 touches the run folder

    def check() -> None:
        check_folder(sc, out, force=force, resume=resume)
        check_unlocked(out)

    agree(check)
    built = build(sc, model=model, data=data, loss=loss)
    engine = built.engine
    with ExitStack() as stack:

        def open_folder() -> tuple[dict | None, str]:
            stack.enter_context(locked(out))
            if resume:
                return open_for_resume(
                    sc, out, engine.params, quadratic=engine.work.is_quadratic, table_format=table_format
                )
            prepare_folder(sc, out, force=force)
            return None, table_format or "csv"

        ck, fmt = agree(open_folder)
        start, replay = 0, ()
        schedule = built.clock.schedule()
        feedback = schedule.selector.rule.uses_feedback
        if ck is not None:
            engine.load_state(ck["sim"])
            start = ck["next_round"]
            if feedback:
                replay = observed_log(ck, start, out)
        sinks = []
        bar = None
        if main:
            if engine.work.class_counts is not None:
                write_partition(out / "partition.csv", engine.work.class_counts)
            write_atomic(out / "info.yaml", info_text(sc, engine, built.cost).encode())
            tables = stack.enter_context(closing(Tables(out, quadratic=engine.work.is_quadratic, table_format=fmt,
                                                        levers=uses_levers(sc))))
            sinks.append(tables.write)
            if on_round is not None:
                sinks.append(lambda record, clients: on_round(record))
            bar = progress_bar(sc.name, sc.rounds, initial=start) if progress else None
            if bar is not None:
                stack.callback(bar.close)
                sinks.append(lambda record, clients: bar(record))
        every = sc.checkpoint.every

        def checkpoint(next_round: int) -> None:
            if main and every and next_round % every == 0 and next_round < sc.rounds:
                save_checkpoint(out, next_round, tables.synced_sizes(), engine.state_dict(),
                                schedule.selector.log if feedback else None)

        grid = None
        if sc.eval.every_seconds is not None:  # evals.csv (fedsim.runner.evals)
            grid = EvalGrid(sc.eval.every_seconds, out / "evals.csv" if main else None)
        if main and built.client_evals is not None:  # client_evals.csv (fedsim.runner.client_evals)
            grid = _client_evals(built, out, engine, grid, sinks, start, stack)
        if hold is None:
            def hold():
                return hold_cores(engine.work.x_train.device, notice=bar.note if main and bar is not None else None)
        last = yield from round_loop(
            engine, schedule, start=start, rounds=sc.rounds, eval_every=sc.eval.every,
            sinks=sinks, checkpoint=checkpoint, grid=grid, replay=replay, hold=hold,
        )
        if main:
            tables.close()
            write_atomic(out / "info.yaml", info_text(sc, engine, built.cost).encode())  # with the final thread record
            save_model(out / "model.pt", engine.model_state(), engine.work.is_quadratic)
    return RunSummary.of(last, data=engine.work.name)


def _client_evals(built, out: Path, engine, grid, sinks: list, start: int, stack):
    """``eval.per_client``: per-client rows on ``grid``'s times (the grid returned wrapped), else
    a sink after each evaluated round (rows of rounds before ``start`` kept on resume)."""
    from .client_evals import ClientEvals

    evals = ClientEvals(built.client_evals, out / "client_evals.csv", engine)
    if grid is not None:
        return evals.wrap(grid)
    evals.open(None if start == 0 else (lambda t, r: r < start))
    stack.callback(evals.close)
    sinks.append(evals.on_round)
    return None

