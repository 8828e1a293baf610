"""Cross-field rules of a whole scenario (policy vs keys, data vs model, algorithm vs policy)."""

from __future__ import annotations

import math

from ..section import FieldError
from .loss import DEFAULT_LOSS
from .model_options import check_builtin_options, is_builtin

__all__ = ["check_scenario", "algorithm_spec"]


def algorithm_spec(config):
    """The :class:`~fedsim.algorithms.spec.AlgoSpec` of an ``algorithm`` section, resolved from the
    registries as they are now (a piece registered again with ``replace=True`` is used)."""
    from ..algorithms.spec import resolve

    return resolve(config)


def check_scenario(sc) -> None:
    """Raise :class:`~.base.FieldError` naming the first key that breaks a cross-field rule."""
    r = sc.round
    # m: the number of clients; infinite while the data decide it (checked again with their count
    # once built, fedsim.runner.build.adopt_clients)
    m = math.inf if sc.data.clients_from_data else sc.data.num_clients
    if r.clients_per_round is not None and r.clients_per_round > m:
        raise FieldError("round.clients_per_round", f"must be <= data.clients ({m})")
    if isinstance(sc.system.speed, tuple) and m < math.inf and len(sc.system.speed) != m:
        raise FieldError("system.speed", f"needs one speed per client ({m})")
    av = sc.system.availability
    if hasattr(av, "check_clients") and m < math.inf:  # a model's section (fedsim.availability)
        _check_clients(av, m)
    if isinstance(av, tuple) and m < math.inf and len(av) != m:
        raise FieldError("system.availability", f"needs one interval list per client ({m})")
    two_lat = 2 * sc.system.latency
    if r.policy == "window":
        if r.window is None:
            raise FieldError("round.window", "required for policy window")
        if not r.window > two_lat:
            raise FieldError("round.window", "must be longer than two latencies (download + upload)")
    if r.policy == "deadline":
        if r.deadline is None:
            raise FieldError("round.deadline", "required for policy deadline")
        if not r.deadline > two_lat:
            raise FieldError("round.deadline", "must be longer than two latencies (download + upload)")
    if r.policy == "overcommit" and r.clients_per_round is None:
        raise FieldError("round.clients_per_round", "required for policy overcommit (K, the uploads kept)")
    if r.local_time is not None:
        if r.policy != "async":
            raise FieldError("round.local_time", f"a per-job time budget is for policy async (policy {r.policy}: "
                              + ("round.window sets it)" if r.policy == "window" else "use local_steps or local_epochs)"))
        if r.local_steps is not None or r.local_epochs is not None:
            key = "local_steps" if r.local_steps is not None else "local_epochs"
            raise FieldError("round.local_time", f"give local_time or {key}, not both")
        if not (math.isfinite(r.local_time) and r.local_time <= 1e9):
            raise FieldError("round.local_time", "must be finite seconds, at most 1e9")
    if r.on_deadline != "drop" and r.policy != "deadline":
        raise FieldError("round.on_deadline", f"partial uploads at a deadline mean nothing under policy {r.policy}")
    if r.policy in ("wait", "deadline", "overcommit", "async"):
        if r.local_steps is None and r.local_epochs is None and r.local_time is None:
            raise FieldError("round.local_steps", f"policy {r.policy} needs local_steps or local_epochs"
                              + (" (or local_time)" if r.policy == "async" else ""))
    if r.local_steps is not None and r.local_epochs is not None:
        raise FieldError("round.local_epochs", "give local_steps or local_epochs, not both")
    if r.local_epochs is not None and sc.data.name == "quadratic":
        raise FieldError("round.local_epochs", "quadratic data has no epochs; use local_steps")
    if r.policy == "async":
        if r.concurrency is None:
            raise FieldError("round.concurrency", "required for policy async")
        if r.concurrency > m:
            raise FieldError("round.concurrency", f"must be <= data.clients ({m})")
        if sc.algorithm.name == "fedbuff" and r.buffer > r.concurrency:
            raise FieldError("round.buffer", "must be <= round.concurrency for fedbuff")
    if sc.model.name not in (None, "quadratic") and sc.data.name == "quadratic":
        raise FieldError("model.name", "quadratic data takes no model")
    if sc.data.name != "quadratic" and sc.model.name == "quadratic":
        raise FieldError("model.name", "quadratic model needs quadratic data")
    if sc.data.name == "quadratic" and sc.loss.name != DEFAULT_LOSS:
        raise FieldError("loss.name", "quadratic data has its own objective (1/2 ||x - e_i||^2); it takes no loss")
    if sc.system.trace is not None and av != "always":
        raise FieldError("system.availability", "give either a trace or availability, not both")
    if sc.system.server is not None and getattr(sc.system.server.aggregate, "flops", None) is not None \
            and sc.data.name == "quadratic":
        raise FieldError("system.server.aggregate", "quadratic data has no model to count the aggregation's FLOPs; "
                          "give seconds per update")
    if sc.system.trace_semantics == "fedscale" and sc.system.server is not None:
        raise FieldError("system.server", "FedScale's semantics decide a job's fate at its start: a server link "
                          "or aggregation time needs trace_semantics fedsim")
    if sc.system.trace_semantics == "fedscale" and r.policy == "async":
        raise FieldError("system.trace_semantics", "fedscale applies to synchronous rounds (window, wait, deadline, "
                          "overcommit), not async")
    _check_model_fits_data(sc.data.name, sc.model_name, sc.data.dim)
    _check_model_options(sc)
    from ..compression.none import check_with_payload

    check_with_payload(sc.algorithm, sc.system.payload_bytes)  # bytes: the compressor's or payload_bytes
    from ..errors import ScenarioError

    try:
        spec = algorithm_spec(sc.algorithm)
    except ScenarioError as err:  # a SpecError, or a preset naming a part no registry knows
        path, _, msg = str(err).partition(": ")
        raise FieldError(path, msg) from None
    if spec.mu > 0 and sc.algorithm.lr * spec.mu >= 1:
        raise FieldError("algorithm.mu", "lr * mu must be < 1 (the proximal step factor 1 - lr mu must stay positive)")
    if spec.asynchronous and r.policy != "async":
        raise FieldError("algorithm.name", f"{spec.name} needs round.policy async")
    if r.policy == "async" and not spec.asynchronous:
        raise FieldError("algorithm.name", "round.policy async needs fedbuff or fedasync")
    if spec.asynchronous == "fedasync" and r.buffer != 1:
        raise FieldError("round.buffer", "fedasync updates the model at every arrival: must be 1 (fedbuff buffers)")
    if spec.asynchronous and spec.aggregation == "nova":
        raise FieldError("algorithm.aggregation", f"{spec.name}: use algorithm.normalize_async for FedNova's normalization")
    if not spec.asynchronous and sc.algorithm.normalize_async:
        # the other async-only keys are ignored by synchronous runs (so one base scenario can
        # serve a compare grid over both); this one would read like FedNova being on.
        raise FieldError(
            "algorithm.normalize_async", "only for asynchronous algorithms; use fednova / aggregation: nova"
        )


