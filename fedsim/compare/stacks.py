"""Planning a comparison's stacks: which runs (cell, seed) share one process and its training steps.

Runs share a stack when they build the same data and the same model shapes: the same ``data``
section and data seed, ``model``, ``loss``, ``eval.clients`` (which clients the run holds) and
``engine`` settings (device, dtype, threads, clients per batch). Everything else may differ: round
policy (synchronous or asynchronous), selection, algorithm and its hyper-parameters, compression,
server link, availability, devices, seed, lr, local steps, batch size. A stack of one run says
why it is alone.
A stack holds at most ``max_rows`` rows (the training jobs of one step: clients per round of each
of its runs); :func:`auto_rows` sizes that from the model's parameter bytes and a memory budget.
Nothing here builds or runs anything (docs/comparisons.md, "Stacks").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Sequence

from .plan import CompareRun

__all__ = ["Stack", "stack_key", "plan_stacks", "balanced", "rows_of", "auto_rows", "STACK_BYTES",
           "plan_lines"]

#: Memory the stacked training state of one stack may use (the automatic row cap, :func:`auto_rows`).
STACK_BYTES = 512 << 20

#: Copies of the parameters one row holds while training (x, start, gradient, solver state,
#: delta, correction) -- the automatic cap's estimate of a row's bytes.
ROW_COPIES = 6


@dataclass(frozen=True)
class Stack:
    """Runs that run as one program. ``alone``: why a stack of one run is alone (None for a
    stack of several)."""

    runs: tuple[CompareRun, ...]
    alone: str | None = None

    @property
    def rows(self) -> int:
        return sum(rows_of(r) for r in self.runs)


def stack_key(run: CompareRun) -> str:
    """What runs of one stack share (the data and model shapes), as one string."""
    sc = run.scenario
    raw = sc.model_dump(mode="json")
    data = dict(raw["data"])
    data.pop("seed", None)
    return json.dumps({
        "data": data, "data_seed": sc.data_seed, "model": raw["model"], "loss": raw["loss"],
        "eval_clients": sc.eval.clients,
        "engine": {k: raw["engine"][k] for k in ("device", "dtype", "threads", "clients_per_batch")},
    }, sort_keys=True)


def rows_of(run: CompareRun) -> int:
    """Most training jobs one round of ``run`` asks for: its clients per round (times the
    over-commitment factor with policy overcommit; all clients when unset)."""
    r = run.scenario.round
    k = r.clients_per_round if r.clients_per_round is not None else (run.scenario.data.clients or 1)
    if r.policy == "overcommit":
        k = math.ceil(r.overcommit * k)
    return max(1, int(k))


def auto_rows(param_bytes: int, budget: int = STACK_BYTES) -> int:
    """Rows a stack may hold: ``budget // (ROW_COPIES * param_bytes)``, at least 1."""
    return max(1, budget // max(1, ROW_COPIES * param_bytes))


def plan_stacks(runs: Sequence[CompareRun], max_rows: int | None = None, programs: int = 1) -> list[Stack]:
    """The runs grouped into stacks, in the order of their first run: runs with one
    :func:`stack_key` share a stack, cut into stacks of at most ``max_rows`` rows (None: no cap;
    a run bigger than the cap is a stack of its own). With ``programs`` > 1 parallel processes the
    largest stack is halved until the stacks are a multiple of ``programs`` (and at least that
    many) or none has two runs left, so the processes end together (:func:`balanced`)."""
    groups: dict[str, list[CompareRun]] = {}
    for r in runs:
        groups.setdefault(stack_key(r), []).append(r)
    return balanced([s for group in groups.values() for s in split_rows(group, max_rows)], programs)


def balanced(stacks: list[Stack], programs: int) -> list[Stack]:
    """``stacks`` with the largest (most runs; the first of equals) halved, its first half in its
    place and the second right after, while their number is below ``programs`` or not a multiple
    of it and some stack has two runs or more."""
    out = list(stacks)
    while programs > 1 and (len(out) < programs or len(out) % programs) and any(len(s.runs) > 1 for s in out):
        i = max(range(len(out)), key=lambda j: (len(out[j].runs), -j))
        runs = out[i].runs
        half = (len(runs) + 1) // 2
        out[i:i + 1] = [Stack(runs[:half]) if half > 1 else Stack(runs[:half], _HALVED),
                        Stack(runs[half:]) if len(runs) - half > 1 else Stack(runs[half:], _HALVED)]
    return out


_HALVED = "its stack was halved to keep the parallel processes busy"


def split_rows(runs: Sequence[CompareRun], max_rows: int | None) -> list[Stack]:
    """``runs`` (one key) cut in order into stacks of at most ``max_rows`` rows each; a stack of
    one run says why it is alone."""
    if len(runs) == 1:
        return [Stack(tuple(runs), "no other run shares its data and model shapes")]
    if max_rows is None:
        return [Stack(tuple(runs))]
    out, cur, used = [], [], 0
    for r in runs:
        n = rows_of(r)
        if cur and used + n > max_rows:
            out.append(Stack(tuple(cur)))
            cur, used = [], 0
        cur.append(r)
        used += n
    if cur:
        out.append(Stack(tuple(cur)))
    return [Stack(s.runs, f"its {s.rows} rows leave no room for another run under the row cap ({max_rows})")
            if len(s.runs) == 1 else s for s in out]


def plan_lines(stacks: Sequence[Stack]) -> list[str]:
    """The plan as log lines: one per stack (its runs) and one per run that runs alone (why)."""
    lines = []
    shared = [s for s in stacks if len(s.runs) > 1]
    lines.append(f"plan: {sum(len(s.runs) for s in stacks)} runs in {len(stacks)} programs: "
                 f"{len(shared)} stacks of runs, {len(stacks) - len(shared)} runs alone")
    for i, s in enumerate(stacks, 1):
        labels = ", ".join(r.label for r in s.runs)
        if len(s.runs) == 1:
            lines.append(f"  program {i}: {labels} alone: {s.alone}")
        else:
            lines.append(f"  program {i}: stack of {len(s.runs)} runs ({s.rows} rows): {labels}")
    return lines
