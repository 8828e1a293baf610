"""fedsim's Flower ``Grid``: the seam Flower's own simulation replaces, driven by the clock.

A ServerApp talks to a Grid; Flower's simulation hands it one whose replies come back as fast as
the ClientApps run. :class:`ClockGrid` delivers each message to its node at its simulated time,
runs the ClientApp for that node there and then (a real Python call, one node at a time), and
lets the strategy see the replies the round policy lets through, at the times
:mod:`fedsim.flower.timing` gives them. ``now`` is the simulated time (seconds).

* ``get_node_ids()``: the nodes online now (node id = ``NODE_ID_OFFSET`` + client index; the node
  config holds ``partition-id`` = client index and ``num-partitions`` = the number of clients).
* ``send_and_receive(messages, timeout=T)``: one exchange opened at ``now``; ``T`` (simulated
  seconds) bounds it like the scenario's deadline; returns the replies that arrived by the close,
  in arrival order, and moves ``now`` to the close (plus the server's aggregation seconds after a
  train exchange). A node that was offline or dropped out is an error reply (Flower's
  ``NODE_UNAVAILABLE``), a ClientApp that raised one with ``CLIENT_APP_RAISED_EXCEPTION``; a
  reply later than the close is missing, as Flower shows a reply past the timeout.
* ``push_messages`` then ``pull_messages``: the pushed messages are one exchange (no timeout),
  run when they are pulled.
* ``sleep(s)``: the server waits ``s`` simulated seconds (Flower's strategies sleep while too
  few nodes are online; :func:`fedsim.flower.run` points that sleep here).

A train message carries tau_i, the steps the clock allows its node, in each of its ConfigRecords
under ``"fedsim-steps"`` (none when nothing bounds the node's work). The clock bills the work the
reply reports: its MetricRecord's ``"fedsim-steps"``, else ``ceil(num-examples / batch_size)``
(one pass over the examples it reports); an evaluate reply is billed ``"fedsim-steps"`` or none.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from uuid import uuid4

from flwr.app import ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp.client_app import ClientAppException
from flwr.common.constant import NUM_PARTITIONS_KEY, PARTITION_ID_KEY, ErrorCode
from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from .timing import STEPS_KEY, NodeTimes, Outcome, close_exchange

__all__ = ["ClockGrid", "Exchange", "NODE_ID_OFFSET", "MAX_SIM_TIME", "billed_steps", "array_bytes"]

#: node id of client i = NODE_ID_OFFSET + i (Flower's node id 1 is the SuperLink's own).
NODE_ID_OFFSET = 1000
#: a server that waits past this simulated time (1e9 s, the clock's bound on times) is stopped.
MAX_SIM_TIME = 1e9


@dataclass
class Exchange:
    """One ``send_and_receive``: its index, message type, the ``server-round`` its config named
    (None: none), open, close, nodes online at the open, every message's outcome, and the
    strategy's aggregated metrics of it (filled by :func:`fedsim.flower.run`)."""

    index: int
    kind: str
    server_round: int | None
    start: float
    close: float
    available: int
    outcomes: list[Outcome]
    seen: int
    metrics: dict = field(default_factory=dict)


def array_bytes(content: RecordDict) -> int:
    """Bytes of the arrays a RecordDict carries (what is sent over the network)."""
    return sum(len(a.data) for rec in content.array_records.values() for a in rec.values())


def billed_steps(reply: Message, train: bool, batch_size: int) -> int:
    """The steps the clock bills for ``reply`` (see the module doc)."""
    if reply.has_error():
        return 0
    examples = None
    for rec in reply.content.metric_records.values():
        if STEPS_KEY in rec:
            return max(int(round(float(rec[STEPS_KEY]))), 0)
        if examples is None and "num-examples" in rec:
            examples = rec["num-examples"]
    if train and examples is not None:
        return max(int(math.ceil(float(examples) / batch_size)), 0)
    return 0


