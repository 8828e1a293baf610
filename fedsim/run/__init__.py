"""The runner: reads the Scenario, builds everything once, owns the round loop and the run folder.

``fedsim.run.run(scenario, out)`` (:mod:`fedsim.run.execute`) runs one scenario into one folder;
:mod:`~fedsim.run.build` builds the engine and clock, :mod:`~fedsim.run.loop` is the round loop,
:mod:`~fedsim.run.folder` the run folder, :mod:`~fedsim.run.clock` the clock of a scenario.
Imported lazily, so ``fedsim.run.clock`` alone does not load torch.

Calling the package, ``fedsim.run(scenario, ...)``, calls :func:`fedsim.api.run` (docs/python-api.md).
"""

from .._callable import make_callable

make_callable(__name__, "fedsim.api:run")

__all__ = ["run", "default_out"]


def __getattr__(name):
    if name == "run":
        from .execute import run

        return run
    if name == "default_out":
        from .folder import default_out

        return default_out
    raise AttributeError(f"module 'fedsim.run' has no attribute {name!r}")
