"""Input checks beyond field types: names, numeric bounds, devices, command-line seeds and targets.

Every check raises :class:`~fedsim.errors.ScenarioError` with one line ``field.path: problem``
(the CLI turns it into exit 2). Nothing here imports torch except :func:`check_device_available`,
which the runner calls once it is about to use the device.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Collection

from .distributions import dist_high, dist_low
from .errors import ScenarioError
from .limits import (
    MAX_CLIENTS, MAX_EPOCHS, MAX_INT, MAX_NAME_LENGTH, MAX_ROUNDS, MAX_SECONDS, MAX_SEED, MAX_SEEDS,
    MAX_EVAL_ROWS, MAX_SIGMA, MAX_SLOWDOWN, MAX_SPEED, MAX_STEPS_PER_JOB, MIN_SLOWDOWN, MIN_SPEED,
)

__all__ = [
    "NAME_PATTERN", "check_name", "check_names", "check_run_name", "check_limits", "check_paths", "check_device_spec",
    "check_device_available", "parse_seeds", "check_target", "check_runnable", "check_ready", "check_trace", "check_compute_steps",
    "check_file_pieces", "check_clock", "PYTHON_PIECES",
]

#: One folder name: ASCII letters, digits, ``.``, ``_``, ``=``, ``+``, ``-``, starting with a letter
#: or digit (so never ``.``, ``..``, a hidden folder or an option-like ``-x``).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(?::[0-9]{1,4})?")
_SAFE_HINT = "use letters, digits, '.', '_', '=', '+', '-'; start with a letter or digit"


def check_name(name: Any, path: str) -> str:
    """``name`` if it is one safe folder name, else ScenarioError naming ``path``.

    Safe: 1 to ``MAX_NAME_LENGTH`` characters matching ``NAME_PATTERN``: no separator (``/``,
    ``\\``), NUL, control or non-ASCII character, never ``.`` or ``..``.
    """
    if not isinstance(name, str):
        raise ScenarioError(f"{path}: must be a string")
    problem = _name_problem(name)
    if problem:
        raise ScenarioError(f"{path}: {name!r} {problem}" if name else f"{path}: must not be empty")
    return name


def check_run_name(name: str) -> str:
    """``name`` if it is safe folder names joined by ``/`` (a relative path below ``runs/``), else
    ValueError. fedsim names variant and compare runs ``base/variant`` and ``base/cell/seedN``,
    and their stored ``scenario.yaml`` must load back."""
    if not name:
        raise ValueError("must not be empty")
    for part in name.split("/"):
        problem = _name_problem(part)
        if problem:
            raise ValueError(f"{name!r} {problem}" if part == name else f"{name!r}: part {part!r} {problem}")
    return name


def _name_problem(name: str) -> str | None:
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is longer than {MAX_NAME_LENGTH} characters"
    if not NAME_PATTERN.fullmatch(name):
        return f"is not a safe folder name ({_SAFE_HINT})"
    return None


def check_names(raw: dict) -> None:
    """Check the names of a raw scenario mapping: ``name`` and every variant's name."""
    if "name" in raw and isinstance(raw["name"], str):
        try:
            check_run_name(raw["name"])
        except ValueError as err:
            raise ScenarioError(f"name: {err}") from None
    variants = raw.get("variants")
    if isinstance(variants, dict):
        for v in variants:
            check_name(v, f"variants.{v}" if isinstance(v, str) and v.isprintable() else f"variants.{v!r}")


def check_device_spec(spec: str) -> str:
    """``spec`` if it names a device fedsim can use: auto, cpu, cuda, cuda:N, mps."""
    if not _DEVICE.fullmatch(spec):
        raise ValueError(f"{spec!r} is not a device (use auto, cpu, cuda, cuda:N or mps)")
    return spec


@functools.lru_cache(maxsize=None)
def check_device_available(spec: str) -> None:
    """ScenarioError ``engine.device: ...`` unless this machine has the device (imports torch).
    Asked once per process and device (the CLI before torchrun's process group, then the runner)."""
    import torch

    if spec.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(spec.split(":")[1]) if ":" in spec else 0
        if count == 0:
            raise ScenarioError(f"engine.device: {spec} requested but this machine has no CUDA device")
        if index >= count:
            raise ScenarioError(f"engine.device: {spec} requested but this machine has {count} CUDA device(s)")
    elif spec == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ScenarioError("engine.device: mps requested but this machine has no MPS device")


