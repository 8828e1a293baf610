"""The registries of named pieces: the one place a name in a scenario file is looked up.

Each :class:`~fedsim.named_pieces.Registry` maps names to pieces of one kind:

=================  ===========================  ==============================================
registry           scenario field               a piece is
=================  ===========================  ==============================================
``MODELS``         ``model.name``               ``factory(input_shape, num_classes, **options) -> nn.Module``
``DATASETS``       ``data.name``                ``factory(config, seed) -> Dataset | FederatedData`` (config: the
                                                scenario's ``data`` section)
``ALGORITHMS``     ``algorithm.name``           a preset: the parts an algorithm fills (``algorithms/presets.py``)
``SOLVERS``        ``algorithm.solver``         a local solver (``algorithms/*``)
``CORRECTIONS``    ``algorithm.correction``     a local correction
``AGGREGATIONS``   ``algorithm.aggregation``    a server aggregation
``SERVER_OPTS``    ``algorithm.server_opt``     a server optimizer
``STALENESS``      ``algorithm.staleness``      an asynchronous staleness rule
``AVAILABILITY``   ``system.availability.model``  an availability model's section class
                                                (:class:`fedsim.availability.AvailabilitySection`)
``SELECTORS``      ``round.selection.name``     a selection rule's section class
                                                (:class:`fedsim.selection.section.SelectionSection`)
``COMPRESSORS``    ``algorithm.compression.name``  a compressor's section class
                                                (:class:`fedsim.compression.CompressionSection`)
``LOSSES``         ``loss.name``                ``loss(outputs, targets) -> scalar`` (the minibatch mean)
=================  ===========================  ==============================================

fedsim's built-ins register here exactly as a plug-in would, as lazy ``"module:attribute"``
strings, so that checking a scenario's names imports nothing (no torch). Importing this module
registers them; user code registers through :mod:`fedsim.api` (``fedsim.register_model``, ...),
an installed package's ``fedsim.plugins`` entry point, or ``--plugin MODULE`` (:mod:`fedsim.plugins`).
"""

from __future__ import annotations

from .named_pieces import Registry

__all__ = [
    "MODELS", "DATASETS", "ALGORITHMS", "SOLVERS", "CORRECTIONS", "AGGREGATIONS", "SERVER_OPTS", "STALENESS",
    "AVAILABILITY", "SELECTORS", "COMPRESSORS", "LOSSES", "ALL",
]

MODELS: Registry = Registry("model", "model.name")
DATASETS: Registry = Registry("dataset", "data.name")
ALGORITHMS: Registry = Registry("algorithm", "algorithm.name")
SOLVERS: Registry = Registry("local solver", "algorithm.solver")
CORRECTIONS: Registry = Registry("correction", "algorithm.correction")
AGGREGATIONS: Registry = Registry("aggregation", "algorithm.aggregation")
SERVER_OPTS: Registry = Registry("server optimizer", "algorithm.server_opt")
STALENESS: Registry = Registry("staleness rule", "algorithm.staleness")
AVAILABILITY: Registry = Registry("availability model", "system.availability.model")
SELECTORS: Registry = Registry("selection rule", "round.selection.name")
COMPRESSORS: Registry = Registry("compressor", "algorithm.compression.name")  # also downlink_compression
LOSSES: Registry = Registry("loss", "loss.name")

#: kind -> registry: the one table of them (``fedsim.register_<kind>``, the scenario's algorithm part
#: fields and :func:`fedsim.algorithms.spec.part` look a kind up here).
ALL = {
    "model": MODELS, "dataset": DATASETS, "algorithm": ALGORITHMS, "solver": SOLVERS, "correction": CORRECTIONS,
    "aggregation": AGGREGATIONS, "server_opt": SERVER_OPTS, "staleness": STALENESS, "availability": AVAILABILITY,
    "selector": SELECTORS,
    "compressor": COMPRESSORS,
    "loss": LOSSES,
}


