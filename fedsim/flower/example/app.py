"""The example Flower app: ``client_app`` and ``server_app``, written for Flower only.

ClientApp (train): loads its partition from ``context.node_config["partition-id"]``, runs
``config["fedsim-steps"]`` SGD steps when the message carries that key, else ``local-steps`` from
the node's run config (default 10; Flower's ``run_simulation`` gives its nodes an empty one), at the
learning rate ``config["lr"]`` the server sends, and reports ``num-examples`` and the steps it did as
``fedsim-steps``. ClientApp (evaluate): loss and accuracy on its local test split.

ServerApp: the strategy named by ``run_config["strategy"]`` (``fedavg`` default, ``fedprox``,
``fedadam``, ``uniform``: the custom :class:`UniformAvg`), ``num-server-rounds`` rounds (default
5), a ServerApp-side evaluation on the held-out test set each round, and its
:class:`flwr.serverapp.strategy.Result` kept in ``RESULTS[strategy]``. ``strategies`` (comma
separated) runs several one after another from the same initial model (the equality tests).
"""

from __future__ import annotations

import random

import numpy as np
import torch

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAdam, FedAvg, FedProx

from .task import Net, get_weights, load_partition, load_server_test, set_weights, test, train

__all__ = ["client_app", "server_app", "UniformAvg", "RESULTS", "make_strategy"]

RESULTS: dict = {}
client_app = ClientApp()


@client_app.train()
def client_train(msg: Message, context: Context) -> Message:
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    x, y, _, _ = load_partition(pid, parts)
    net = Net()
    set_weights(net, msg.content["arrays"].to_numpy_ndarrays())
    config = msg.content["config"]
    steps = int(config.get("fedsim-steps", context.run_config.get("local-steps", 10)))
    rnd = int(config.get("server-round", 0))
    loss = train(net, x, y, steps, float(config.get("lr", 0.1)), 32, seed=1000 * rnd + pid,
                 proximal_mu=float(config.get("proximal-mu", 0.0)))
    metrics = MetricRecord({"num-examples": len(y), "train-loss": loss, "fedsim-steps": steps})
    return Message(RecordDict({"arrays": ArrayRecord(get_weights(net)), "metrics": metrics}), reply_to=msg)


@client_app.evaluate()
def client_evaluate(msg: Message, context: Context) -> Message:
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    _, _, xt, yt = load_partition(pid, parts)
    net = Net()
    set_weights(net, msg.content["arrays"].to_numpy_ndarrays())
    loss, acc = test(net, xt, yt)
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": len(yt), "loss": loss, "accuracy": acc})}),
                   reply_to=msg)


class UniformAvg(FedAvg):
    """A user's own strategy: FedAvg's sampling, but every reply counts equally."""

    def aggregate_train(self, server_round, replies):
        valid = [m for m in replies if not m.has_error()]
        if not valid:
            return None, None
        arrays = [m.content["arrays"].to_numpy_ndarrays() for m in valid]
        mean = [np.mean(np.stack(layer), axis=0) for layer in zip(*arrays)]
        return ArrayRecord(mean), MetricRecord({"replies": len(valid)})


def make_strategy(name: str, nodes: int):
    kw = dict(min_available_nodes=nodes, min_train_nodes=nodes, min_evaluate_nodes=nodes)
    if name == "fedavg":
        return FedAvg(**kw)
    if name == "fedprox":
        return FedProx(proximal_mu=0.1, **kw)
    if name == "fedadam":
        return FedAdam(eta=0.05, eta_l=0.1, **kw)
    if name == "uniform":
        return UniformAvg(**kw)
    raise ValueError(f"unknown strategy {name!r}")


def _server_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    net = Net()
    set_weights(net, arrays.to_numpy_ndarrays())
    loss, acc = test(net, *load_server_test())
    return MetricRecord({"loss": loss, "accuracy": acc})


server_app = ServerApp()


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    nodes = int(cfg.get("min-nodes", 2))
    names = str(cfg.get("strategies", cfg.get("strategy", "fedavg"))).split(",")
    timeout = float(cfg.get("timeout", 3600))
    for name in names:
        random.seed(int(cfg.get("seed", 0)))
        torch.manual_seed(int(cfg.get("seed", 0)))
        initial = ArrayRecord(get_weights(Net()))
        strategy = make_strategy(name, nodes)
        RESULTS[name] = strategy.start(grid=grid, initial_arrays=initial, num_rounds=int(cfg.get("num-server-rounds", 5)),
                                       timeout=timeout, train_config=ConfigRecord({"lr": float(cfg.get("lr", 0.1))}),
                                       evaluate_fn=_server_eval)
