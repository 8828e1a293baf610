"""The clock under fedsim's Flower Grid: when a message reaches its node, how many local steps the
node may do (tau_i), and when its reply or its failure reaches the server. Plain values: no
``flwr``, no torch, so the rules are tested on hand-made worlds (tests/test_flower_grid.py).

One exchange (one ``Grid.send_and_receive`` call) opens at t0 with one message per node. For each:

* the node is offline at t0: an error reply (Flower's NODE_UNAVAILABLE) at t0;
* the allowed steps (below) are 0: nothing is sent, no reply (a window with no room);
* the node goes offline during its download: an error reply at the outage; the ClientApp never runs;
* otherwise the ClientApp runs; the reply arrives at
  ``arrive + compute(steps reported) + upload(reply bytes)`` unless the node goes offline before
  that (an error reply at the outage) or the ClientApp raised (an error reply at arrive + latency).

Download seconds = latency + bytes of the message's arrays x 8 / the node's downlink (a device
trace's kbit/s: / 1024), upload the same with the reply's bytes; compute = the node's rate
(constant speed or trace) integrated over the billed steps times the job's slowdown.

With a server link (``system.server.down`` / ``up``) the transfers of one exchange share it as
fedsim's clock shares it (docs/clock.md, "The server's link"; :func:`fedsim.clock.link.sweep`):
each message's bits enter the downlink at t0 + latency and move at the max-min fair share of the
server's downlink, at most the node's own downlink, recomputed whenever a transfer starts, ends or
is cut by its node's outage; the download ends when its last bit is through. The replies share the
uplink likewise, each entering it one latency after its node's compute ends. Under ``window`` and
``deadline`` + ``partial`` the steps are then fitted from the download's end (a node that fits no
step has downloaded: it is dropped there, no ClientApp runs).

Close of the exchange, and which replies the strategy sees (those that arrived by the close):

* ``window`` W: close = t0 + min(W, timeout); tau_i = whole steps between arrive and close - upload
  (an exchange of evaluate messages closes at its last reply, at most t0 + min(W, timeout));
* ``deadline`` D: close = the earlier of t0 + min(D, timeout) and the last resolution; tau_i the
  prescribed steps (``on_deadline: partial``: at most what fits before close - upload);
* ``wait``: close = the earlier of t0 + timeout and the last resolution; tau_i the prescribed steps;
* ``overcommit``: as ``wait``, but the exchange closes at the K-th successful reply
  (K = ``round.clients_per_round``; ties by client index) and later replies are not seen.

The upload seconds in tau_i's bound are the node's upload of as many bytes as it downloaded (the
reply is not known before the node runs); the reply's actual bytes set its arrival.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from fedsim.clock.link import sweep
from fedsim.clock.policy import Deadline, Overcommit, Window
from fedsim.errors import ScenarioError

__all__ = ["STEPS_KEY", "Presence", "NodeTimes", "Ticket", "Outcome", "close_exchange"]

#: The key of the message's config (ConfigRecord) that carries tau_i, and of the reply's
#: MetricRecord that reports the steps a node did.
STEPS_KEY = "fedsim-steps"


class Presence:
    """One client's availability timeline (``initial`` state, increasing ``toggles()``), read lazily:
    offline periods are half-open [start, end)."""

    def __init__(self, timeline):
        self.initial = bool(timeline.initial)
        self._it = iter(timeline.toggles()) if getattr(timeline, "changes", True) else iter(())
        self._t: list[float] = []
        self._done = False

    def _read_past(self, t: float) -> None:
        while not self._done and (not self._t or self._t[-1] <= t):
            nxt = next(self._it, None)
            if nxt is None:
                self._done = True
            else:
                self._t.append(float(nxt))

    def online(self, t: float) -> bool:
        self._read_past(t)
        return self.initial ^ (bisect_right(self._t, t) % 2 == 1)

    def outage_in(self, t0: float, t1: float) -> float | None:
        """The first time in (t0, t1) at which a client online at t0 goes offline (None: none)."""
        self._read_past(t0)
        i = bisect_right(self._t, t0)
        if i < len(self._t):
            t = self._t[i]
            return t if t < t1 else None
        return None


@dataclass
class Ticket:
    """One message's job before its ClientApp runs: the client, its job key (the exchange index),
    t0, the download seconds, the allowed steps (None: no bound) and what happens first:
    ``run``, ``offline`` (at t0), ``lost`` (outage during the download, at ``fail_at``) or
    ``dropped`` (no step fits: nothing sent)."""

    client: int
    key: int
    start: float
    download: float
    allowed: int | None
    fate: str
    slow: float = 1.0
    fail_at: float | None = None
    at: float | None = None  # the download's end when a shared link set it (else start + download)

    @property
    def arrive(self) -> float:
        return self.start + self.download if self.at is None else self.at


@dataclass
class Outcome:
    """One message's resolution: ``completed`` (a reply at ``end``), ``failed`` (an error reply at
    ``end``: offline, outage, or the ClientApp raised) or ``dropped`` (no reply)."""

    client: int
    status: str
    start: float
    end: float
    steps: int = 0
    download: float = 0.0
    upload: float = 0.0
    allowed: int | None = None
    error: str = ""  # "node" (unavailable) or "app" (the ClientApp raised)


class NodeTimes:
    """Per-client facts of a scenario's :class:`fedsim.clock.Clock` (speeds or traces, slowdowns,
    availability, bandwidths, prescribed work) put to a Flower exchange.

    ``clock`` is built with a WorkCost of one byte each way (its transfers' ``down_bits`` are then
    the bits of one byte in the bandwidths' units)."""

    def __init__(self, clock):
        if clock.rule.policy.is_async:
            raise ScenarioError("round.policy: a Flower strategy is synchronous; async is not supported on the Flower grid")
        if clock.system.on_outage == "resume":
            raise ScenarioError("system.on_outage: resume is not modelled by the Flower grid (fail only)")
        if clock.sessions is not None:
            raise ScenarioError("system.trace_semantics: fedscale is not modelled by the Flower grid (fedsim only)")
        self.clock = clock
        self.policy = clock.rule.policy
        self.m = clock.num_clients
        self.latency = clock.transfers.latency
        self._presence = [Presence(tl) for tl in clock.timelines]
        self._rates = [clock.rate_of(c) for c in range(self.m)]
        tr = clock.transfers
        if tr.network:
            import numpy as np

            every = np.arange(self.m)
            self._down_bps = tr.down.take(every) / tr.down_bits  # bytes per second
            self._up_bps = tr.up.take(every) / tr.up_bits
            # the server's link per direction (None: none), in the bandwidths' units, as the clock's
            # transfers hold it: a transfer of b bytes is b x down_bits (up_bits) of those units
            self._links = ((tr.down_capacity, tr.down.take(every), tr.down_bits),
                           (tr.up_capacity, tr.up.take(every), tr.up_bits))
        else:
            self._down_bps = self._up_bps = None
            self._links = ((None, None, 0.0), (None, None, 0.0))

    # ------------------------------------------------------------------ per-client facts
    def online(self, client: int, t: float) -> bool:
        return self._presence[client].online(t)

    def online_clients(self, t: float) -> list[int]:
        return [c for c in range(self.m) if self._presence[c].online(t)]

    def down_seconds(self, client: int, nbytes: float) -> float:
        if self._down_bps is None:
            return self.latency
        return self.latency + nbytes / float(self._down_bps[client])

    def up_seconds(self, client: int, nbytes: float) -> float:
        if self._up_bps is None:
            return self.latency
        return self.latency + nbytes / float(self._up_bps[client])

    def finish(self, client: int, t0: float, steps: int, slow: float) -> float:
        return float(self._rates[client].finish(t0, int(steps), slow)) if steps > 0 else t0

    # ------------------------------------------------------------------ one exchange
    def limit(self, t0: float, timeout: float | None) -> float:
        """The latest time a reply may arrive: t0 + the policy's span, bounded by the timeout."""
        span = self.policy.span()
        t = math.inf if timeout is None else float(timeout)
        if span is not None:
            t = min(t, span[0])
        return t0 + t

    def shared(self, direction: int) -> bool:
        """Whether the server's link is shared in ``direction`` (0 down, 1 up)."""
        return self._links[direction][0] is not None

    def _next_outage(self, client: int, t0: float) -> float:
        cut = self._presence[client].outage_in(t0, math.inf)
        return math.inf if cut is None else cut

    def _share(self, direction: int, clients: list[int], enter: list[float], nbytes: list[float],
               t0: float) -> np.ndarray:
        """End times of the transfers of ``clients`` whose bits enter the server's link
        (``direction``) at ``enter`` (inf: cut by the node's first outage after t0 first)."""
        capacity, caps, unit = self._links[direction]
        leave = [self._next_outage(c, t0) for c in clients]
        return sweep(enter, np.asarray(nbytes, dtype=np.float64) * unit, caps[np.asarray(clients, dtype=np.int64)],
                     capacity, leave)

    def tickets(self, jobs: list[tuple[int, float, bool]], key: int, t0: float,
                timeout: float | None) -> list[Ticket]:
        """:meth:`ticket` for every message of one exchange, ``jobs`` = (client, bytes, train): on a
        shared downlink the downloads of the nodes online at t0 share it (module doc)."""
        if not self.shared(0):
            return [self.ticket(c, key, t0, b, timeout, train=tr) for c, b, tr in jobs]
        on = [i for i, (c, _, _) in enumerate(jobs) if self.online(c, t0)]
        got = self._share(0, [jobs[i][0] for i in on], [t0 + self.latency] * len(on), [jobs[i][1] for i in on], t0)
        ends = dict(zip(on, got.tolist()))
        out = []
        for i, (c, nbytes, train) in enumerate(jobs):
            slow = self.clock.slowdown(c, key)
            if i not in ends:
                out.append(Ticket(c, key, t0, self.down_seconds(c, nbytes), None, "offline", slow, t0))
                continue
            end = ends[i]
            if end == math.inf:
                cut = self._next_outage(c, t0)
                out.append(Ticket(c, key, t0, cut - t0, None, "lost", slow, cut, at=cut))
                continue
            allowed = self._allowed(c, key, t0, end, self.up_seconds(c, nbytes), timeout, slow) if train else None
            fate = "dropped" if allowed == 0 else "run"
            out.append(Ticket(c, key, t0, end - t0, allowed, fate, slow, end if fate == "dropped" else None, at=end))
        return out

    def ticket(self, client: int, key: int, t0: float, down_bytes: float, timeout: float | None,
               train: bool = True) -> Ticket:
        """What happens to a message to ``client`` sent at t0 before its ClientApp runs."""
        down = self.down_seconds(client, down_bytes)
        slow = self.clock.slowdown(client, key)
        if not self.online(client, t0):
            return Ticket(client, key, t0, down, None, "offline", slow, t0)
        allowed = self._allowed(client, key, t0, t0 + down, self.up_seconds(client, down_bytes), timeout, slow) \
            if train else None
        if allowed == 0:
            return Ticket(client, key, t0, down, 0, "dropped", slow)
        lost = self._presence[client].outage_in(t0, t0 + down)
        if lost is not None:
            return Ticket(client, key, t0, down, allowed, "lost", slow, lost)
        return Ticket(client, key, t0, down, allowed, "run", slow)

    def _allowed(self, client, key, t0, arrive, up, timeout, slow) -> int | None:
        cap = self.clock.work_cap(client, key)
        fits = isinstance(self.policy, Window) or (isinstance(self.policy, Deadline)
                                                   and self.clock.rule.on_deadline == "partial")
        if not fits:
            return cap
        last_upload_start = self.limit(t0, timeout) - up
        if last_upload_start <= arrive:
            return 0
        n = int(self._rates[client].fit(arrive, last_upload_start, slow))
        return n if cap is None else min(n, cap)

    def resolve_all(self, tickets: list[Ticket], runs: list[tuple[int | None, float, bool] | None]) -> list[Outcome]:
        """:meth:`resolve` for every message of one exchange, ``runs[i]`` = (steps, reply bytes,
        raised) of a ticket whose ClientApp ran (None: it did not): on a shared uplink the replies
        share it, each entering it one latency after its node's compute ends (module doc)."""
        up_end: dict[int, float] = {}
        if self.shared(1):
            sent = [i for i, (t, r) in enumerate(zip(tickets, runs)) if t.fate == "run" and r is not None and not r[2]]
            enter = [self.finish(tickets[i].client, tickets[i].arrive, max(int(runs[i][0] or 0), 0), tickets[i].slow)
                     + self.latency for i in sent]
            got = self._share(1, [tickets[i].client for i in sent], enter, [runs[i][1] for i in sent],
                              tickets[0].start if tickets else 0.0)
            up_end = dict(zip(sent, got.tolist()))
        return [self.resolve(t, *(r or (None, 0, False)), up_end=up_end.get(i)) for i, (t, r) in enumerate(zip(tickets, runs))]

    def resolve(self, ticket: Ticket, steps: int | None, up_bytes: float, raised: bool = False,
                up_end: float | None = None) -> Outcome:
        """The message's outcome once its ClientApp ran (``steps`` billed, ``up_bytes`` sent back;
        ``raised``: the ClientApp raised) or did not (fates other than ``run``). ``up_end``: the
        reply's end on a shared uplink (inf: cut by the node's outage first)."""
        c, t0 = ticket.client, ticket.start
        if ticket.fate == "offline":
            return Outcome(c, "failed", t0, t0, allowed=ticket.allowed, error="node")
        if ticket.fate == "dropped":
            if ticket.at is not None:  # a shared download ended with no room for a step
                return Outcome(c, "dropped", t0, ticket.at, download=ticket.download, allowed=0)
            return Outcome(c, "dropped", t0, t0, allowed=0)
        if ticket.fate == "lost":
            return Outcome(c, "failed", t0, ticket.fail_at, allowed=ticket.allowed, error="node")
        arrive = ticket.arrive
        if raised:
            end = arrive + self.latency
            cut = self._presence[c].outage_in(t0, end)
            return Outcome(c, "failed", t0, end if cut is None else cut, download=ticket.download,
                           allowed=ticket.allowed, error="node" if cut is not None else "app")
        steps = max(int(steps or 0), 0)
        if up_end is None:
            up = self.up_seconds(c, up_bytes)
            end = self.finish(c, arrive, steps, ticket.slow) + up
        else:
            end = up_end
            up = end - self.finish(c, arrive, steps, ticket.slow)
        cut = self._presence[c].outage_in(t0, end)
        if cut is not None:
            return Outcome(c, "failed", t0, cut, download=ticket.download, allowed=ticket.allowed, error="node")
        return Outcome(c, "completed", t0, end, steps, ticket.download, up, ticket.allowed)


def close_exchange(times: NodeTimes, t0: float, timeout: float | None, outcomes: list[Outcome],
                   k_first: int | None = None, train: bool = True) -> tuple[float, list[int]]:
    """(close, indices of the outcomes the strategy sees, in arrival order; ties by client).

    ``k_first``: overcommit's K (the exchange closes at the K-th completed reply). ``train``: a
    window lasts exactly W only for train messages (the nodes fill it with steps); any other
    exchange under a window closes at its last reply, at most W after it opened."""
    limit = times.limit(t0, timeout)
    heard = [i for i, o in enumerate(outcomes) if o.status != "dropped"]
    order = sorted(heard, key=lambda i: (outcomes[i].end, outcomes[i].client))
    if isinstance(times.policy, Window) and train:
        close = limit
    else:
        last = max((outcomes[i].end for i in heard), default=t0)
        close = min(limit, last)
        if isinstance(times.policy, Overcommit) and k_first:
            done = [i for i in order if outcomes[i].status == "completed" and outcomes[i].end <= limit]
            if len(done) >= k_first:
                close = outcomes[done[k_first - 1]].end
                keep = set(done[:k_first])
                return close, [i for i in order if outcomes[i].end <= close
                               and (outcomes[i].status != "completed" or i in keep)]
    return close, [i for i in order if outcomes[i].end <= close]

