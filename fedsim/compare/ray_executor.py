"""Running a comparison's stacks as Ray tasks: ``fedsim compare --executor ray`` (docs/comparisons.md).

The driver (the process that plans) validates every (cell, seed) exactly as for local processes,
plans the runs that are not already complete into stacks as a local comparison does
(:func:`fedsim.compare.stacks.plan_stacks`, the plan logged first) and submits one Ray task per
stack (:func:`_stack`; with ``--no-stack`` one per run, :func:`_cell`). A task receives its runs'
resolved scenarios as YAML text (never a built workload), runs them in temporary folders of its own
worker -- a stack with :func:`fedsim.compare.stack.run_stack`, a run alone with
:func:`fedsim.compare.execute.run_one` -- and returns each run's files as bytes as soon as that run
ends; the driver stages them beside the run's folder (each file with
:class:`fedsim.atomic.AtomicFile`) and renames the staged folder into place. No filesystem is
shared between nodes, and a run folder in the comparison is either complete or absent: a driver
stopped at any point resumes with the same command.

Threads are fixed when the session opens, by the rule a local run follows
(:mod:`fedsim.engine.threads`): the driver's thread budget B goes with every task, and the worker
runs inside :func:`~fedsim.engine.threads.fixed_budget` (B), so it picks the threads and the chunk
of clients a local run (or stack) picks, whatever ``OMP_NUM_THREADS`` Ray gave it, and writes
the same ``info.yaml``. Resources of a task follow its cell (:func:`planned_threads`):
``engine.threads`` CPUs when pinned, 1 for the quadratic problem (the rule's one thread), else B
(the rule's count for batched chunks and conv nets; a model it steps one client at a time holds B
CPUs and uses one) -- on a cluster whose largest node has fewer CPUs than B, that many, the run
still using B threads; and ``gpus_per_cell`` of a GPU when ``engine.device`` is ``cuda``. A cell
that asks for no GPU sees none (``CUDA_VISIBLE_DEVICES`` empty), so ``engine.device: auto`` runs
on the CPU.

Faults: a task whose worker process or node is lost (any Ray system error: the worker crashed or
was killed, the node died, the memory monitor killed it, its result was lost) is submitted again
with its runs that had not ended, at most ``retries`` times, wherever Ray places it; each from the
folder the driver holds. A run that fails (bad input, its plug-in raising) is recorded as failed
once, with its error, and not retried; a task that raises fails its runs not ended with its error.
Runs are deterministic, so a retried run writes the bytes of an undisturbed one (a stack retried
with fewer runs: as a local stack resumed with fewer, docs/comparisons.md).

Nothing here imports Ray until a session opens, so ``import fedsim`` never loads it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import os
import re
import secrets
import socket
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..scenario import Scenario, ScenarioError, dump_scenario
from .plan import CompareRun
from .runfiles import read_folder, remove_leftovers, snapshot, store_folder, write_folder

__all__ = ["RETRIES", "RayOptions", "check_options", "planned_threads", "cell_resources", "RaySession"]

#: Default number of times a run is submitted again after its worker process or node was lost.
RETRIES = 3
#: Most retries one may ask for (a bound, so that a cell that kills its node cannot loop forever).
MAX_RETRIES = 100
#: Ray's token authentication settings (a private instance gets a token of its own unless one is set).
_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
#: Ray's switch for clusters of several machines; "0" keeps every Ray process of a machine on 127.0.0.1.
_SINGLE_NODE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass(frozen=True)
class RayOptions:
    """How a comparison uses Ray.

    Attributes:
        address: ``None``: start a Ray instance on this machine only (bound to 127.0.0.1, no
            dashboard), stopped when the comparison ends; ``"auto"``: the cluster this machine
            joined with ``ray start``; ``"HOST:PORT"``: that cluster's head (its GCS port).
        retries: times a run is submitted again after its worker process or node was lost.
        gpus_per_cell: the GPU fraction a cell with ``engine.device: cuda`` asks for (0 < f <= 1).
    """

    address: str | None = None
    retries: int = RETRIES
    gpus_per_cell: float = 1.0


def check_options(address: str | None, retries: int | None, gpus_per_cell: float | None) -> RayOptions:
    """Validated :class:`RayOptions` (None: the default); ScenarioError naming the option."""
    if address is not None:
        address = str(address).strip()
        if address != "auto" and not _host_port(address):
            raise ScenarioError(f"--address {address!r}: expected auto or HOST:PORT (the head node's GCS address: "
                                "an ASCII host name, IPv4 or [IPv6] address, and a port from 1 to 65535)")
    if retries is None:
        retries = RETRIES
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise ScenarioError(f"--retries: must be an integer from 0 to {MAX_RETRIES}, got {retries!r}")
    if gpus_per_cell is None:
        gpus_per_cell = 1.0
    try:
        g = float(gpus_per_cell)
    except (TypeError, ValueError):
        g = math.nan
    if isinstance(gpus_per_cell, bool) or not 0 < g <= 1:
        raise ScenarioError(f"--gpus-per-cell: must be in (0, 1], got {gpus_per_cell!r}")
    return RayOptions(address, retries, g)


_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _host_port(address: str) -> bool:
    """Whether ``address`` is ``HOST:PORT`` that a socket can be asked for: ASCII digits for a port
    from 1 to 65535 (``int`` would take other scripts' digits, and refuse some that ``isdigit``
    takes); a host that is a bracketed IPv6 address, or a name or IPv4 address of ASCII labels of
    1 to 63 characters, at most 253 in all (what the IDNA codec under ``socket`` encodes)."""
    host, sep, port = address.rpartition(":")
    if not (sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return False
    if host.startswith("[") and host.endswith("]"):
        try:
            return ipaddress.ip_address(host[1:-1]).version == 6
        except ValueError:
            return False
    labels = host.split(".")
    return host.isascii() and len(host) <= 253 and all(_LABEL.fullmatch(x) for x in labels)


def planned_threads(sc: Scenario, budget: int | None = None) -> int:
    """The CPUs a run of ``sc`` is planned to use, by the engine's thread rule as far as the
    scenario decides it (:func:`fedsim.engine.threads.default_threads`): ``engine.threads`` when
    pinned; 1 for the quadratic problem; else the thread budget ``budget`` (None: this process's
    :func:`~fedsim.engine.threads.thread_budget`), the count the rule gives batched chunks and
    conv nets, and the most it gives any run."""
    if sc.engine.threads:
        return int(sc.engine.threads)
    if sc.data.name == "quadratic" or sc.data.centers is not None:
        return 1
    if budget is None:
        from ..engine.threads import thread_budget  # torch: only when a budget is needed

        budget = thread_budget()
    return int(budget)


def cell_resources(sc: Scenario, gpus_per_cell: float = 1.0, budget: int | None = None) -> dict:
    """The Ray resources of a run of ``sc``: ``num_cpus`` = :func:`planned_threads` and
    ``num_gpus`` = ``gpus_per_cell`` when ``engine.device`` is ``cuda``, else 0."""
    gpu = sc.engine.device == "cuda"
    return {"num_cpus": planned_threads(sc, budget), "num_gpus": float(gpus_per_cell) if gpu else 0.0}


def check_cells(runs: Sequence[CompareRun]) -> None:
    """Refuse what a cluster cannot run as written: ``engine.device: cuda:N`` names one machine's
    GPU, while Ray gives each cell its own GPU (visible to it as ``cuda``)."""
    for r in runs:
        dev = r.scenario.engine.device
        if dev.startswith("cuda:"):
            raise ScenarioError(f"cell {r.cell.name}: engine.device: {dev} names a GPU of one machine; with "
                                "--executor ray use cuda (Ray gives each cell its GPU)")


# --------------------------------------------------------------------------- what travels to workers
def _installed(path: str) -> bool:
    """Whether ``path`` lies in the interpreter's own or installed packages (then every node is
    expected to have it installed, like fedsim itself)."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    p = os.path.realpath(path)
    return any(p == r or p.startswith(os.path.realpath(r) + os.sep) for r in roots)


