"""The runner: reads the Scenario, builds everything once, owns the round loop and the run folder.

``fedsim.runner.run(scenario, out)`` (:mod:`fedsim.runner.execute`) runs one scenario into one folder;
:mod:`~fedsim.runner.build` builds the engine and clock, :mod:`~fedsim.runner.loop` is the round loop,
:mod:`~fedsim.runner.folder` the run folder, :mod:`~fedsim.runner.clock` the clock of a scenario.
Imported lazily, so ``fedsim.runner.clock`` alone does not load torch.

The public function of the same job is :func:`fedsim.run` (:func:`fedsim.api.run`, docs/python-api.md).
"""

__all__ = ["run", "default_out"]


def __getattr__(name):
    if name == "run":
        from .execute import run

        return run
    if name == "default_out":
        from .folder import default_out

        return default_out
    raise AttributeError(f"module 'fedsim.runner' has no attribute {name!r}")