def parse_seeds(text: str | None) -> list[int] | None:
    """``compare --seeds``: ``"0,1,2"``, ``"0-4"`` (inclusive) or a mix; None when not given.

    Refuses a reversed range (``5-1``), a seed outside [0, MAX_SEED] and more than ``MAX_SEEDS``
    seeds in all, before building any list.
    """
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        return None
    ranges = []
    for t in items:
        lo, sep, hi = t.partition("-")
        a = _seed(lo, text)
        b = _seed(hi, text) if sep else a
        if b < a:
            raise ScenarioError(f"--seeds {text}: range {t} is empty (write low-high with low <= high)")
        ranges.append((a, b))
    if sum(b - a + 1 for a, b in ranges) > MAX_SEEDS:
        raise ScenarioError(f"--seeds {text}: more than {MAX_SEEDS:,} seeds")
    return [s for a, b in ranges for s in range(a, b + 1)]


def _seed(token: str, text: str) -> int:
    token = token.strip()
    if not (token.isascii() and token.isdigit()):
        raise ScenarioError(f"--seeds {text}: expected seeds like 0,1,2 or 0-4")
    if len(token) > len(str(MAX_SEED)) or int(token) > MAX_SEED:
        raise ScenarioError(f"--seeds {text}: seeds must be <= {MAX_SEED}")
    return int(token)


def check_target(target: float | None) -> float | None:
    """``compare --target``: a test accuracy in (0, 1], or None."""
    if target is not None and not 0 < target <= 1:  # NaN fails too
        raise ScenarioError(f"--target {target}: must be a test accuracy in (0, 1]")
    return target


def check_paths(sc: Any) -> None:
    """File paths in a scenario (``data.root``, ``system.trace``) can name a file: no NUL byte."""
    for path, value in (("data.root", sc.data.root), ("system.trace", sc.system.trace)):
        if value is not None and "\0" in value:
            raise ScenarioError(f"{path}: must not contain a NUL character")


# --------------------------------------------------------------------------- numeric bounds
def check_limits(sc: Any) -> None:
    """Check a validated Scenario's numbers against :mod:`fedsim.limits` (first problem wins)."""

    _at_most("seed", sc.seed, MAX_SEED, low=0)
    if sc.data.seed is not None:
        _at_most("data.seed", sc.data.seed, MAX_SEED, low=0)
    _at_most("rounds", sc.rounds, MAX_ROUNDS)
    _at_most("eval.every", sc.eval.every, MAX_ROUNDS)
    _at_most("checkpoint.every", sc.checkpoint.every, MAX_ROUNDS)
    _at_most("data.clients", sc.data.num_clients, MAX_CLIENTS)
    system, rnd = sc.system, sc.round
    _check_values("system.speed", system.speed, MIN_SPEED, MAX_SPEED)
    if system.slowdown is not None:
        _check_values("system.slowdown", system.slowdown, MIN_SLOWDOWN, MAX_SLOWDOWN)
    _at_most("system.latency", system.latency, MAX_SECONDS)
    if isinstance(system.availability, tuple):
        ends = [e for intervals in system.availability for _, e in intervals]
        if ends and max(ends) > MAX_SECONDS:
            raise ScenarioError(f"system.availability: interval ends must be <= {MAX_SECONDS:g} s")
    for key in ("window", "deadline"):
        if getattr(rnd, key) is not None:
            _at_most(f"round.{key}", getattr(rnd, key), MAX_SECONDS)
    for key, bound in (("local_steps", MAX_STEPS_PER_JOB), ("max_local_steps", MAX_STEPS_PER_JOB), ("local_epochs", MAX_EPOCHS)):
        value = getattr(rnd, key)
        if value is not None:
            _at_most(f"round.{key}", dist_high(value), bound)
    _check_span_steps(sc)  # a window's steps, an async local_time's
    if rnd.policy == "window":
        every = sc.eval.every_seconds
        if every is not None and sc.rounds * rnd.window / every > MAX_EVAL_ROWS:
            raise ScenarioError(f"eval.every_seconds: {sc.rounds} windows of {rnd.window:g} s hold more than "
                                f"{MAX_EVAL_ROWS:,} grid times; use a larger interval")
    _check_ints(sc.model_dump(), "")
    _check_per_client(sc)


