"""``fedsim compare --executor ray`` on a local two-node Ray cluster against ``--jobs 2`` (issue 29).

    python benchmarks/bench_compare_ray.py [--seeds 0-7] [--rounds 40] [--memory-runs 1000] [--quick]

1. Overhead. The grid: ``scenarios/quickstart.yaml`` (Synthetic(1, 1), 30 clients, logistic
   regression; its three variants as one axis) x ``--seeds`` (default 0-7: 24 runs) x ``--rounds``,
   with ``engine.threads=1`` in both (a run then takes one core under either executor, and both
   write the same bytes). ``fedsim compare --jobs 2`` runs in a fresh interpreter; then a cluster of
   two nodes of one CPU each is started on 127.0.0.1 (``ray.cluster_utils.Cluster``, its start
   timed apart: a cluster outlives a sweep; its workers at the niceness of local processes, 0,
   where Ray's default is 15) and ``fedsim compare --executor ray --address`` runs in
   a fresh interpreter against it. Both wall times include the interpreter, its imports and every
   worker's start. Goal: Ray within 1.15x of local processes.
2. The driver's memory for a plan of ``--memory-runs`` runs (a three-round quadratic problem x
   seeds) and for 10 runs, on the same cluster: the peak resident memory of the ``fedsim compare``
   process (its own ``ru_maxrss``), the difference divided by the extra runs being what one
   planned run costs the driver (its validated scenario and its task; workloads are built on the
   workers only).

Rows go to ``benchmarks/results/compare_ray.{csv,md}`` and ``compare_ray_memory.{csv,md}``. Every
Ray process stays on 127.0.0.1, usage statistics off. Measure alone on the machine: other load
changes both wall times, not in the same way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import ROOT, append, machine
from bench_compare_jobs import folder_digests

#: Every Ray process on 127.0.0.1; nothing reported; Ray's cloud-metadata probe to a closed local port.
LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    **{k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
    **{k: "127.0.0.1,localhost,::1" for k in ("no_proxy", "NO_PROXY")},
}

QUAD = """name: mem
seed: 0
rounds: 3
data: {name: quadratic, centers: [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]}
system: {speed: {dist: uniform, low: 1.0, high: 4.0}, latency: 0.25}
round: {policy: window, window: 2.0}
algorithm: {name: fedavg, lr: 0.1, batch_size: 1}
engine: {dtype: float64}
"""


#: ``fedsim`` in a fresh interpreter that prints its own peak resident memory (KiB) when it ends.
DRIVER = ("import resource, sys; from fedsim.cli import main; rc = main(sys.argv[1:]); "
          "print('peak_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")


def fedsim_compare(args: list[str], out: Path) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one ``fedsim compare`` in a fresh interpreter."""
    env = {**os.environ, **LOOPBACK, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DRIVER, "compare", *args, "--out", str(out), "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"fedsim compare {' '.join(args)} failed: {proc.stderr.strip()[-600:]}")
    peak = [ln.split()[1] for ln in proc.stderr.splitlines() if ln.startswith("peak_kib ")]
    return wall, int(peak[-1]) / 1024


def start_cluster(nodes: int):
    for k, v in LOOPBACK.items():
        os.environ[k] = v
    import ray._private.ray_constants as consts
    from ray.cluster_utils import Cluster

    consts.ENABLE_RAY_CLUSTER = False
    t = time.perf_counter()
    c = Cluster(initialize_head=True, connect=False,  # workers at the priority of local processes (Ray: nice 15)
                head_node_args=dict(num_cpus=1, node_ip_address="127.0.0.1", include_dashboard=False,
                                    _system_config={"worker_niceness": 0}))
    for _ in range(nodes - 1):
        c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    return c, time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-7", help="seeds of the quickstart grid (3 variants each)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--memory-runs", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="seeds 0-1, 4 rounds, 40 memory runs; nothing recorded")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    seeds, rounds, mem_runs = ("0-1", 4, 40) if a.quick else (a.seeds, a.rounds, a.memory_runs)
    grid = [str(ROOT / "scenarios" / "quickstart.yaml"), "--seeds", seeds, "--set", f"rounds={rounds}",
            "--set", "engine.threads=1"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        jobs_s, jobs_mb = fedsim_compare(grid + ["--jobs", "2"], tmp / "jobs2")
        cluster, start_s = start_cluster(2)
        try:
            ray_s, ray_mb = fedsim_compare(grid + ["--executor", "ray", "--address", cluster.address], tmp / "ray")
            d_jobs, d_ray = folder_digests(tmp / "jobs2"), folder_digests(tmp / "ray")
            same = bool(d_jobs) and d_jobs == d_ray
            print(f"{len(d_jobs)} runs of {rounds} rounds: --jobs 2 {jobs_s:.2f} s, Ray (2 nodes x 1 CPU) "
                  f"{ray_s:.2f} s = {ray_s / jobs_s:.3f}x (goal <= 1.15x); cluster start {start_s:.1f} s; "
                  f"same bytes: {same}", flush=True)
            (tmp / "quad.yaml").write_text(QUAD)
            mem = {}
            for n in (10, mem_runs):
                wall, mb = fedsim_compare([str(tmp / "quad.yaml"), "--seeds", f"0-{n - 1}", "--executor", "ray",
                                           "--address", cluster.address], tmp / f"mem{n}")
                mem[n] = (wall, mb)
                print(f"driver of a {n}-run plan: peak {mb:.0f} MiB, {wall:.1f} s", flush=True)
        finally:
            cluster.shutdown()
    per_run_kb = (mem[mem_runs][1] - mem[10][1]) * 1024 / max(1, mem_runs - 10)
    print(f"driver memory per planned run: {per_run_kb:.1f} KiB")
    if not (a.no_save or a.quick):
        m = machine(threads=1)
        append("compare_ray", [{**m, "runs": len(d_jobs), "rounds": rounds, "jobs2_s": round(jobs_s, 2),
                                "ray_s": round(ray_s, 2), "ray_over_jobs2": round(ray_s / jobs_s, 3),
                                "cluster_start_s": round(start_s, 1), "same_bytes": same}],
               "fedsim compare --executor ray (2 local nodes x 1 CPU) vs --jobs 2 (bench_compare_ray.py)")
        append("compare_ray_memory", [{**m, "runs": n, "driver_peak_mib": round(mem[n][1], 1),
                                       "wall_s": round(mem[n][0], 1)} for n in (10, mem_runs)],
               "Peak memory of the fedsim compare driver, --executor ray (bench_compare_ray.py)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
