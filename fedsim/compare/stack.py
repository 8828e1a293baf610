"""Running one stack: several runs (cell, seed) of a comparison as one program.

Each run is its own :func:`fedsim.runner.execute.run_cell` generator -- its own clock, random
streams, selector state, checkpoints and run folder, exactly the code that runs it alone -- and
only its local training and its evaluations are answered here: the driver advances every run to
its next request, trains the :class:`~fedsim.engine.request.TrainRequest` of all runs in one
:func:`~fedsim.engine.train.train_rows` call per local solver (rows = (run, client) jobs; the
engine never learns which run a row is), evaluates the waiting
:class:`~fedsim.engine.request.EvalRequest` (and per-client ones) of runs on the same data with
one stacked forward per batch (:mod:`fedsim.engine.stacked_eval`), hands each run its answer back
and repeats. The data are
built once (one :func:`~fedsim.engine.workload.dataset_for`) and every run's workload holds the
same tensors, read only.

A run whose code raises (a plug-in of its own, its folder) fails alone: its error is reported
and the other runs go on; a batched call that raises is answered again request by request, so
the error lands on the run it belongs to. A request the batch cannot take (a model with buffers,
torchrun's split, an empty cohort) is answered alone by its own trainer.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..engine.request import ClientEvalRequest, EvalRequest, TrainRequest, TrainRequests
from ..engine.stacked_eval import client_metrics_together, eval_key, evaluate_together
from ..engine.train import CohortResult, Rows, train_cohort, train_rows
from ..scenario import dump_scenario
from .plan import CompareRun
from .stacks import auto_rows, split_rows

__all__ = ["run_stack", "solver_key"]

#: Spec fields the local chain reads (besides the lr): rows whose specs agree on them step together.
LOCAL_FIELDS = ("batch_size", "weight_decay", "momentum", "mu", "clip_norm", "lr_decay", "solver", "betas", "eps",
                "correction", "amend")


def solver_key(alg) -> str:
    """Which rows one engine call may step together: the local chain's settings (built-in solver and
    correction: :data:`LOCAL_FIELDS`; a plug-in's: every field of the spec but the lr's, since
    its builder may read any)."""
    from ..named_pieces import BUILTIN
    from ..registries import CORRECTIONS, SOLVERS

    spec = alg.spec
    builtin = SOLVERS.registrant(spec.solver) == BUILTIN and CORRECTIONS.registrant(spec.correction) == BUILTIN
    names = LOCAL_FIELDS if builtin else tuple(f.name for f in fields(spec) if not f.name.startswith("lr"))
    return json.dumps({k: getattr(spec, k) for k in names}, sort_keys=True, default=str)


@dataclass
class _Cell:
    run: CompareRun
    gen: object
    request: TrainRequest | None = None
    t0: float = 0.0
    last: object = None  # the last round record written (progress)
    rounds: int = 0  # rounds written in this program
    said: bool = False  # why its training is not batched was logged


def status_text(cells: Sequence[_Cell], elapsed: float) -> str:
    """The progress note of a stack: runs still going, the simulated time each reached (least and
    most), and an ETA from the rounds written so far in this program and the rounds left."""
    times = [c.last.sim_time for c in cells if c.last is not None]
    done = sum(c.rounds for c in cells)
    left = sum(c.run.scenario.rounds - (c.last.round + 1 if c.last is not None else 0) for c in cells)
    text = f"{len(cells)} running"
    if times:
        text += f", t_sim {min(times):.1f}-{max(times):.1f}s"
    if done:
        eta = elapsed / done * left
        text += f", ETA {int(eta // 60)}m{int(eta % 60):02d}s"
    return text


class _SharedData:
    """The stack's data, built on the first run's request and handed to every run; each run's
    workload is made to hold the first run's tensors (checked equal first)."""

    def __init__(self):
        self.data = None
        self.first = None
        self.parts = None  # the first run's per-client test parts (eval.per_client)

    def build(self, sc, *, model=None, data=None, loss=None):
        from ..runner.build import build_run

        built = build_run(sc, model=model, data=data, loss=loss)
        work = built.engine.work
        if self.first is None:
            self.first = work
        else:
            built.engine.work = _share(work, self.first)
        ce = built.client_evals
        if ce is not None:
            if self.parts is None:
                self.parts = ce.parts
            elif _same_parts(ce.parts, self.parts):
                built = replace(built, client_evals=replace(ce, parts=self.parts))
        return built


