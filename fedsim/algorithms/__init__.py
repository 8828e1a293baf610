"""Federated algorithms as composed pieces (docs/algorithms.md).

``Algorithm`` (from ``algorithm.py``) is imported on first use, so reading a scenario
(``spec.py``) does not load torch.
"""

from importlib import import_module

__all__ = ["Algorithm"]


def __getattr__(name: str):
    if name == "Algorithm":
        return import_module(".algorithm", __name__).Algorithm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
