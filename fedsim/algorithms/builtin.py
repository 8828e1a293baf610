"""fedsim's own algorithms and algorithm parts, registered exactly as a plug-in registers its own.

:func:`register_builtins` is the one call site (:mod:`fedsim.registries` calls it when the
registries are created). Nothing here imports torch: the presets are plain mappings
(:mod:`~fedsim.algorithms.presets`) and the parts small frozen values whose builders import torch
when a run is built (:mod:`~fedsim.algorithms.parts`).
"""

from __future__ import annotations

__all__ = ["register_builtins"]


def register_builtins(algorithms, solvers, corrections, aggregations, server_opts, staleness) -> None:
    """Register the built-in presets and parts in the given registries."""
    from . import parts as P
    from .presets import PRESETS

    for name, preset in PRESETS.items():
        algorithms.register(name, preset)
    for name, part in (("sgd", P.SGD), ("adam", P.ADAM), ("amsgrad", P.AMSGRAD)):
        solvers.register(name, part)
    for name, part in (("none", P.NONE), ("scaffold", P.SCAFFOLD), ("vrlsgd", P.VRLSGD), ("nova_vr", P.NOVA_VR),
                       ("fedcm", P.FEDCM), ("lada", P.LADA)):
        corrections.register(name, part)
    aggregations.register("avg", P.AVG)
    aggregations.register("nova", P.NOVA)
    for name, part in (("sgd", P.SERVER_SGD), ("momentum", P.SERVER_MOMENTUM), ("adam", P.SERVER_ADAM),
                       ("yogi", P.SERVER_YOGI), ("adagrad", P.SERVER_ADAGRAD)):
        server_opts.register(name, part)
    for name, part in (("constant", P.CONSTANT), ("polynomial", P.POLYNOMIAL), ("hinge", P.HINGE)):
        staleness.register(name, part)