class ClockGrid(Grid):
    """A Flower Grid on fedsim's clock (module doc). ``times``: the scenario's per-node facts
    (:class:`~fedsim.flower.timing.NodeTimes`); ``client_app``: the ClientApp every node runs;
    ``run_config``: the apps' ``context.run_config``; ``batch_size``: B of the num-examples rule;
    ``k_first``: overcommit's K."""

    def __init__(self, times: NodeTimes, client_app, *, run_config: dict | None = None, batch_size: int = 32,
                 k_first: int | None = None, aggregation_seconds=None, run_id: int = 1):
        self.times, self.client_app = times, client_app
        self.batch_size, self.k_first = int(batch_size), k_first
        self._aggregation = aggregation_seconds or (lambda n: 0.0)
        self.now = 0.0
        self.exchanges: list[Exchange] = []
        #: ServerApp-side evaluations: (simulated time, server round, metrics)
        self.server_evals: list[tuple[float, int, dict]] = []
        m = times.m
        self._run = Run.create_empty(run_id=run_id)
        self.contexts = [Context(run_id=run_id, node_id=NODE_ID_OFFSET + c,
                                 node_config={PARTITION_ID_KEY: c, NUM_PARTITIONS_KEY: m}, state=RecordDict(),
                                 run_config=dict(run_config or {})) for c in range(m)]
        self._pushed: list[Message] = []
        self._replies: dict[str, Message] = {}

    # ------------------------------------------------------------------ Grid
    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self):
        return [NODE_ID_OFFSET + c for c in self.times.online_clients(self.now)]

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())
            self._pushed.append(msg)
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        if self._pushed:
            pushed, self._pushed = self._pushed, []
            for reply in self._exchange(pushed, None):
                self._replies[reply.metadata.reply_to_message_id] = reply
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages, *, timeout: float | None = None):
        msgs = list(messages)
        self.push_messages(msgs)
        self._pushed = [m for m in self._pushed if all(m is not x for x in msgs)]
        return self._exchange(msgs, timeout)

    def sleep(self, seconds: float) -> None:
        """The server waits ``seconds`` of simulated time."""
        self.now += float(seconds)
        if self.now > MAX_SIM_TIME:
            raise RuntimeError(f"the ServerApp waited past {MAX_SIM_TIME:g} simulated seconds "
                               f"(too few nodes ever online for its strategy)")

    # ------------------------------------------------------------------ one exchange
    def _client_of(self, node_id: int) -> int | None:
        c = int(node_id) - NODE_ID_OFFSET
        return c if 0 <= c < self.times.m else None

    def _exchange(self, msgs: list[Message], timeout: float | None) -> list[Message]:
        if not msgs:  # nothing sent (e.g. fraction_evaluate=0): no exchange, no time
            return []
        t0, key = self.now, len(self.exchanges)
        kind = msgs[0].metadata.message_type if msgs else ""
        train = kind.split(".")[0] == "train"
        outcomes: list[Outcome | None] = [None] * len(msgs)
        replies: list[Message | None] = [None] * len(msgs)
        jobs, where = [], []  # (client, bytes, train) of the messages to real nodes, and their indices
        for i, msg in enumerate(msgs):
            c = self._client_of(msg.metadata.dst_node_id)
            if c is None:  # Flower: a node that does not exist gets an unavailable error at once
                outcomes[i] = Outcome(-1, "failed", t0, t0, error="node")
                replies[i] = _unavailable(msg)
                continue
            jobs.append((c, array_bytes(msg.content), msg.metadata.message_type.split(".")[0] == "train"))
            where.append(i)
        # the downloads first (on a shared downlink they set each other's ends), then each node's
        # ClientApp, then the replies (on a shared uplink they set each other's ends)
        tickets = self.times.tickets(jobs, key, t0, timeout)
        runs: list[tuple[int, float, bool] | None] = []
        for i, (c, _, is_train), ticket in zip(where, jobs, tickets):
            msg = msgs[i]
            if ticket.fate != "run":
                runs.append(None)
                continue
            delivered = _delivered(msg, ticket.allowed if is_train else None)
            try:
                reply = self.client_app(delivered, self.contexts[c])
            except Exception as ex:  # noqa: BLE001 - Flower turns it into an error reply
                wrapped = ClientAppException(str(ex))
                reason = str(type(wrapped)) + ":<'" + str(wrapped) + "'>"
                runs.append((0, 0, True))
                replies[i] = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
                continue
            steps = billed_steps(reply, is_train, self.batch_size)
            runs.append((steps, 0 if reply.has_error() else array_bytes(reply.content), False))
            replies[i] = reply
        for i, run, outcome in zip(where, runs, self.times.resolve_all(tickets, runs)):
            outcomes[i] = outcome
            if outcome.status == "dropped":
                replies[i] = None
            elif outcome.status == "failed" and outcome.error == "node":
                replies[i] = _unavailable(msgs[i])
            if run is not None and not run[2]:  # the ClientApp's reply (or the error that replaced it)
                replies[i].metadata.__dict__["_message_id"] = str(uuid4())
        close, seen = close_exchange(self.times, t0, timeout, outcomes, self.k_first, train)
        got = [replies[i] for i in seen]
        done = sum(1 for i in seen if outcomes[i].status == "completed")
        self.now = close + (self._aggregation(done) if train and done else 0.0)
        self.exchanges.append(Exchange(key, kind, _server_round(msgs), t0, close,
                                       len(self.times.online_clients(t0)), outcomes, len(seen)))
        seen_set = set(seen)
        for i, o in enumerate(outcomes):  # what the strategy did not see
            if i not in seen_set and o.status != "dropped":
                outcomes[i] = Outcome(o.client, "dropped", o.start, close, 0, o.download, 0.0, o.allowed, o.error)
        return got


def _unavailable(msg: Message) -> Message:
    return create_message_error_unavailable_res_message(msg.metadata, "node_unavail")


def _delivered(msg: Message, allowed: int | None) -> Message:
    """The message as its node receives it: a copy (Flower's nodes get it serialized), tau_i in
    each ConfigRecord when the clock bounds the node's work."""
    out = copy.deepcopy(msg)
    if allowed is not None:
        configs = list(out.content.config_records.values())
        if not configs:
            out.content["config"] = ConfigRecord()
            configs = [out.content["config"]]
        for rec in configs:
            rec[STEPS_KEY] = int(allowed)
    return out


def _server_round(msgs: list[Message]) -> int | None:
    for msg in msgs[:1]:
        for rec in msg.content.config_records.values():
            if "server-round" in rec:
                return int(rec["server-round"])
    return None