def _same_parts(a: list, b: list) -> bool:
    """Whether two runs' per-client test parts hold equal tensors (then one list serves both)."""
    return len(a) == len(b) and all(
        xa.shape == xb.shape and xa.dtype == xb.dtype and xa.device == xb.device and torch.equal(xa, xb)
        and ya.shape == yb.shape and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))


def _held_once(source):
    """``source``; a generated population (:class:`~fedsim.data.SyntheticPopulation`) answers
    ``dataset(clients)`` -- the clients a run holds, its evaluation sample -- once per list of
    clients, every run of the stack holding the same sample (the same key)."""
    from ..data import SyntheticPopulation

    if not isinstance(source, SyntheticPopulation):
        return source
    made, orig = {}, source.dataset

    def dataset(clients=None):
        key = None if clients is None else tuple(int(c) for c in clients)
        if key not in made:
            made[key] = orig(clients)
        return made[key]

    object.__setattr__(source, "dataset", dataset)  # this instance only, for this stack
    return source


def _share(work, first):
    """``work`` holding ``first``'s data tensors where they are equal (the same data, read only)."""
    same = {}
    for name in ("x_train", "y_train", "x_test", "y_test"):
        a, b = getattr(work, name), getattr(first, name)
        if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a is not b and a.shape == b.shape
                and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)):
            same[name] = b
    return replace(work, **same) if same else work


def _is_eval(req) -> bool:
    return isinstance(req, (EvalRequest, ClientEvalRequest))


def _batchable(req: TrainRequest) -> bool:
    return bool(req.tasks) and req.train is train_cohort and not req.buffers and req.work.engine_path != "per_client"


def unbatched_reason(req: TrainRequest) -> str | None:
    """Why a run's training is never batched with the stack's (None: it is, when it has jobs)."""
    if req.buffers or req.work.engine_path == "per_client":
        return "model has buffers or vmap refuses it (per-client engine path)"
    if req.train is not train_cohort:
        return "torchrun splits its training over ranks"
    return None


def _answer(reqs: Sequence[TrainRequest]) -> list[CohortResult]:
    """The requests of one local solver trained in one ``train_rows`` call; results per request."""
    tasks, starts, start, lrs, seeds, corr, direction, vhat0 = [], [], [], [], [], [], [], []
    for req in reqs:
        s = len(starts)
        starts.append(req.params)
        direction.append(req.direction)
        vhat0.append(req.vhat0)
        for t in req.tasks:
            tasks.append(t)
            start.append(s)
            lrs.append(req.round_lr)
            seeds.append(req.seed)
            corr.append(req.correction(t.client))
    rows = Rows(tuple(starts), tuple(start), tuple(lrs), tuple(seeds),
                corr=None if all(c is None for c in corr) else tuple(corr),
                direction=None if all(d is None for d in direction) else tuple(direction),
                vhat0=None if all(v is None for v in vhat0) else tuple(vhat0))
    first = reqs[0]
    work = first.work.for_clients(sorted({t.client for t in tasks}))
    res = train_rows(work, first.alg, tasks, rows, chunk=first.chunk)
    out, o = [], 0
    for req in reqs:
        n = len(req.tasks)
        sl = slice(o, o + n)
        out.append(CohortResult(
            clients=res.clients[sl], deltas={k: v[sl] for k, v in res.deltas.items()}, a_norm=res.a_norm[sl],
            steps=res.steps[sl], vhat=None if res.vhat is None else {k: v[sl] for k, v in res.vhat.items()},
            loss=res.loss[sl], loss_sq=res.loss_sq[sl],
        ))
        o += n
    return out