def check_runnable(sc: Any) -> None:
    """What the run would refuse and the scenario's own checks allow (issue 21.18): device compute
    or network on quadratic data (no model: no FLOPs or bytes to time; the clock alone can take
    them with a given cost, so this is checked where a run is asked for: ``fedsim validate``,
    ``run``, ``compare``)."""
    if sc.data.name == "quadratic":
        for key in ("compute", "network"):
            if getattr(sc.system, key) is not None:
                raise ScenarioError(f"system.{key}: quadratic data has no model, so no FLOPs or bytes to time; use system.speed")


#: The pieces a run can take from Python (``fedsim.run(data=..., model=..., loss=...)``), by their
#: scenario field; ``NAME: from_python`` in a file names nothing a file can supply.
PYTHON_PIECES = {"data": "data.name", "model": "model.name", "loss": "loss.name"}


def check_file_pieces(sc: Any, from_python: Collection[str] = ()) -> None:
    """``data.name``, ``model.name`` or ``loss.name`` ``from_python`` is what fedsim records for a
    piece handed to :func:`fedsim.run` as an object; a scenario (a file, a mapping) that names it
    for a piece not given so (``from_python`` lists those given) is refused (issue 28 item 15)."""
    for piece, path in PYTHON_PIECES.items():
        section = getattr(sc, piece, None)
        if getattr(section, "name", None) == "from_python" and piece not in from_python:
            raise ScenarioError(f"{path}: 'from_python' stands for a {piece} given to fedsim.run({piece}=...) from "
                                "Python; a scenario file cannot supply it (name a registered one)")


def check_ready(sc: Any, from_python: Collection[str] = ()) -> None:
    """The checks a run makes before it is built, shared by ``fedsim validate``/``run``/``compare``
    and the Python API: :func:`check_file_pieces` (``from_python``: the pieces given as Python
    objects), :func:`check_runnable`, :func:`check_trace` on the scenario's trace (parsed once:
    the clock reuses it, :func:`fedsim.clock.trace.load_trace`) and :func:`check_clock`."""
    check_file_pieces(sc, from_python)
    check_runnable(sc)
    trace = None
    if sc.system.trace is not None:
        from .clock import load_trace

        trace = load_trace(sc.system.trace, sc.data.num_clients)
        check_trace(sc, trace)
    check_clock(sc, trace)


def check_clock(sc: Any, trace: Any = None) -> None:
    """What the clock refuses when it is built (issue 28 items 6 and 15), asked at validation:
    availability that changes faster than ``MIN_SOJOURN`` of the shortest round (Markov and
    diurnal means, a plug-in's ``time_scales()``), traces cycled faster than that.

    The clock is built here, on the scenario's own values, whenever they decide it without the
    data or the model: a window or deadline round (its length is the time scale) or prescribed
    ``local_steps``, and neither ``system.compute``, ``system.network`` nor a device trace (those
    time steps and transfers by the model's FLOPs and bytes), nor a client count the data decide.
    Otherwise only the bound of the shortest round known without them is checked (latencies and
    the fastest speed), and the run checks the rest when it builds its clock (before its folder)."""
    system, rnd = sc.system, sc.round

    needs_cost = system.compute is not None or system.network is not None or bool(getattr(trace, "device", False))
    needs_sizes = rnd.local_epochs is not None and rnd.policy not in ("window", "deadline")
    if not (needs_cost or needs_sizes or sc.data.clients_from_data):
        import numpy as np

        from .clock import Clock, Population

        m = sc.data.num_clients
        values = system.value(sc.algorithm.batch_size)
        if values.server is not None and values.server.aggregate_flops is not None:
            # the model's parameter count times that aggregation (the run has it); nothing the
            # clock checks when it is built depends on it
            from dataclasses import replace

            values = replace(values, server=replace(values.server, aggregate_flops=None))
        try:
            Clock(values, rnd.value(sc.algorithm.batch_size), Population.of(np.ones(m, dtype=np.int64)), seed=sc.seed)
        except ValueError as err:  # the clock's own input errors: one line
            if isinstance(err, ScenarioError):
                raise
            raise ScenarioError(f"system: {err}") from None
        return
    av = system.availability
    if not hasattr(av, "clock_value"):  # always, offline intervals, a trace: no time scales
        return
    from .clock import MIN_SOJOURN

    if rnd.policy in ("window", "deadline"):
        shortest = float(getattr(rnd, rnd.policy))
    else:
        fastest = dist_high(system.speed) if system.speed is not None else math.inf
        shortest = 2 * system.latency + (1.0 / fastest if fastest < math.inf else 0.0)
    least = MIN_SOJOURN * shortest
    for key, seconds in av.clock_value().time_scales().items():
        if seconds < least:
            raise ScenarioError(f"system.availability.{key}: must be at least {least:g} s ({MIN_SOJOURN:g} of the "
                                f"shortest round, at least {shortest:g} s): shorter sojourns flip faster than rounds run")