def local_modules(plugins: Sequence[str]) -> tuple[list, list[str]]:
    """The ``--plugin`` modules to ship to a cluster (Ray's ``py_modules``): the top-level module or
    package of each plugin that was imported from a folder outside the installed packages. Returns
    (modules, notes)."""
    mods, notes, seen = [], [], set()
    for name in plugins:
        top = name.split(".")[0]
        mod = sys.modules.get(top)
        if mod is None or top in seen:
            continue
        seen.add(top)
        paths = list(getattr(mod, "__path__", []) or [])
        where = paths[0] if len(paths) == 1 else getattr(mod, "__file__", None)
        if where is None or len(paths) > 1:
            notes.append(f"--plugin {name}: not sent to the cluster (a namespace package); install it on every node")
            continue
        if not _installed(where):
            mods.append(mod)
    return mods, notes


def registered_pieces() -> tuple[list[tuple], list[str]]:
    """The driver's registered pieces as ``[(kind, name, payload, digest, fallback)]`` for workers.

    ``payload`` is a ``"module:attribute"`` string for a lazy registration, else the object pickled
    with cloudpickle (by value when defined in ``__main__``, a notebook or the script; by reference
    when imported from a module, which must then be importable on the worker). ``fallback`` is the
    lazy target a worker registers when it cannot unpickle the object, so that only a run naming it
    fails, with the registry's one-line error. Every name is sent, built-ins too (as their lazy
    targets, a few bytes), so that a worker that ran an earlier comparison of this driver also
    drops what the driver has since put back. Returns (pieces, notes about pieces that cannot be
    pickled).
    """
    from ray import cloudpickle

    from .. import registries

    pieces, notes = [], []
    for kind, reg in registries.ALL.items():
        items = getattr(reg, "_items", {})  # the Registry's own table: lazy targets are not public
        for name in reg.names():
            item = items.get(name)
            target = getattr(item, "target", None)
            if isinstance(target, str):
                payload: Any = target
            else:
                try:
                    payload = cloudpickle.dumps(item)
                except Exception as err:  # noqa: BLE001 - any object may refuse pickling
                    notes.append(f"{kind} {name!r} cannot be sent to Ray workers ({type(err).__name__}: {err}); "
                                 "runs naming it will fail there")
                    continue
            digest = hashlib.sha256(payload if isinstance(payload, bytes) else payload.encode()).hexdigest()
            mod, qual = getattr(item, "__module__", None), getattr(item, "__qualname__", "")
            fallback = f"{mod}:{qual}" if mod and qual and "<" not in qual and "." not in qual else f"{mod or '?'}:{name}"
            pieces.append((kind, name, payload, digest, fallback))
    return pieces, notes


