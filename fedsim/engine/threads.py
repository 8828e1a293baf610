"""Intra-op thread policy of the engine, and core slots shared by runs (docs/performance.md).

* ``usable_cores()`` -- cores this process may run on: its CPU affinity, capped by a cgroup CPU
  quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``) rounded down.
* ``thread_budget()`` -- the most threads one run uses: usable cores, capped by the physical cores
  among them and by ``OMP_NUM_THREADS`` when set, divided among torchrun's local ranks.
* ``default_threads(work, chunk)`` -- 1 for the closed-form quadratic and a small model stepped one
  client at a time, the budget for batched chunks and conv nets; ``engine.threads`` pins it.
* ``fixed_budget(n)`` -- the budget a comparison's plan fixed (``fedsim compare --executor ray``:
  the driver's own budget, so that a Ray worker, whose ``OMP_NUM_THREADS`` Ray sets to its task's
  CPUs, chooses the threads and chunk a local run chooses; docs/comparisons.md).

The count depends on the machine, the launch and the scenario only, never on what else runs:
float32 results depend on it (oneDNN and torch kernels split their reductions by thread; measured:
logistic regression with 4 clients a chunk, the 200-200 MLP and the CNN all change bytes between 1
and 2 threads). Runs sharing a machine are kept from slowing each other beyond their share by
``hold_cores``: the compute of a round holds as many per-core lock files (``<tempdir>/fedsim-cores-
<uid>/cpu-<id>``) as it has threads, so two runs on the same cores take turns round by round
instead of oversubscribing them; and ``import fedsim`` sets ``GOMP_SPINCOUNT=10000`` so that
waiting OpenMP threads sleep instead of spinning.

The slot folder is trusted only when it is a plain folder (not a symbolic link) owned by this
user and writable by nobody else; its files are opened relative to it with ``O_NOFOLLOW`` (a
link planted in it is never followed). Otherwise, and when a slot stays taken for more than
``MAX_CORE_WAIT_S`` seconds (another user's or a stuck process's lock), the run stops taking
turns and runs on; ``info.yaml`` (``threads.core_slots``) says why. Results never depend on it.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from .. import limits
from .workload import Workload

__all__ = [
    "usable_cores",
    "physical_cores",
    "cgroup_cpus",
    "thread_budget",
    "fixed_budget",
    "default_threads",
    "set_threads",
    "numpy_blas_threads",
    "hold_cores",
    "threads_info",
    "SLOTS",
]

#: Per-core lock files of the runs of this user on this machine (another user's runs are not seen).
SLOTS = Path(tempfile.gettempdir()) / f"fedsim-cores-{os.getuid() if hasattr(os, 'getuid') else 'user'}"

_state: dict = {"rule": None, "cpus": None, "files": {}, "held": False, "waited": 0.0, "rounds": 0, "dir": None,
                "bypass": None, "queue": None, "noticed": -math.inf, "budget": None,
                "blas": None}


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
    ``OMP_NUM_THREADS`` when set, shared among torchrun's local ranks. Independent of other runs.
    Inside :func:`fixed_budget`, the budget it fixed."""
    if _state["budget"] is not None:
        return _state["budget"]
    n = min(usable_cores(), physical_cores(_affinity()))
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, n // local)


