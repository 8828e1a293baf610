"""Shared drivers for the algorithm tests: quadratic workloads and one synchronous round.

``run_round`` runs the engine's own round computation (``engine.run.train_and_apply``, what
``SyncEngine.step`` calls) without the clock, so tests choose tau_i and the weights directly.
"""

from __future__ import annotations

import torch

from fedsim.algorithms.algorithm import Algorithm, algorithm
from fedsim.algorithms.presets import PRESETS
from fedsim.algorithms.spec import resolve
from fedsim.engine.run import train_and_apply
from fedsim.engine.train import Task
from fedsim.engine.workload import build_workload
from fedsim.scenario import AlgorithmConfig, parse_scenario

#: Every registered synchronous algorithm (fedbuff / fedasync need the async policy).
SYNC = tuple(n for n, p in PRESETS.items() if p["asynchronous"] is None)
ADAPTIVE_LOCAL = ("localadam", "fedlada")


def quadratic_work(centers, weights=None, dtype=torch.float64):
    """F_i(x) = 1/2 ||x - e_i||^2 with exact gradients; x starts at 0."""
    data = {"name": "quadratic", "centers": [list(map(float, c)) for c in centers]}
    if weights is not None:
        data["weights"] = list(map(float, weights))
    sc = parse_scenario({"data": data, "round": {"policy": "wait", "local_steps": 1}})
    return build_workload(sc, torch.device("cpu"), dtype)


def spec_for(name, **over):
    over.setdefault("batch_size", 1)
    return resolve(AlgorithmConfig(name=name, **over))


def start(spec, work):
    params = {k: v.clone() for k, v in work.init_params.items()}
    return params, _alg(spec).init(params)


def _alg(spec_or_alg) -> Algorithm:
    return spec_or_alg if isinstance(spec_or_alg, Algorithm) else algorithm(spec_or_alg)


def run_round(spec, work, params, state, steps, lr, *, chunk=None, weights=None, key=0):
    """One round of ``spec`` (an AlgoSpec or a built Algorithm); ``steps[i]`` = tau_i of client i
    (clients with 0 steps do not report)."""
    tasks = [Task(i, int(s), key) for i, s in enumerate(steps) if s > 0]
    p = work.weights if weights is None else weights
    return train_and_apply(
        work, _alg(spec), params, state, tasks, {t.client: float(p[t.client]) for t in tasks}, lr=lr, seed=0,
        chunk=chunk or max(len(tasks), 1), client_p={i: float(q) for i, q in enumerate(work.weights)},
    )


def run(spec, work, rounds, steps, lr, **kw):
    """``rounds`` rounds; ``steps`` is a list (every round) or a function of the round."""
    spec = _alg(spec)  # built once for the whole run, as the engine does
    params, state = start(spec, work)
    for r in range(rounds):
        s = steps(r) if callable(steps) else steps
        params, state, _ = run_round(spec, work, params, state, s, lr, key=r, **kw)
    return params, state


def fast_run(spec, centers, steps, lr, rounds, *, p=None, weights=None, dtype=torch.float64):
    """The same algorithm on F_i = 1/2 ||x - e_i||^2 without the engine (exact gradients x - e_i).

    Drives the clock-free ``Algorithm`` (``client_update`` / ``server_update``): fast enough for
    the hundreds of rounds fixed-point tests need. ``steps`` is a list or a function of the round;
    ``lr`` a float or a function of the round.
    """
    e = torch.as_tensor(centers, dtype=dtype)
    m, dim = e.shape
    p = torch.full((m,), 1.0 / m, dtype=torch.float64) if p is None else torch.as_tensor(p, dtype=torch.float64)
    alg = algorithm(spec)
    x = {"x": torch.zeros(dim, dtype=dtype)}
    state = alg.init(x)
    for r in range(rounds):
        s = steps(r) if callable(steps) else steps
        lr_r = lr(r) if callable(lr) else lr
        upd = alg.client_update(x, state, lambda xs, ids: {"x": xs["x"] - e[list(ids)]}, s, lr_r,
                                weights=p.tolist() if weights is None else weights, client_p=p.tolist())
        x, state = alg.server_update(x, state, upd)
    return x["x"], state