# --------------------------------------------------------------------------- the worker's side
_applied: dict[tuple[str, str], str] = {}  # (kind, name) -> digest of what this worker registered


def _same(reg: Any, name: str, obj: Any) -> bool:
    """Whether the worker's own ``name`` (a built-in or a plug-in's) is ``obj``, the driver's."""
    try:
        mine = reg.get(name)
        return mine is obj or bool(mine == obj)
    except Exception:  # noqa: BLE001 - not comparable, or not loadable here: take the driver's
        return False


def _prepare_worker(plugins: Sequence[str], pieces: Sequence[tuple]) -> None:
    """Before a cell: import the installed plug-ins and ``--plugin`` modules (once per process), then
    make the registries hold the driver's pieces: a name the worker lacks, or holds as something
    else (a built-in the driver replaced), gets the driver's; each piece once per process."""
    from ray import cloudpickle

    from .. import registries
    from ..plugins import load_plugins

    load_plugins(tuple(plugins))
    for kind, name, payload, digest, fallback in pieces:
        if _applied.get((kind, name)) == digest:
            continue
        reg = registries.ALL[kind]
        obj: Any = payload
        if isinstance(payload, bytes):
            try:
                obj = cloudpickle.loads(payload)
            except Exception:  # noqa: BLE001 - e.g. its module is not importable here
                obj = None if name in reg else fallback  # a lazy target: runs naming it fail with one line
        if obj is not None and not (name in reg and not isinstance(obj, str) and _same(reg, name, obj)):
            reg.register(name, obj, replace=True)
        _applied[(kind, name)] = digest


