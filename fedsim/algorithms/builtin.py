"""fedsim's own algorithms and algorithm parts, registered as a plug-in would register its own.

Torch-free: presets are plain mappings and parts are lazy ``"module:attribute"`` strings, so that
checking a scenario's names (``fedsim validate``) imports no torch.
"""

from __future__ import annotations

from .presets import PRESETS

__all__ = ["register_builtins"]


def register_builtins(algorithms, solvers, corrections, aggregations, server_opts, staleness) -> None:
    """Register the built-in presets and parts into the given registries (:mod:`fedsim.registries`)."""
    for name, preset in PRESETS.items():
        algorithms.register(name, preset)
    for name in ("sgd", "adam", "amsgrad"):
        solvers.register(name, f"fedsim.algorithms.parts:solver_{name}")
    for name in ("none", "scaffold", "vrlsgd", "fedcm", "lada", "nova_vr"):
        corrections.register(name, f"fedsim.algorithms.parts:correction_{name}")
    for name in ("avg", "nova"):
        aggregations.register(name, f"fedsim.algorithms.parts:aggregation_{name}")
    for name in ("sgd", "momentum", "adam", "yogi", "adagrad"):
        server_opts.register(name, f"fedsim.algorithms.parts:server_{name}")
    for name in ("constant", "polynomial", "hinge"):
        staleness.register(name, f"fedsim.algorithms.parts:staleness_{name}")