def _answer_all(cells: list[_Cell], log: Callable[[str], None] | None = None) -> dict[int, object]:
    """Every waiting cell's request answered: training batched per (data, local solver) -- a
    cell's :class:`~fedsim.engine.request.TrainRequests` with it, part by part, answered with
    the tuple of its parts' results --, evaluations batched per (data, model shapes, what to
    compute) (:func:`eval_key`), alone otherwise (said once per run to ``log`` when its training
    is never batched). A batch that raises is answered again request by request (the error goes
    to its own run)."""
    out: dict[int, object] = {}
    groups: dict[tuple, list[tuple[int, int | None]]] = {}
    evals: dict[tuple, list[tuple[int, None]]] = {}
    for i, c in enumerate(cells):
        req = c.request
        if _is_eval(req):
            try:
                key = eval_key(req)
            except Exception:  # noqa: BLE001 - answered alone, where its error (if any) is its run's
                key = None
            if key is not None:
                evals.setdefault(key, []).append((i, None))
            else:
                out[i] = _alone(req)
            continue
        parts = req.requests if isinstance(req, TrainRequests) else (req,)
        why = next((w for w in map(unbatched_reason, parts) if w is not None), None)
        if why is not None and not c.said and log is not None:
            log(f"{c.run.label}: trained alone in its stack: {why}")
            c.said = True
        if parts and all(map(_batchable, parts)):
            for j, part in enumerate(parts):  # a run's parts share its data and solver: one group
                groups.setdefault((id(part.work.x_train), solver_key(part.alg)), []).append(
                    (i, j if part is not req else None))
        else:
            out[i] = _alone(req)
    for key, items in evals.items():
        together = client_metrics_together if key[0] == "client" else evaluate_together
        _batched(cells, items, together, out)
    for items in groups.values():
        _batched(cells, items, _answer, out)
    return out


def _device(req) -> torch.device:
    """The device a request's model lives on."""
    req = req.requests[0] if isinstance(req, TrainRequests) else req
    return next(iter(req.params.values())).device


def _alone(req):
    """``req`` answered by its own run's code, or the error it raised (that run's)."""
    try:
        return req.run()
    except Exception as err:  # noqa: BLE001 - this run's error
        return err


def _batched(cells: list[_Cell], items: list[tuple[int, int | None]], answer: Callable, out: dict) -> None:
    """The requests ``items`` -- (cell, None) for a cell's request, (cell, j) for part j of its
    :class:`~fedsim.engine.request.TrainRequests` -- answered together by ``answer``; a cell's
    parts become the tuple of their results once all are in. When ``answer`` raises, each cell
    of the batch is answered alone (the error lands on its own run)."""
    def ask(i, j):
        req = cells[i].request
        return req if j is None else req.requests[j]

    try:
        results = answer([ask(i, j) for i, j in items])
        parts: dict[int, dict[int, object]] = {}
        for (i, j), res in zip(items, results, strict=True):
            if j is None:
                out[i] = res
            else:
                parts.setdefault(i, {})[j] = res
        for i, got in parts.items():
            if len(got) == len(cells[i].request.requests):
                out[i] = tuple(got[j] for j in range(len(got)))
    except Exception:  # noqa: BLE001 - find whose it is: each request alone
        for i in dict.fromkeys(i for i, _ in items):
            out[i] = _alone(cells[i].request)