@contextmanager
def fixed_budget(n: int | None):
    """Within the block, :func:`thread_budget` is ``n`` (None: the machine's, as outside): the
    budget a plan fixed for the runs it sends to another process (a Ray worker), so that they
    choose their threads and chunk by the same rule, from the same budget, as a local run."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"thread budget must be an integer >= 1, got {n!r}")
    before = _state["budget"]
    _state["budget"] = n
    try:
        yield
    finally:
        _state["budget"] = before


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
    _state["waited"], _state["rounds"] = 0.0, 0  # info.yaml's record is this run's, not the process's
    torch.set_num_threads(n)
    numpy_blas_threads(1)
    return n


def numpy_blas_threads(n: int) -> int:
    """Give the BLAS libraries loaded beside torch (numpy's OpenBLAS, scipy's; those loaded when
    this process first calls it) ``n`` threads; torch's own threads are left to
    :func:`set_threads`. Returns how many libraries were set.

    A run calls it with 1: fedsim's numpy arithmetic is small (a generated client's ``x @ W``,
    selection), and OpenBLAS's idle threads spin on the core a second process (``compare --jobs
    2``) would use. Measured on the 2-core machine (docs/performance.md): the seed-0 stack of the
    straggler grid, 66.8 s wall and 89.6 s of CPU with numpy's default 2 threads, 60.3 s and
    57.3 s with one, the same bytes; that grid with ``--no-stack --jobs 2``, 403.9 s -> 226.5 s.
    Uses ``threadpoolctl`` (the library scikit-learn uses)."""
    libs = _other_blas()
    for lib in libs:
        lib.set_num_threads(n)
    return len(libs)


def _other_blas() -> list:
    """threadpoolctl's controllers of the BLAS libraries that are not torch's, as loaded when first
    asked in this process (finding them reads every loaded library: about 3 ms, once)."""
    if _state["blas"] is None:
        from threadpoolctl import ThreadpoolController

        torch_dir = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
        _state["blas"] = [c for c in ThreadpoolController().select(user_api="blas").lib_controllers
                          if not os.path.realpath(c.filepath).startswith(torch_dir)]
    return _state["blas"]


def _bypass(reason: str) -> None:
    """Stop taking turns for the rest of this process (``info.yaml`` records ``reason``)."""
    if _state["bypass"] is None:
        _state["bypass"] = reason


def _slot_dir() -> int | None:
    """An open descriptor of the slot folder once it is checked (created ``0o700`` if missing): a
    folder, not a symbolic link, owned by this user, writable by nobody else; else None (and the
    run bypasses the slots)."""
    folder = Path(SLOTS)
    cached = _state.get("dir")
    if cached is not None and cached[0] == folder:
        return None if cached[1] < 0 else cached[1]
    _state["dir"] = (folder, -1)
    try:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        bad = err.errno in (errno.ELOOP, errno.ENOTDIR)
        _bypass(f"{folder} is not a plain folder" if bad else f"{folder}: {err.strerror}")
        return None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "is not a plain folder"
    elif hasattr(os, "getuid") and st.st_uid != os.getuid():
        problem = f"is owned by uid {st.st_uid}, not by this user"
    elif st.st_mode & 0o022:
        problem = "is writable by other users"
    if problem:
        os.close(fd)
        _bypass(f"{folder} {problem}")
        return None
    _state["dir"] = (folder, fd)
    return fd


def _slot(cpu: int):
    """This process's open lock file (descriptor) of core ``cpu`` in the checked slot folder,
    kept open; None when the slots are bypassed (a link or anything but a regular file there
    bypasses them too)."""
    if cpu not in _state["files"]:
        fd, dirfd = None, _slot_dir()
        if dirfd is not None:
            try:
                fd = os.open(f"cpu-{cpu}", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600, dir_fd=dirfd)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    fd = None
                    _bypass(f"{SLOTS}/cpu-{cpu} is not a regular file")
            except OSError as err:
                fd = None
                _bypass(f"{SLOTS}/cpu-{cpu}: {err.strerror}")
        _state["files"][cpu] = fd
    return _state["files"][cpu]


#: A wait for cores longer than this (seconds) is said on stderr and in the progress bar.
NOTICE_AFTER_S = 1.0
#: At most one stderr line per this many seconds of a run that keeps waiting.
NOTICE_EVERY_S = 60.0


class _Notice:
    """One acquisition's wait: once it passes ``NOTICE_AFTER_S`` the run says who holds the cores
    (pids and commands, read from the slot and queue files) on stderr when it is a terminal (a
    captured or piped stderr keeps its one-line contract: exit 2 is one line), at most once per
    ``NOTICE_EVERY_S``, and to ``callback`` (the progress bar) until the cores are taken."""

    def __init__(self, callback=None):
        self.start = time.monotonic()
        self.callback = callback
        self.said = False

    def due(self) -> float:
        """``time.monotonic()`` at which to say it (now or past: already said)."""
        return self.start + NOTICE_AFTER_S

    def say(self, fds: list[int]) -> None:
        if self.said:
            return
        self.said = True
        holders = _holders(fds)
        who = ", ".join(f"pid {pid} ({cmd})" for pid, cmd in holders) or "another process"
        now = time.monotonic()
        import sys

        isatty = getattr(sys.stderr, "isatty", None)
        if isatty is not None and isatty() and now - _state.get("noticed", -math.inf) >= NOTICE_EVERY_S:
            _state["noticed"] = now
            print(f"fedsim: waiting for CPU cores other fedsim runs hold (first come, first served): {who}; "
                  "FEDSIM_HOLD_CORES=0 runs without taking turns (docs/performance.md)", file=sys.stderr, flush=True)
        if self.callback is not None:
            self.callback(f"waiting for cores ({who})"[:120])

    def done(self) -> None:
        if self.said and self.callback is not None:
            self.callback(None)


def _holders(fds: list[int]) -> list[tuple[int, str]]:
    """(pid, command) of the live processes whose pid the files ``fds`` hold (each holder writes its
    pid into a slot or queue file it locks); the command from /proc, cut to 60 characters."""
    out, seen = [], {os.getpid()}
    for fd in fds:
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            continue
        if not text.isdigit() or int(text) in seen:
            continue
        pid = int(text)
        seen.add(pid)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = " ".join(f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").split())  # one line
        except OSError:
            cmd = ""
        out.append((pid, (cmd[:57] + "...") if len(cmd) > 60 else cmd or "?"))
    return out


def _wait_lock(fd: int, deadline: float, notice: _Notice | None = None, about: list[int] | None = None) -> bool:
    """Take the lock of ``fd`` by ``deadline`` (``time.monotonic``); False if it stayed taken.

    The wait is a blocking ``flock`` (the kernel wakes the waiter as soon as the lock is free, so
    a waiting run is not starved by others, as polling would be) in a helper thread joined with
    a timeout; a helper that gets the lock after its waiter gave up releases it at once. Past
    ``notice.due()`` the notice is said, naming the holders of ``about`` (default ``[fd]``)."""
    import fcntl
    import threading

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    guard, state = threading.Lock(), {"got": False, "abandoned": False}

    def take() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            return
        with guard:
            if state["abandoned"]:
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:
                state["got"] = True

    helper = threading.Thread(target=take, name="fedsim-core-slot", daemon=True)
    helper.start()
    if notice is not None and not notice.said:
        helper.join(max(0.0, min(deadline, notice.due()) - time.monotonic()))
        if helper.is_alive() and time.monotonic() < deadline:
            notice.say(about or [fd])
    helper.join(max(0.0, deadline - time.monotonic()))
    with guard:
        if not state["got"]:
            state["abandoned"] = True
        return state["got"]


_PID = b"%11d\n"


def _open_in_slots(name: str, create: bool = True) -> int | None:
    """A regular file ``name`` in the checked slot folder, opened with ``O_NOFOLLOW`` (None: the
    folder is bypassed, or ``create`` is false and it does not exist); anything but a regular
    file there bypasses the slots."""
    dirfd = _slot_dir()
    if dirfd is None:
        return None
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | (os.O_CREAT if create else 0)
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dirfd)
    except FileNotFoundError:
        if create:
            _bypass(f"{SLOTS}/{name}: cannot be created")
        return None
    except OSError as err:
        _bypass(f"{SLOTS}/{name}: {err.strerror}")
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _bypass(f"{SLOTS}/{name} is not a regular file")
        return None
    return fd


def _unlink(name: str) -> None:
    dirfd = _slot_dir()
    if dirfd is not None:
        try:
            os.unlink(name, dir_fd=dirfd)
        except OSError:
            pass


def _queue_fd(deadline: float) -> int | None:
    """The slot folder's ``queue`` file, locked (held for microseconds by each run that reads or
    updates its two counters: the last ticket given, the last ticket served); None when the slots
    are bypassed."""
    cached = _state.get("queue")
    if cached is not None and cached[0] == Path(SLOTS):
        qfd = cached[1]
    else:
        qfd = _open_in_slots("queue")
        if qfd is None:
            return None
        _state["queue"] = (Path(SLOTS), qfd)
    if not _wait_lock(qfd, deadline):
        _bypass(f"{SLOTS}/queue stayed locked for more than {limits.MAX_CORE_WAIT_S:g} s")
        return None
    return qfd


def _counters(qfd: int) -> list[int]:
    """[last ticket given, last ticket served] of the locked queue file ([0, 0] when new or not ours)."""
    parts = os.pread(qfd, 64, 0).split()
    if len(parts) == 2 and all(p.isdigit() and len(p) < 20 for p in parts):
        return [int(parts[0]), int(parts[1])]
    return [0, 0]


def _set_counters(qfd: int, given: int, served: int) -> None:
    os.pwrite(qfd, b"%20d %20d\n" % (given, served), 0)


def _enqueue(qfd: int, counters: list[int]) -> tuple[int, int] | None:
    """Take the next ticket t (``qfd`` locked by the caller) and hold the lock of a new file
    ``q-<t>`` until this run has its slots. None when the slots are bypassed."""
    import fcntl

    ticket = counters[0] + 1
    _set_counters(qfd, ticket, counters[1])
    fd = _open_in_slots(f"q-{ticket}")
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another process holds a file of this ticket: not our protocol
        os.close(fd)
        _bypass(f"{SLOTS}/q-{ticket} is locked by another process")
        return None
    os.pwrite(fd, _PID % os.getpid(), 0)
    return ticket, fd


def _served(ticket: int, deadline: float) -> None:
    """Record that ``ticket``'s run has its slots: while no ticket is waiting, runs skip the queue."""
    import fcntl

    qfd = _queue_fd(deadline)
    if qfd is not None:
        try:
            given, served = _counters(qfd)
            _set_counters(qfd, max(given, ticket), max(served, ticket))
        finally:
            fcntl.flock(qfd, fcntl.LOCK_UN)