def _cell(run_one: Callable, scenario_text: str, table_format: str, plugins: tuple, pieces: list, old: dict | None,
          gpu: bool, budget: int | None = None):
    """The Ray task of one run (a generator): yields where it started, then ``{"result", "files"}``.
    ``run_one(scenario_text, folder, table_format)`` runs it (:func:`fedsim.compare.execute.run_one`)
    with the thread budget ``budget`` the driver planned (:func:`fedsim.engine.threads.fixed_budget`)."""
    import ray

    from ..engine.threads import fixed_budget

    yield {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}
    if not gpu:  # a cell that holds no GPU uses none (device auto -> cpu)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    _prepare_worker(plugins, pieces)
    with tempfile.TemporaryDirectory(prefix="fedsim-cell-") as tmp:
        folder = Path(tmp) / "run"
        if old is not None:
            write_folder(folder, old)
        with fixed_budget(budget):  # the threads and chunk a local run of the cell chooses
            res = run_one(scenario_text, str(folder), table_format)
        files = read_folder(folder)
    yield {"result": res, "files": files}


def _stack(runs: Sequence[tuple[str, int, str]], table_format: str, plugins: tuple, pieces: list,
           olds: Sequence[dict | None], gpu: bool, budget: int | None = None, stack_rows: int | None = None,
           run_one: Callable | None = None):
    """The Ray task of one planned stack (a generator): yields where it started, then one item per
    event as it happens: ``{"log": line}`` (the stack's log lines), and per run as it ends
    ``{"index": i, "result", "files"}`` or ``{"index": i, "error": "Type: message"}``.

    ``runs``: (cell name, seed, scenario text) per run; ``olds``: the files of each run's folder
    (an unfinished run continues from its checkpoint), None where there is none. The stack runs
    with :func:`fedsim.compare.stack.run_stack` (a stack of one run: ``run_one``) in a thread of
    this worker, inside :func:`~fedsim.engine.threads.fixed_budget` (``budget``), so that each
    run's folder is sent back the moment it ends; a cancelled task stops it after its current step.
    An error of the stack itself (not of one run) is raised: the driver fails its runs left."""
    import queue
    import threading

    import ray
    import yaml

    from ..engine.threads import fixed_budget
    from ..scenario import parse_scenario
    from .plan import Cell
    from .stack import run_stack

    yield {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}
    if not gpu:  # a stack that holds no GPU uses none (device auto -> cpu)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    _prepare_worker(plugins, pieces)
    with tempfile.TemporaryDirectory(prefix="fedsim-stack-") as tmp:
        todo = []
        for i, ((name, seed, text), old) in enumerate(zip(runs, olds)):
            folder = Path(tmp) / f"run{i}"
            if old is not None:
                write_folder(folder, old)
            todo.append(CompareRun(Cell(name, {}, {}), seed, folder, parse_scenario(yaml.safe_load(text))))
        where = {id(r): i for i, r in enumerate(todo)}
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        crash: list[BaseException] = []

        def finished(r: CompareRun, res: dict | None, err: BaseException | None) -> None:
            i = where[id(r)]
            if err is None:
                try:
                    events.put({"index": i, "result": res, "files": read_folder(r.folder)})
                    return
                except Exception as e:  # noqa: BLE001 - its folder cannot travel: that run's error
                    err = e
            events.put({"index": i, "error": getattr(err, "described", None) or f"{type(err).__name__}: {err}"})

        def status(text: str | None) -> None:  # after each step of the stack: stop when cancelled
            if stop.is_set():
                raise KeyboardInterrupt

        def body() -> None:
            try:
                with fixed_budget(budget):  # the threads and chunk a local run of the stack chooses
                    if len(todo) == 1:
                        r = todo[0]
                        try:
                            finished(r, run_one(runs[0][2], str(r.folder), table_format), None)
                        except Exception as err:  # noqa: BLE001 - the run's own error
                            finished(r, None, err)
                    else:
                        run_stack(todo, table_format, finished, max_rows=stack_rows,
                                  log=lambda line: events.put({"log": line}), status=status)
            except BaseException as err:  # noqa: BLE001 - the stack's own error: raised by the task
                crash.append(err)
            finally:
                events.put(None)

        th = threading.Thread(target=body, name="fedsim-stack", daemon=True)
        th.start()
        try:
            while (item := events.get()) is not None:
                yield item
        finally:
            stop.set()
            th.join()
        if crash and not isinstance(crash[0], KeyboardInterrupt):
            raise crash[0]


