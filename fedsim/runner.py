"""Compatibility name for :mod:`fedsim.run` (the runner package): ``run``, ``default_out`` and
``prepare_folder``, for callers not yet importing them from there."""

from .run.execute import run
from .run.folder import default_out, prepare_folder

__all__ = ["run", "default_out", "prepare_folder"]