def _try_all(fds: list[int]) -> bool:
    """Lock every one of ``fds`` without waiting, or none."""
    import fcntl

    got = []
    for f in fds:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            for g in reversed(got):
                fcntl.flock(g, fcntl.LOCK_UN)
            return False
        got.append(f)
    return True


def _wait_turn(ticket: int, deadline: float, notice: _Notice) -> bool:
    """Wait until the run with the ticket before ours has its slots (it then releases its queue
    file; a run that died releases it too); False when that took past ``deadline``."""
    import fcntl

    name = f"q-{ticket - 1}"
    fd = _open_in_slots(name, create=False)
    if fd is None:
        return _state["bypass"] is None
    try:
        if not _wait_lock(fd, deadline, notice, [fd] + [f for f in _state["files"].values() if f is not None]):
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    _unlink(name)
    return True


def _leave_queue(entry: tuple[int, int] | None) -> None:
    import fcntl

    if entry is None:
        return
    ticket, fd = entry
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    _unlink(f"q-{ticket}")


def _acquire(threads: int, callback=None) -> list:
    """Lock ``threads`` core slots, first come, first served across processes.

    Under the lock of the ``queue`` file: when no run is queued and the slots are free, take them
    at once (the usual case: a few system calls). Otherwise take a ticket (:func:`_enqueue`), wait
    for the run with the ticket before (:func:`_wait_turn`), then for the slots. One thread: the
    first free slot (last core first), else wait for the last; more: the lowest ``threads``
    cores, waiting in increasing order (ordered locking: runs never wait on each other in a
    cycle). A wait of more than ``NOTICE_AFTER_S`` is said (:class:`_Notice`). A wait longer than
    ``MAX_CORE_WAIT_S`` releases what is held, bypasses the slots from then on and returns nothing."""
    import fcntl

    if _state["cpus"] is None:  # once per process
        _state["cpus"] = sorted(_affinity())[: usable_cores()]
    cpus = _state["cpus"]
    wanted = cpus[: max(1, threads)] if threads > 1 else list(reversed(cpus))
    fds = [_slot(c) for c in wanted]
    if any(f is None for f in fds):
        return []
    deadline = time.monotonic() + limits.MAX_CORE_WAIT_S
    qfd = _queue_fd(deadline)
    if qfd is None:
        return []
    try:
        counters = _counters(qfd)
        if counters[0] <= counters[1]:  # nobody queued: free slots are taken at once
            if threads > 1 and _try_all(fds):
                return _mark(fds)
            for f in fds if threads <= 1 else ():
                if _try_all([f]):
                    return _mark([f])
        entry = _enqueue(qfd, counters)
    finally:
        fcntl.flock(qfd, fcntl.LOCK_UN)
    notice = _Notice(callback)
    held: list = []
    try:
        if entry is None:
            return []
        if not _wait_turn(entry[0], deadline, notice):
            if _state["bypass"] is None:
                _bypass(f"the run ahead in the queue for core slots waited more than {limits.MAX_CORE_WAIT_S:g} s "
                        f"(round {_state['rounds'] + 1} of this process); ran without turns from then on")
            return []
        if threads <= 1:
            held = next(([f] for f in fds if _try_all([f])), [])
        for f in [] if held else (fds[:1] if threads <= 1 else fds):  # one thread: the last core
            if not _wait_lock(f, deadline, notice, fds):
                _bypass(f"a core slot stayed taken for more than {limits.MAX_CORE_WAIT_S:g} s "
                        f"(round {_state['rounds'] + 1} of this process); ran without turns from then on")
                break
            held.append(f)
        if _state["bypass"] is not None:
            for f in reversed(held):
                fcntl.flock(f, fcntl.LOCK_UN)
            return []
        _served(entry[0], deadline)
        return _mark(held)
    finally:
        _leave_queue(entry)
        notice.done()