# --------------------------------------------------------------------------- the driver's side
#: Seconds a TCP connection to ``--address`` may take before it counts as unreachable.
PROBE_TIMEOUT_S = 10.0


def _probe(address: str) -> None:
    """ScenarioError unless something accepts a TCP connection at ``HOST:PORT`` (the head's GCS)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except (OSError, UnicodeError, ValueError) as err:  # UnicodeError: the IDNA codec refused the host
        why = getattr(err, "strerror", None) or type(err).__name__
        raise ScenarioError(f"--address {address}: no Ray cluster answers there ({why})") from None


def _set_cluster_mode(ray: Any, enabled: bool | None) -> bool | None:
    """Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when it is imported: set its constant
    too (None: leave it), so that an instance started after ``import ray`` binds to 127.0.0.1 as
    well. Returns the value it had (None when this Ray has no such constant)."""
    consts = getattr(getattr(ray, "_private", None), "ray_constants", None)
    before = getattr(consts, "ENABLE_RAY_CLUSTER", None)
    if before is not None and enabled is not None:
        consts.ENABLE_RAY_CLUSTER = enabled
    return before


def _message(err: BaseException) -> str:
    """``Type: message`` of a task's own exception (its cause, not Ray's wrapper and traceback)."""
    import ray

    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, BaseException):
            return f"{type(cause).__name__}: {cause}"
        return f"{err.function_name}: {str(err).strip().splitlines()[-1]}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"


class TaskFailure(Exception):
    """A run that failed on the cluster; ``described`` is its ``Type: message`` as the local executor
    writes a run's exception (the worker's exception, not Ray's wrapper)."""

    def __init__(self, described: str):
        super().__init__(described)
        self.described = described


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


@dataclass
class _Attempt:
    runs: tuple[CompareRun, ...]  # the task's runs (one, or a stack's runs still to do)
    gen: Any
    attempt: int  # 1 = first submission
    started: float | None = None
    host: str = ""
    stacked: bool = False  # a stack task (:func:`_stack`), else one run (:func:`_cell`)
    left: set[int] | None = None  # indices of ``runs`` not ended yet

    def __post_init__(self):
        if self.left is None:
            self.left = set(range(len(self.runs)))