def _check_per_client(sc: Any) -> None:
    """A per-client list of FLOP/s or bandwidths must hold one value per client."""
    system, m = sc.system, sc.data.num_clients
    for path, value in (("system.compute.flops", system.compute and system.compute.flops),
                        ("system.network.down", system.network and system.network.down),
                        ("system.network.up", system.network and system.network.up)):  # fmt: skip
        if isinstance(value, tuple) and len(value) != m:
            raise ScenarioError(f"{path}: needs one value per client ({m}), got {len(value)}")


def check_trace(sc: Any, trace: Any) -> None:
    """A loaded trace the run could not use: under ``wait``, ``overcommit`` or ``async`` a round
    needs a client online, so a trace where none of the scenario's clients is ever online is
    refused; under ``async``, ``round.concurrency`` may not exceed the clients ever online; a
    device trace needs a model (not quadratic data); a window's or ``local_time``'s steps at the
    trace's fastest speed (:func:`_trace_fastest`) follow the rule of :func:`_check_job_steps`."""
    if sc.round.policy in ("wait", "overcommit", "async") and not any(bool(c.online.any()) for c in trace.clients):
        raise ScenarioError(f"system.trace: no client is ever online in {trace.path}; policy {sc.round.policy} "
                            "would wait forever")
    if getattr(trace, "device", False) and sc.data.name == "quadratic":  # issue 28 item 6: the clock needs the model's bytes
        raise ScenarioError(f"system.trace: {trace.path} is a device trace (sample_seconds, bandwidths): it times "
                            "steps and transfers by the model's size, and quadratic data has no model; "
                            "use a speed trace (client,start,end,online,speed)")
    if _job_span(sc) is not None:
        fastest = _trace_fastest(sc, trace)
        if fastest > 0:
            _check_job_steps(sc, fastest, where=f" in {trace.path}")
    rnd = sc.round
    if rnd.policy == "async" and rnd.concurrency is not None:
        # client k replays trace entry k mod n: count the scenario's clients that are ever online
        online = [bool(c.online.any()) for c in trace.clients]
        m, n = sc.data.num_clients, len(online)
        ever = (m // n) * sum(online) + sum(online[: m % n])
        if rnd.concurrency > ever:
            raise ScenarioError(f"round.concurrency: {rnd.concurrency} is more than the {ever} clients ever online "
                                f"in {trace.path} (async keeps that many training)")


def check_compute_steps(sc: Any, step_flops: float | None) -> None:
    """``system.compute`` with a job whose compute time the round fixes (``policy: window``: window
    - 2 latency; ``policy: async`` with ``round.local_time`` S): the steps it fits at the fastest
    device, that time x fastest FLOP/s / step FLOPs / smallest slowdown, must not exceed
    ``MAX_STEPS_PER_JOB`` unless capped, as for speeds, and a ``local_time`` must fit at least one
    step. Needs the model's step FLOPs: the run checks it once the model is built (before its
    folder is touched), ``fedsim validate`` counts them for this check alone."""
    system = sc.system
    if system.compute is None or _job_span(sc) is None or not step_flops:
        return
    _check_job_steps(sc, system.compute.flops, step_flops, "system.compute.flops")


def _check_span_steps(sc: Any) -> None:
    """The steps rule at ``system.speed`` (a trace gives the speeds instead: :func:`check_trace`)."""
    if sc.system.speed is not None and sc.system.trace is None and _job_span(sc) is not None:
        _check_job_steps(sc, sc.system.speed)


def _trace_fastest(sc: Any, trace: Any) -> float:
    """The fastest steps per second a job can run at on the scenario's clients in ``trace``: the
    largest online speed (``trace_semantics: fedscale``: the largest session speed, at which its
    jobs run throughout), of the entries its clients replay (client k: entry k mod n); a device
    trace's samples per second over 3 x ``algorithm.batch_size`` samples a step, as the clock."""
    n = len(trace.clients)
    m = sc.data.num_clients
    used = trace.clients if m is None or m >= n else trace.clients[:m]
    if sc.system.trace_semantics == "fedscale":
        speeds = [c.session_speed for c in used]
    else:
        speeds = [float(c.speed[c.online].max()) if c.online.any() else 0.0 for c in used]
    fastest = max(speeds, default=0.0)
    return fastest / (3 * sc.algorithm.batch_size) if getattr(trace, "device", False) else fastest


def _job_span(sc: Any) -> tuple[float, str] | None:
    """(the most seconds a job computes, the key that sets them): ``window``: window - 2 latency;
    ``async`` with ``round.local_time`` S: S; None for prescribed work."""
    rnd = sc.round
    if rnd.policy == "window":
        return rnd.window - 2 * sc.system.latency, "round.window"
    if rnd.policy == "async" and rnd.local_time is not None:
        return float(rnd.local_time), "round.local_time"
    return None


def _check_job_steps(sc: Any, rate: Any, step_cost: float = 1.0, path: str | None = None,
                     where: str = "") -> None:
    """One rule for the steps a job's fixed compute time fits (a window, an async ``local_time``),
    at the fastest ``rate`` (speed, or FLOP/s over ``step_cost`` FLOPs) and smallest slowdown:
    more than ``MAX_STEPS_PER_JOB`` is refused unless ``round.max_local_steps`` (or, for a window,
    ``round.local_steps``) caps it there; a ``local_time`` that fits no whole step (the clock's
    ``whole_steps``) is refused: every job would be dropped and the server would never update.
    Skipped when the speed or slowdown has no bound (lognormal, exponential). ``path``: the
    FLOP/s key blamed (``system.compute.flops``); ``where``: the speeds' source when not the key
    (a trace)."""
    from .clock.draws import whole_steps

    system, rnd = sc.system, sc.round
    seconds, key = _job_span(sc)
    fastest, slow = dist_high(rate), 1.0 if system.slowdown is None else dist_low(system.slowdown)
    if fastest == math.inf or slow == 0:
        return
    steps = seconds * fastest / step_cost / slow
    if key == "round.local_time" and whole_steps(steps) == 0:
        at = f"device ({fastest:g} FLOP/s, {step_cost:.3g} FLOPs a step" if path else f"speed{where} ({fastest:g} steps/s"
        slowed = "" if system.slowdown is None else f", smallest slowdown {slow:g}"
        raise ScenarioError(f"{path + ': round.local_time' if path else key}: {seconds:g} s fits no local step at the "
                            f"fastest {at}{slowed}): every job would be dropped and the server would never update")
    caps = [c for c in (rnd.max_local_steps, dist_high(rnd.local_steps) if rnd.local_steps is not None else None) if c is not None]
    if (caps and min(caps) <= MAX_STEPS_PER_JOB) or steps <= MAX_STEPS_PER_JOB:
        return
    span = "a window" if key == "round.window" else "round.local_time"
    if path:
        raise ScenarioError(
            f"{path}: {span} fits {steps:.3g} local steps per job at the fastest device "
            f"({step_cost:.3g} FLOPs a step), more than {MAX_STEPS_PER_JOB:,} (cap with round.max_local_steps)"
        )
    shorten = "the window" if key == "round.window" else "local_time"
    raise ScenarioError(
        f"{key}: fits {steps:.3g} local steps per job at the fastest speed{where}, more than "
        f"{MAX_STEPS_PER_JOB:,} (shorten {shorten}, or cap with round.max_local_steps)"
    )


def _check_values(path: str, value: Any, low: float, high: float) -> None:

    kind = getattr(value, "dist", None)
    if kind == "lognormal":
        _between(f"{path}.median", value.median, low, high)
        _at_most(f"{path}.sigma", value.sigma, MAX_SIGMA)
    elif kind == "exponential":
        _between(f"{path}.mean", value.mean, low, high)
    elif value is not None:
        _between(path, dist_low(value), low, high)
        _between(path, dist_high(value), low, high)


def _between(path: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise ScenarioError(f"{path}: must be in [{low:g}, {high:g}]")


def _at_most(path: str, value: float | None, high: float, low: float | None = None) -> None:
    if value is None:
        return
    if low is not None and value < low:
        raise ScenarioError(f"{path}: must be >= {low}")
    if value > high:
        raise ScenarioError(f"{path}: must be <= {high:,}" if isinstance(high, int) else f"{path}: must be <= {high:g}")


def _check_ints(value: Any, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -MAX_INT - 1 <= value <= MAX_INT:
        raise ScenarioError(f"{path or 'scenario'}: {value} does not fit in 64 bits")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_ints(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):  # floats, the bulk of long per-client lists, need no call
            if type(v) is not float:
                _check_ints(v, f"{path}.{i}")