def _mark(held: list) -> list:
    """``held``, each slot file given this process's pid (for a waiting run's notice)."""
    for f in held:
        os.pwrite(f, _PID % os.getpid(), 0)
    return held


@contextmanager
def hold_cores(device: torch.device, notice=None):
    """Hold this run's share of the machine while the block (a round's compute) runs: as many core
    slots as torch has intra-op threads, waiting (first come, first served) while other fedsim
    runs hold them. A wait of more than ``NOTICE_AFTER_S`` is said on stderr when it is a terminal
    (naming the holders' pids and commands) and to ``notice(text)`` (``notice(None)`` once the cores are taken; the
    progress bar). A no-op on a GPU, under torchrun (ranks split the cores already and wait on each
    other in collectives), inside another ``hold_cores``, with ``FEDSIM_HOLD_CORES=0``, and where
    ``fcntl`` is missing. Changes no result: it only waits."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        yield
        return
    off = os.environ.get("FEDSIM_HOLD_CORES", "1") == "0"
    if (off or device.type != "cpu" or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 or _state["held"]
            or _state["bypass"] is not None):
        yield
        return
    t = time.perf_counter()
    held = _acquire(torch.get_num_threads(), notice)
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
    budget, OpenMP wait policy, the threads of numpy's BLAS (:func:`numpy_blas_threads`), the
    seconds ``hold_cores`` waited for other runs (over how many rounds), and ``core_slots``:
    ``turns`` (the shared slots were used), ``unused`` (GPU, torchrun, ``FEDSIM_HOLD_CORES=0``) or
    ``bypassed: <why>``."""
    return {
        "threads": torch.get_num_threads(),
        "rule": _state["rule"] or "unset",
        "cores": usable_cores(),
        "budget": thread_budget(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""),
        "numpy_blas_threads": max((c.num_threads for c in _other_blas()), default=None),
        "waited_for_cores_s": round(_state["waited"], 3),
        "held_rounds": _state["rounds"],
        "core_slots": f"bypassed: {_state['bypass']}" if _state["bypass"] else "turns" if _state["rounds"] else "unused",
    }
