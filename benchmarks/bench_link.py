"""The server link's processor sharing (fedsim.clock.link): cost per event and per round sweep.

1. Steady state: ``--concurrent`` transfers in flight on a saturated link (C = a quarter of the
   sum of the clients' bandwidths, so the fair level binds); each finish is replaced at once by a
   new transfer, until ``--events`` events (a finish or a start each) have run. Reports events/s
   and microseconds per event.
2. One synchronous round: ``sweep`` of ``--sweep`` transfers all starting at 0 (each finishes
   once: about that many events), with and without some leaving early.

    python benchmarks/bench_link.py [--concurrent 1000] [--events 100000] [--sweep 1000] [--no-save]

Figures depend on the machine's load: run alone for the record.
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401
import numpy as np
from _common import append, machine

from fedsim.clock.link import SharedLink, sweep


def steady(concurrent: int, events: int, seed: int = 0) -> tuple[float, float, int]:
    rng = np.random.default_rng(seed)
    caps = rng.lognormal(np.log(1.5e6), 0.8, concurrent + events)  # bits/s, FedScale-like uplinks
    bits = rng.lognormal(np.log(8e6), 0.3, concurrent + events)
    link = SharedLink(0.25 * caps[:concurrent].sum())
    link.add_many(np.arange(concurrent), 0.0, bits[:concurrent], caps[:concurrent])
    nxt, done = concurrent, 0
    t0, c0 = time.perf_counter(), time.process_time()
    while done < events:
        t = link.next_finish()
        keys = link.pop_finished(t)
        done += len(keys)
        m = len(keys)
        for _ in range(m):  # one by one, as an event-driven caller does
            link.add(nxt, t, bits[nxt], caps[nxt])
            nxt += 1
            done += 1
    return time.perf_counter() - t0, time.process_time() - c0, done


def round_sweep(n: int, leave_frac: float, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    caps = rng.lognormal(np.log(1.5e6), 0.8, n)
    bits = np.full(n, 8e6)
    leave = np.where(rng.random(n) < leave_frac, rng.uniform(0, 20, n), np.inf)
    t0 = time.perf_counter()
    sweep(np.zeros(n), bits, caps, 0.25 * caps.sum(), leave)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrent", type=int, default=1000)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--sweep", type=int, default=1000)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    secs, cpu, done = steady(a.concurrent, a.events)
    s0 = round_sweep(a.sweep, 0.0)
    s1 = round_sweep(a.sweep, 0.2)
    row = {
        **machine(),
        "concurrent": a.concurrent,
        "events": done,
        "steady_s": round(secs, 3),
        "us_per_event": round(1e6 * secs / done, 2),
        "cpu_us_per_event": round(1e6 * cpu / done, 2),
        "sweep_n": a.sweep,
        "sweep_s": round(s0, 4),
        "sweep_leave20_s": round(s1, 4),
    }
    print(row)
    if not a.no_save:
        append("link", [row], "Server link (processor sharing): cost per event and per round sweep")


if __name__ == "__main__":
    main()