class RaySession:
    """One comparison's use of Ray: :meth:`open` before anything is written (connects, checks that
    the cells fit), :meth:`run` the runs to do, :meth:`close` (stops a Ray instance it started).

    Args:
        options: :class:`RayOptions`.
        plugins: ``--plugin`` modules (already imported here).
        log: called with one line per note, retry and finished run.
    """

    def __init__(self, options: RayOptions, plugins: Sequence[str] = (), log: Callable[[str], None] | None = None):
        self.options = options
        self.plugins = tuple(plugins)
        self.log = log or (lambda line: None)
        self.ray: Any = None
        self.owned = False  # this session called ray.init (and so shuts it down)
        self._environ: dict[str, str | None] = {}  # variables set for a private instance, restored by close
        self.budget: int | None = None  # the driver's thread budget, fixed when the session opens
        self.largest_cpus: float | None = None  # CPUs of the cluster's largest node (``_check_fit``)
        self._cluster_mode: bool | None = None  # Ray's ENABLE_RAY_CLUSTER before a private instance
        self._logger_level: int | None = None  # of Ray's token-setup logger, quieted for a private instance

    # ---------------------------------------------------------------- connect
    def open(self, runs: Sequence[CompareRun]) -> "RaySession":
        """Connect (or use the caller's ``ray.init``) and check that every cell fits a node.

        Raises:
            ScenarioError: Ray missing, an address it cannot connect to, ``cuda:N`` cells, or (on
                the instance this session starts) a cell asking for more than the machine has.
        """
        check_cells(runs)
        from ..engine.threads import thread_budget

        self.budget = thread_budget()  # plan time: every task runs with this machine's budget
        try:
            import ray
        except ImportError:
            raise ScenarioError("--executor ray: Ray is not installed (pip install 'fedsim[ray]')") from None
        self.ray = ray
        try:
            self._connect()
            self._check_fit(runs)
        except BaseException:
            self.close()
            raise
        return self

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            if self.options.address is not None:
                self.log(f"Ray is already initialized in this process; --address {self.options.address} is not used")
            mods, notes = local_modules(self.plugins)
            if mods:
                notes.append("Ray was initialized by the caller: --plugin modules "
                             f"{', '.join(m.__name__ for m in mods)} are not sent to the cluster (pass them in "
                             "ray.init(runtime_env={'py_modules': [...]}) or install them on every node)")
            for n in notes:
                self.log(n)
        else:
            self._init()

    def _init(self) -> None:
        ray, address = self.ray, self.options.address
        kw: dict[str, Any] = {"logging_level": "WARNING", "configure_logging": True}
        if address is None:  # a private instance on this machine only
            kw.update(address="local", include_dashboard=False)
            self._setenv(_SINGLE_NODE, "0")  # Ray's single-machine mode: every process on 127.0.0.1
            self._cluster_mode = _set_cluster_mode(ray, False)
            if not any(k in os.environ for k in _AUTH_VARS):
                # Ray's token authentication with a token of this instance's own, held in the
                # environment of its processes (Ray would otherwise write ~/.ray/auth_token)
                self._setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
                self._setenv("RAY_AUTH_MODE", None)  # Ray sets it to "token": restored by close
                quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
                self._logger_level = quiet.level
                quiet.setLevel(logging.ERROR)  # not its "token authentication is enabled" warning
        else:
            if address != "auto":  # Ray waits minutes on an address where no cluster answers
                _probe(address)
            mods, notes = local_modules(self.plugins)
            for n in notes:
                self.log(n)
            kw["address"] = address
            if mods:
                kw["runtime_env"] = {"py_modules": mods}
        try:
            ray.init(**kw)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            where = "this machine" if address is None else f"--address {address}"
            raise ScenarioError(f"--executor ray: cannot start or reach Ray at {where} ({first})") from None
        self.owned = True

    def _setenv(self, key: str, value: str | None) -> None:
        """Set (None: only remember) an environment variable, restored by :meth:`close`."""
        self._environ.setdefault(key, os.environ.get(key))
        if value is not None:
            os.environ[key] = value

    def _check_fit(self, runs: Sequence[CompareRun]) -> None:
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        cpus = max((n.get("CPU", 0) for n in nodes), default=0)
        gpus = max((n.get("GPU", 0) for n in nodes), default=0)
        self.largest_cpus = cpus
        capped = False
        for r in runs:
            need = cell_resources(r.scenario, self.options.gpus_per_cell, self.budget)
            short = []
            pinned = bool(r.scenario.engine.threads)
            if need["num_cpus"] > cpus and not pinned and cpus >= 1:
                if not capped:  # a node smaller than this machine: ask for what fits, run the planned threads
                    capped = True
                    self.log(f"runs planned with this machine's thread budget ({need['num_cpus']} threads) ask Ray for "
                             f"the largest node's {cpus:g} CPUs and still run {need['num_cpus']} threads, as locally")
            elif need["num_cpus"] > cpus:
                why = "engine.threads" if pinned else "the thread budget"
                short.append(f"{need['num_cpus']} CPUs ({why}; the largest node has {cpus:g})")
            if need["num_gpus"] > gpus:
                short.append(f"a GPU (engine.device cuda; the largest node has {gpus:g})")
            if not short:
                continue
            if self.owned and self.options.address is None:
                raise ScenarioError(f"cell {r.cell.name}: asks for {' and '.join(short)} on this machine's Ray instance")
            self.log(f"cell {r.cell.name} asks for {' and '.join(short)}: its runs wait until such a node joins")
            return

    def close(self) -> None:
        """Shut down the connection this session opened (and the instance it started); a caller's
        ``ray.init`` is left as it was."""
        if self.owned and self.ray is not None:
            self.ray.shutdown()
            self.owned = False
            _set_cluster_mode(self.ray, self._cluster_mode)
            self._cluster_mode = None
        if self._logger_level is not None:
            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(self._logger_level)
            self._logger_level = None
        for k, v in self._environ.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._environ = {}

    # ---------------------------------------------------------------- run
    def run(
        self,
        todo: Sequence[CompareRun],
        table_format: str,
        finished: Callable[..., None],
        run_one: Callable,
        status: Callable[[str], None] | None = None,
        *,
        stack: bool = False,
        stack_rows: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> int:
        """Run ``todo`` as Ray tasks: with ``stack``, one task per planned stack
        (:func:`fedsim.compare.stacks.plan_stacks` with ``stack_rows``, the plan logged first, as
        locally), else one task per run; ``run_one`` (a module-level function, sent by reference)
        runs a run alone. ``finished(run, result, error, note)`` is called once per run, as it
        ends (``error`` a :class:`TaskFailure` for a run that failed on its worker, or after its
        retries). ``status`` gets the cluster's counts whenever they change; ``log`` (default: the
        session's) the plan and the stacks' log lines. Returns the number of retries."""
        ray = self.ray
        log = log or self.log
        remove_leftovers(r.folder for r in todo)
        pieces, notes = registered_pieces()
        for n in notes:
            self.log(n)
        groups: list[tuple[CompareRun, ...]]
        if stack:
            from .stacks import plan_lines, plan_stacks

            stacks = plan_stacks(todo, stack_rows)
            for ln in plan_lines(stacks):
                log(ln)
            groups = [st.runs for st in stacks]
        else:
            groups = [(r,) for r in todo]
        pieces_ref = ray.put(pieces)
        opts = self.options
        cpu_fn = ray.remote(max_retries=0)(_cell)
        gpu_fn = ray.remote(num_gpus=1, max_retries=0, max_calls=1)(_cell)  # a fresh process per GPU run
        cpu_stack = ray.remote(max_retries=0)(_stack)
        gpu_stack = ray.remote(num_gpus=1, max_retries=0, max_calls=1)(_stack)
        pending: dict[Any, _Attempt] = {}
        snapshots: dict[Path, tuple | None] = {}
        counts = {"done": 0, "failed": 0, "retried": 0}
        total = len(todo)
        t0 = time.perf_counter()

        def submit(runs: tuple[CompareRun, ...], olds: list, attempt: int) -> None:
            """One task for ``runs`` (one run, or runs of one stack: their data, model and engine
            settings are the same, so are their resources); ``olds``: their folders' files (None:
            no folder)."""
            first = runs[0].scenario
            need = cell_resources(first, opts.gpus_per_cell, self.budget)
            cpus = need["num_cpus"]
            if not first.engine.threads and self.largest_cpus is not None and self.largest_cpus >= 1:
                cpus = min(cpus, int(self.largest_cpus))  # a node smaller than the budget: the run still uses it
            gpu = bool(need["num_gpus"])
            kw = dict(num_cpus=cpus, num_gpus=need["num_gpus"], num_returns="streaming")
            if stack:
                fn = gpu_stack if gpu else cpu_stack
                gen = fn.options(**kw).remote(
                    [(r.cell.name, r.seed, dump_scenario(r.scenario)) for r in runs], table_format, self.plugins,
                    pieces_ref, ray.put(olds), gpu, self.budget, stack_rows, run_one)
            else:
                old = ray.put(olds[0]) if olds[0] is not None else None
                gen = (gpu_fn if gpu else cpu_fn).options(**kw).remote(
                    run_one, dump_scenario(first), table_format, self.plugins, pieces_ref, old, gpu, self.budget)
            pending[gen] = _Attempt(tuple(runs), gen, attempt, stacked=stack)

        def line() -> str:
            running = sum(len(a.left) for a in pending.values() if a.started is not None)
            ended = counts["done"] + counts["failed"]
            eta = (time.perf_counter() - t0) / ended * (total - ended) if ended else None
            return (f"{counts['done']} done, {running} running, {counts['retried']} retried, {counts['failed']} "
                    f"failed of {total}; ETA {_fmt_eta(eta)}")

        def show() -> None:
            if status is not None:
                status(line())

        def end(a: _Attempt, i: int, res: dict | None, err: BaseException | None) -> None:
            """Run ``i`` of ``a`` ended; ``a`` leaves the pending tasks with its last run."""
            a.left.discard(i)
            if not a.left:
                pending.pop(a.gen, None)
            counts["failed" if err is not None else "done"] += 1
            where = f" on {a.host}" if a.host else ""
            finished(a.runs[i], res, err, f"{where} | {line()}")
            show()

        def end_all(a: _Attempt, err: BaseException) -> None:
            for i in sorted(a.left):
                end(a, i, None, err)
            pending.pop(a.gen, None)

        def try_submit(runs: tuple[CompareRun, ...], attempt: int) -> None:
            """``runs`` submitted with their folders' files; a run whose folder cannot travel (a
            symbolic link in it, ...) fails alone, the others go."""
            ok, olds = [], []
            for r in runs:
                try:
                    snap = snapshot(r.folder)
                    snapshots[r.folder] = snap
                    olds.append(read_folder(r.folder) if snap is not None else None)
                    ok.append(r)
                except (ScenarioError, OSError) as err:
                    end_all(_Attempt((r,), None, attempt), TaskFailure(f"{type(err).__name__}: {err}"))
            if ok:
                submit(tuple(ok), olds, attempt)

        for runs in groups:
            try_submit(runs, 1)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for gen in ready:
                    a = pending[gen]
                    try:
                        item = ray.get(next(gen))
                    except StopIteration:  # no result (left): treat as a lost worker
                        item, err = None, RuntimeError("the task ended without a result")
                    except ray.exceptions.RayTaskError as e:
                        end_all(a, TaskFailure(_message(e)))
                        continue
                    except ray.exceptions.TaskCancelledError:
                        raise KeyboardInterrupt from None
                    except ray.exceptions.RayError as e:
                        item, err = None, e
                    if item is None:  # the worker process or its node was lost
                        pending.pop(gen, None)
                        if not a.left:
                            continue
                        rest = tuple(a.runs[i] for i in sorted(a.left))  # the runs that ended stay done
                        if a.attempt <= opts.retries:
                            counts["retried"] += len(rest)
                            what = rest[0].label if len(rest) == 1 else f"the stack of {rest[0].label} ({len(rest)} runs)"
                            log(f"retrying {what} (attempt {a.attempt + 1} of {opts.retries + 1}): {_message(err)}")
                            try_submit(rest, a.attempt + 1)
                            show()
                        else:
                            end_all(a, TaskFailure(f"{_message(err)} (lost {a.attempt} times; --retries {opts.retries})"))
                        continue
                    if "log" in item:
                        log(str(item["log"]))
                        continue
                    if "files" not in item and "error" not in item:  # it started
                        a.started, a.host = time.perf_counter(), str(item.get("host", ""))
                        show()
                        continue
                    i = int(item.get("index", 0))
                    if "error" in item:
                        end(a, i, None, TaskFailure(str(item["error"])))
                        continue
                    r = a.runs[i]
                    try:
                        store_folder(r.folder, item["files"], snapshots.get(r.folder))
                    except (ScenarioError, OSError) as e:
                        end(a, i, None, TaskFailure(f"{type(e).__name__}: {e}"))
                        continue
                    end(a, i, item["result"], None)
        except BaseException:
            for gen in list(pending):
                try:
                    ray.cancel(gen)  # KeyboardInterrupt in the task; its worker stays for later runs
                except Exception:  # noqa: BLE001 - cancelling is best effort; the driver is stopping
                    pass
            raise
        return counts["retried"]