# Input shape of each dataset (before any model): flat features or (C, H, W) images.
_DATA_SHAPES = {
    "digits": (1, 8, 8), "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28),
    "cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "tinyimagenet": (3, 64, 64),
}
_CONV_MIN_SIDE = {"cnn": 4, "vgg11": 32, "resnet18_gn": 8, "leaf_cnn": 4}
#: Models of token sequences (int64 ids), not of features or images.
_TOKEN_MODELS = frozenset({"char_lstm"})


def _check_clients(section, m: int) -> None:
    """A model's per-client values against m clients (its ValueError named under system.availability)."""
    try:
        section.check_clients(m)
    except FieldError:
        raise
    except ValueError as err:
        raise FieldError("system.availability", str(err)) from None


def _check_model_fits_data(data: str, model: str, dim: int) -> None:
    if model in _TOKEN_MODELS and (data in _DATA_SHAPES or data == "synthetic"):
        kind = "flat features" if data == "synthetic" else "images"
        raise FieldError("model.name", f"{model} needs token sequences (e.g. shakespeare); {data} has {kind}")
    if model not in _CONV_MIN_SIDE:
        return
    shape = _DATA_SHAPES.get(data)
    if shape is None and data not in ("quadratic", "synthetic"):
        return  # a registered dataset: the model factory sees its input shape when the run is built
    if shape is None:
        raise FieldError("model.name", f"{model} needs image data; {data} has flat features")
    if min(shape[1:]) < _CONV_MIN_SIDE[model]:
        raise FieldError("model.name", f"{model} needs images of at least {_CONV_MIN_SIDE[model]}x{_CONV_MIN_SIDE[model]}; {data} has {shape[1]}x{shape[2]}")



def _check_model_options(sc) -> None:
    """``model.options``: a built-in model's against its rules (:mod:`.model_options`: types and
    bounds), another's against the factory's signature when the factory is already imported (a
    model registered from Python or a plug-in)."""
    from .. import registries
    from ..errors import ScenarioError
    from ..factory_options import check_options

    name = sc.model.name
    if name not in (None, "quadratic") and is_builtin(name):  # fedsim's own: types and bounds, no torch
        problem = check_builtin_options(name, sc.model.options)
        if problem:
            raise FieldError(*problem)
        return
    factory = registries.MODELS.loaded(name) if name not in (None, "quadratic") else None
    if factory is not None and sc.model.options:
        try:
            check_options(factory, sc.model.options, f"model {name!r}", "model.options")
        except ScenarioError as err:
            raise FieldError("model.options", str(err).partition(": ")[2]) from None