def run_stack(runs: Sequence[CompareRun], table_format: str, finished: Callable, *, max_rows: int | None = None,
              log: Callable[[str], None] | None = None, status: Callable[[str | None], None] | None = None) -> None:
    """Run ``runs`` (one stack: the same data and model shapes) as one program (:func:`_run_stack`).
    The stack's data (generated clients kept, its runs' workloads) is freed when it returns, and
    the heap's free pages handed back to the OS, before a next stack of the same process builds
    its own: the runs' generators and workloads form reference cycles, which a collection run
    here breaks at once, and the engine's allocator keeps freed memory otherwise
    (:func:`~fedsim.engine.allocator.release_free_memory`)."""
    import gc

    from ..engine.allocator import release_free_memory

    _run_stack(runs, table_format, finished, max_rows=max_rows, log=log, status=status)
    gc.collect()
    release_free_memory()


def _run_stack(runs: Sequence[CompareRun], table_format: str, finished: Callable, *, max_rows: int | None = None,
               log: Callable[[str], None] | None = None, status: Callable[[str | None], None] | None = None) -> None:
    """Run ``runs`` (one stack: the same data and model shapes) as one program.

    ``finished(run, result | None, error | None)`` is called once per run as it ends (result as
    :func:`fedsim.compare.execute.run_one`'s). A folder holding an unfinished run of the same
    scenario is continued from its last checkpoint, anything else is replaced (as ``run_one``).
    ``max_rows``: the most rows trained together (None: :func:`~fedsim.compare.stacks.auto_rows`
    of the model's parameter bytes); runs beyond it go in later rounds of this program, on the
    same data. ``status(text)``: the stack's progress after each step (:func:`status_text`), None at
    the end.
    """
    from ..engine.threads import hold_cores
    from ..runner.execute import run_cell

    shared = _SharedData()

    def start(r: CompareRun) -> _Cell | None:
        text = dump_scenario(r.scenario)
        stored = Path(r.folder) / "scenario.yaml"
        same = stored.is_file() and stored.read_text() == text
        cell = _Cell(r, None, t0=time.perf_counter())

        def on_round(record) -> None:
            cell.last = record
            cell.rounds += 1

        cell.gen = run_cell(r.scenario, Path(r.folder), force=not same, resume=same, progress=False,
                            table_format=None if same else table_format, data=shared.data, build=shared.build,
                            hold=nullcontext, on_round=on_round)
        return cell if _advance(cell, None) else None

    def _advance(cell: _Cell, answer) -> bool:
        """Send ``answer`` (None: start); True while the run waits on a request."""
        try:
            if isinstance(answer, BaseException):
                cell.request = cell.gen.throw(answer)
            else:
                cell.request = next(cell.gen) if answer is None else cell.gen.send(answer)
            return True
        except StopIteration as stop:
            s = stop.value
            finished(cell.run, {"rounds": s.rounds, "sim_time": s.sim_time, "test_acc": s.test_acc,
                                "wall": time.perf_counter() - cell.t0}, None)
        except Exception as err:  # noqa: BLE001 - one run's error; the others go on
            finished(cell.run, None, err)
        return False

    todo = list(runs)
    if not todo:
        return
    from ..engine.workload import dataset_for

    try:  # the data, built once and handed to every run
        shared.data = _held_once(dataset_for(todo[0].scenario))
    except Exception:  # noqa: BLE001 - then every run builds its own and reports its own error
        shared.data = None
    first = start(todo[0])
    if max_rows is None and shared.first is not None:
        max_rows = auto_rows(sum(v.numel() * v.element_size() for v in shared.first.init_params.values()))
    waves = split_rows(todo, max_rows)
    if len(waves) > 1 and log is not None:
        log(f"stack of {len(todo)} runs ({todo[0].label} ...): at most {max_rows} rows at once, {len(waves)} waves")
    for k, wave in enumerate(waves):
        cells = [first] if k == 0 and first is not None else []
        cells += [c for c in (start(r) for r in wave.runs if r is not todo[0]) if c is not None]
        t = time.perf_counter()
        while cells:
            with hold_cores(_device(cells[0].request)):
                answers = _answer_all(cells, log)
                cells = [c for i, c in enumerate(cells) if _advance(c, answers[i])]
            if status is not None:
                status(status_text(cells, time.perf_counter() - t) if cells else None)
