"""Intra-op thread policy of the engine, and core slots shared by runs (docs/performance.md).

* ``usable_cores()`` -- cores this process may run on: its CPU affinity, capped by a cgroup CPU
  quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``) rounded down.
* ``thread_budget()`` -- the most threads one run uses: usable cores, capped by the physical cores
  among them and by ``OMP_NUM_THREADS`` when set, divided among torchrun's local ranks.
* ``default_threads(work, chunk)`` -- 1 for the closed-form quadratic and a small model stepped one
  client at a time, the budget for batched chunks and conv nets; ``engine.threads`` pins it.

The count depends on the machine, the launch and the scenario only, never on what else runs:
float32 results depend on it (oneDNN and torch kernels split their reductions by thread; measured:
logistic regression with 4 clients a chunk, the 200-200 MLP and the CNN all change bytes between 1
and 2 threads). Runs sharing a machine are kept from slowing each other beyond their share by
``hold_cores``: the compute of a round holds as many per-core lock files (``<tempdir>/fedsim-cores-
<uid>/cpu-<id>``) as it has threads, so two runs on the same cores take turns round by round
instead of oversubscribing them; and ``import fedsim`` sets ``GOMP_SPINCOUNT=10000`` so that
waiting OpenMP threads sleep instead of spinning.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from .workload import Workload

__all__ = [
    "usable_cores",
    "physical_cores",
    "cgroup_cpus",
    "thread_budget",
    "default_threads",
    "set_threads",
    "hold_cores",
    "threads_info",
    "SLOTS",
]

#: Per-core lock files of the runs of this user on this machine (another user's runs are not seen).
SLOTS = Path(tempfile.gettempdir()) / f"fedsim-cores-{os.getuid() if hasattr(os, 'getuid') else 'user'}"

_state: dict = {"rule": None, "cpus": None, "files": {}, "held": False, "waited": 0.0, "rounds": 0}


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs the cgroup quota allows (e.g. 1.5), the smallest along the process's cgroup path and the
    mounted root; None when unlimited or unreadable."""
    paths: list[str] = [""]
    try:
        for line in proc_cgroup.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "" or "cpu" in controllers.split(","):
                paths.append(path.strip("/"))
    except (OSError, ValueError):
        pass
    limits = []
    for rel in dict.fromkeys(paths):
        parts = Path(rel).parts if rel else ()
        for depth in range(len(parts) + 1):
            sub = Path(*parts[:depth]) if depth else Path()
            for base in (root / sub, root / "cpu" / sub, root / "cpu,cpuacct" / sub):
                limits.append(_read_quota(base))
    found = [x for x in limits if x is not None]
    return min(found) if found else None


def _read_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def physical_cores(cpus: set[int], cpuinfo: str | None = None) -> int:
    """Distinct (physical id, core id) pairs among logical ``cpus`` in /proc/cpuinfo (hyperthreads of
    one core count once); ``len(cpus)`` when cpuinfo says nothing."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return len(cpus)
    cores, cpu, fields = set(), None, {}
    for line in cpuinfo.splitlines() + [""]:
        if not line.strip():
            if cpu in cpus and "core id" in fields:
                cores.add((fields.get("physical id"), fields["core id"]))
            cpu, fields = None, {}
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            cpu = int(value) if value.isdigit() else None
        elif key in ("physical id", "core id"):
            fields[key] = value
    return len(cores) if cores else len(cpus)


def _affinity() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """Cores this process may use: CPU affinity, capped by the cgroup CPU quota (rounded down, >= 1)."""
    n = len(_affinity())
    quota = cgroup_cpus()
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def thread_budget() -> int:
    """Most intra-op threads one run uses: usable cores, at most the physical cores among them and
    ``OMP_NUM_THREADS`` when set, shared among torchrun's local ranks. Independent of other runs."""
    n = min(usable_cores(), physical_cores(_affinity()))
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, n // local)


