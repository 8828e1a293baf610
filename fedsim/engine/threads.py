"""Intra-op thread policy of the engine: how many torch threads a run uses (docs/performance.md).

Three quantities:

* ``usable_cores()`` -- cores this process may run on: its CPU affinity, capped by a cgroup CPU
  quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``) rounded down.
* ``thread_budget()`` -- the most threads one run uses: usable cores, capped by the physical cores
  among them and by ``OMP_NUM_THREADS`` when set, divided among torchrun's local ranks. It depends
  on the machine and the launch only (never on what else runs), so ``auto_chunk`` may use it.
* ``live_runs()`` -- fedsim runs of this user holding a lock file in the registry
  (``<tempdir>/fedsim-runs-<uid>``), this one included.

The rule (``default_threads``): the closed-form quadratic and a small model stepped one client at a
time get 1 thread; conv nets get the whole budget (oneDNN's convolutions reduce in an order that
depends on the thread count, so their count may depend on nothing but the machine); batched chunks
of Linear stacks get a fair share, ``usable_cores // live_runs`` within the budget, recomputed by
``rebalance`` while the run goes on, when their float32 results do not depend on the count: with
MKL's strict conditional numerical reproducibility in force (``strict_cnr()``; ``import fedsim``
sets ``MKL_CBWR=AUTO,STRICT`` for it before torch loads MKL), else the budget too. Measured: the
200-200 MLP on digits gives the same bytes on 1 and 2 threads and any chunk size with it, different
bytes without it. ``engine.threads`` pins the count.
"""

from __future__ import annotations

import atexit
import math
import os
import tempfile
import time
from pathlib import Path

import torch

from .workload import Workload

__all__ = [
    "usable_cores",
    "physical_cores",
    "cgroup_cpus",
    "thread_budget",
    "live_runs",
    "register_run",
    "default_threads",
    "set_threads",
    "rebalance",
    "threads_info",
    "strict_cnr",
    "REGISTRY",
    "REBALANCE_EVERY",
]

#: Lock files of running fedsim simulations, one per process (per user: another user's runs are not seen).
REGISTRY = Path(tempfile.gettempdir()) / f"fedsim-runs-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
#: ``rebalance`` looks at the registry at most once per this many seconds of wall time.
REBALANCE_EVERY = 1.0
#: Unlocked registry files older than this are left by killed runs and removed.
STALE_AFTER = 60.0

_state: dict = {"lock": None, "pid": None, "rule": None, "threads": None, "runs": 1, "checked": 0.0}


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


def register_run() -> None:
    """Hold this process's lock file in ``REGISTRY`` until it exits (idempotent; no-op without fcntl)."""
    if _state["lock"] is not None and _state["pid"] == os.getpid():
        return
    try:
        import fcntl

        REGISTRY.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = REGISTRY / str(os.getpid())
        f = open(path, "w")
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):
        return
    _state["lock"], _state["pid"] = f, os.getpid()
    atexit.register(_unregister, path, f)


def _unregister(path: Path, f) -> None:
    try:
        path.unlink()
    except OSError:
        pass
    f.close()


def live_runs() -> int:
    """fedsim runs holding a lock in ``REGISTRY``, this one included (at least 1)."""
    try:
        import fcntl

        entries = list(REGISTRY.iterdir())
    except (ImportError, OSError):
        return 1
    own, n = str(os.getpid()), 1
    for p in entries:
        if p.name == own:
            continue
        try:
            with open(p) as f:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if time.time() - p.stat().st_mtime > STALE_AFTER:  # left by a killed run
                p.unlink()
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


#: MKL's ``MKL_CBWR_STRICT`` bit (mkl_cbwr.h).
_MKL_CBWR_STRICT = 0x10000


def strict_cnr() -> bool:
    """Whether MKL's strict conditional numerical reproducibility is in force in this process (read
    from MKL itself: ``MKL_CBWR`` takes effect only when set before torch loads MKL, which ``import
    fedsim`` does when it comes first). False when torch has no MKL."""
    if "strict" not in _state:
        import ctypes

        try:
            lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
            _state["strict"] = bool(lib.mkl_serv_cbwr_get(ctypes.c_int(-1)) & _MKL_CBWR_STRICT)
        except (OSError, AttributeError):
            _state["strict"] = False
    return _state["strict"]


def _is_conv(work: Workload) -> bool:
    return work.module is not None and any(isinstance(m, torch.nn.Conv2d) for m in work.module.modules())


def _rule(work: Workload, chunk: int) -> str:
    if work.is_quadratic:
        return "one"
    if chunk <= 1 and not _is_conv(work):
        return "one"
    return "share" if strict_cnr() and not _is_conv(work) else "budget"


def _share() -> int:
    runs = live_runs()
    _state["runs"] = runs
    _state["checked"] = time.monotonic()
    return max(1, min(thread_budget(), usable_cores() // runs))


def default_threads(work: Workload, chunk: int) -> int:
    """The rule (measured in benchmarks/bench_engine.py and bench_concurrent.py): 1 thread for the
    quadratic and a small model stepped one client at a time (intra-op threading only adds overhead
    on their tiny tensors); the budget for conv nets; for batched chunks the fair share
    ``usable_cores // live_runs`` within the budget when ``strict_cnr()`` makes their results
    independent of the count, else the budget. Registers this process as a live run."""
    register_run()
    rule = _rule(work, chunk)
    n = 1 if rule == "one" else thread_budget() if rule == "budget" else _share()
    _state["rule"], _state["threads"] = rule, n
    return n


def set_threads(pinned: int | None, work: Workload, chunk: int) -> int:
    """Set torch's intra-op threads for a run: ``pinned`` (``engine.threads``) or ``default_threads``,
    remembered for ``rebalance`` and ``threads_info``. Returns the count."""
    n = default_threads(work, chunk)
    if pinned:
        _state["rule"], _state["threads"], n = "pinned", pinned, pinned
    torch.set_num_threads(n)
    return n


def rebalance() -> int:
    """Between rounds: under the ``share`` rule, recompute the fair share (at most once per
    ``REBALANCE_EVERY`` seconds) and apply it; the count results do not depend on. Returns the
    current count."""
    if _state["rule"] == "share" and time.monotonic() - _state["checked"] >= REBALANCE_EVERY:
        n = _share()
        if n != _state["threads"]:
            _state["threads"] = n
            torch.set_num_threads(n)
    return torch.get_num_threads()


def threads_info() -> dict:
    """What the policy chose, for info.yaml: threads, rule (pinned | one | budget | share), usable
    cores, budget, live runs at the last look, and the OpenMP / MKL settings in force."""
    return {
        "threads": torch.get_num_threads(),
        "rule": _state["rule"] or "unset",
        "cores": usable_cores(),
        "budget": thread_budget(),
        "runs": _state["runs"],
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "strict_cnr": strict_cnr(),
    }