def _register_builtins() -> None:
    # models (fedsim/models): factory(input_shape, num_classes, **options)
    for name in ("logreg", "mlp", "cnn", "vgg11", "resnet18_gn"):
        MODELS.register(name, f"fedsim.models:{name}")
    MODELS.register("leaf_cnn", "fedsim.models.leaf:leaf_cnn")  # LEAF's FEMNIST CNN (docs/datasets.md)
    MODELS.register("char_lstm", "fedsim.models.leaf:char_lstm")  # LEAF's Shakespeare stacked LSTM
    MODELS.register("from_python", "fedsim.api:from_python_placeholder")  # fedsim.run(model=...): the model object
    # datasets (fedsim/data): factory(config, seed)
    DATASETS.register("quadratic", "fedsim.data.builtin:quadratic")
    DATASETS.register("synthetic", "fedsim.data.builtin:synthetic")
    DATASETS.register("digits", "fedsim.data.builtin:digits")
    for name in ("mnist", "fashion_mnist", "cifar10", "cifar100", "tinyimagenet"):
        DATASETS.register(name, f"fedsim.data.builtin:{name}")
    # natural partitions read from their published files (docs/datasets.md)
    DATASETS.register("femnist", "fedsim.data.femnist:femnist")
    DATASETS.register("shakespeare", "fedsim.data.shakespeare:shakespeare")
    DATASETS.register("femnist_fedscale", "fedsim.data.femnist:femnist_fedscale")
    DATASETS.register("from_python", "fedsim.api:from_python_placeholder")  # fedsim.run(data=...): the data object
    # algorithms (presets: fedsim/algorithms/presets.py) and their parts (fedsim/algorithms/parts.py),
    # lazily: the algorithms package looks parts up here, so importing it from here would be a cycle
    for name in PRESET_NAMES:
        ALGORITHMS.register(name, f"fedsim.algorithms.presets:PRESETS[{name}]")
    parts = "fedsim.algorithms.parts"
    for name, attr in (("sgd", "SGD"), ("adam", "ADAM"), ("amsgrad", "AMSGRAD")):
        SOLVERS.register(name, f"{parts}:{attr}")
    for name in ("none", "scaffold", "vrlsgd", "nova_vr", "fedcm", "lada"):
        CORRECTIONS.register(name, f"{parts}:{name.upper()}")
    for name in ("avg", "nova"):
        AGGREGATIONS.register(name, f"{parts}:{name.upper()}")
    for name in ("sgd", "momentum", "adam", "yogi", "adagrad"):
        SERVER_OPTS.register(name, f"{parts}:SERVER_{name.upper()}")
    for name in ("constant", "polynomial", "hinge"):
        STALENESS.register(name, f"{parts}:{name.upper()}")
    # availability models (fedsim/availability): one module each, its section class
    AVAILABILITY.register("markov", "fedsim.availability.markov:MarkovAvailability")
    AVAILABILITY.register("diurnal", "fedsim.availability.diurnal:DiurnalAvailability")
    # selection rules (fedsim/selection): one module each, its section class
    SELECTORS.register("uniform", "fedsim.selection.uniform:UniformSelection")
    SELECTORS.register("weighted", "fedsim.selection.uniform:WeightedSelection")
    SELECTORS.register("oort", "fedsim.selection.oort:OortSelection")  # Lai et al. 2021, as FedScale ships it
    SELECTORS.register("tiers", "fedsim.selection.tiers:TiersSelection")  # TiFL, Chai et al. 2020
    SELECTORS.register("fastest", "fedsim.selection.fastest:FastestSelection")  # biased on purpose
    # compressors (fedsim/compression): one module each, its section class
    for name, section in (("none", "NoneSection"), ("topk", "TopKSection"), ("randk", "RandKSection"),
                          ("qsgd", "QSGDSection"), ("sign", "SignSection"), ("fp16", "FP16Section")):
        COMPRESSORS.register(name, f"fedsim.compression.{name}:{section}")
    # losses (fedsim/losses.py): loss(outputs, targets) -> scalar mean
    LOSSES.register("cross_entropy", "fedsim.losses:cross_entropy")
    LOSSES.register("from_python", "fedsim.api:from_python_placeholder")  # fedsim.run(loss=...): the loss object


#: The built-in presets' names, in the order of fedsim.algorithms.presets.PRESETS (a test checks it).
PRESET_NAMES = ("fedavg", "fednova", "fedprox", "fednova_prox", "scaffold", "vrlsgd", "fednova_vr", "fedavgm",
                "fedadam", "fedyogi", "fedadagrad", "fedcm", "localadam", "fedlada", "fedbuff", "fedasync")


_register_builtins()