def _is_conv(work: Workload) -> bool:
    return work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())


def _rule(work: Workload, chunk: int) -> str:
    if work.is_quadratic or (chunk <= 1 and not _is_conv(work)):
        return "one"
    return "budget"


def default_threads(work: Workload, chunk: int) -> int:
    """Documented rule (measured in benchmarks/bench_engine.py): the closed-form quadratic and a
    small model stepped one client at a time get one thread (intra-op threading only adds overhead
    on their tiny tensors); conv nets and batched chunks of clients get the thread budget (the
    batched 200-200 MLP step ran 1.3-1.6x faster on both cores of the 2-core machine, logistic
    regression with 100 clients 1.2x)."""
    return 1 if _rule(work, chunk) == "one" else thread_budget()


def set_threads(pinned: int | None, work: Workload, chunk: int) -> int:
    """Set torch's intra-op threads for a run: ``pinned`` (``engine.threads``) or ``default_threads``;
    the rule is remembered for ``threads_info``. Returns the count."""
    n = pinned or default_threads(work, chunk)
    _state["rule"] = "pinned" if pinned else _rule(work, chunk)
    torch.set_num_threads(n)
    return n


def _slot(cpu: int):
    """This process's open lock file of core ``cpu`` (kept open; None without fcntl)."""
    if cpu not in _state["files"]:
        try:
            SLOTS.mkdir(mode=0o700, parents=True, exist_ok=True)
            _state["files"][cpu] = open(SLOTS / f"cpu-{cpu}", "a")
        except OSError:
            _state["files"][cpu] = None
    return _state["files"][cpu]


def _acquire(threads: int) -> list:
    """Lock ``threads`` core slots. One: the first free one (last core first), else wait for the
    last; more: the lowest ``threads`` cores, waiting in increasing order (ordered locking: runs
    never wait on each other in a cycle)."""
    import fcntl

    if _state["cpus"] is None:  # once per process
        _state["cpus"] = sorted(_affinity())[: usable_cores()]
    cpus = _state["cpus"]
    if threads <= 1:
        for cpu in reversed(cpus):
            f = _slot(cpu)
            if f is None:
                return []
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return [f]
            except BlockingIOError:
                continue
        cpus = cpus[-1:]
    held = []
    for cpu in cpus[: max(1, threads)]:
        f = _slot(cpu)
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
            held.append(f)
    return held


@contextmanager
def hold_cores(device: torch.device):
    """Hold this run's share of the machine while the block (a round's compute) runs: as many core
    slots as torch has intra-op threads, waiting while other fedsim runs hold them. A no-op on a
    GPU, under torchrun (ranks split the cores already and wait on each other in collectives),
    inside another ``hold_cores``, with ``FEDSIM_HOLD_CORES=0``, and where ``fcntl`` is missing.
    Changes no result: it only waits."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        yield
        return
    off = os.environ.get("FEDSIM_HOLD_CORES", "1") == "0"
    if off or device.type != "cpu" or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 or _state["held"]:
        yield
        return
    t = time.perf_counter()
    held = _acquire(torch.get_num_threads())
    _state["waited"] += time.perf_counter() - t
    _state["rounds"] += 1
    _state["held"] = True
    try:
        yield
    finally:
        _state["held"] = False
        for f in reversed(held):
            fcntl.flock(f, fcntl.LOCK_UN)


def threads_info() -> dict:
    """What the policy chose, for info.yaml: threads, rule (pinned | one | budget), usable cores,
    budget, OpenMP wait policy, and the seconds ``hold_cores`` waited for other runs (over how many
    rounds)."""
    return {
        "threads": torch.get_num_threads(),
        "rule": _state["rule"] or "unset",
        "cores": usable_cores(),
        "budget": thread_budget(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""),
        "waited_for_cores_s": round(_state["waited"], 3),
        "held_rounds": _state["rounds"],
    }
