"""The run's freshly initialized model, from the scenario's ``model`` section or a Python factory."""

from __future__ import annotations

import torch

__all__ = ["make_model"]


def make_model(sc, input_shape: tuple[int, ...], num_classes: int | None, model=None) -> torch.nn.Module:
    """The run's freshly initialized model: ``model`` (a factory ``(input_shape, num_classes,
    **options)``, or a module, deep-copied) when given from Python, else the factory registered as
    ``model.name``; either gets ``model.options`` (an option the factory does not take: one line).
    A factory that returns anything but an ``nn.Module``, one with more than
    ``MAX_MODEL_PARAMETERS`` parameters, or one fedsim did not register that raises, is one line
    naming it (exit 2)."""
    import copy

    from ..errors import ScenarioError
    from ..factory_options import failure
    from ..named_pieces import BUILTIN
    from ..registries import MODELS
    from . import build_model, call_factory, check_size

    if model is None:
        name = sc.model_name
        what, path, who = f"model {name!r} (registered by {MODELS.registrant(name)})", "model.name", MODELS.registrant(name)

        def build():
            return build_model(name, input_shape, num_classes, **{"hidden": sc.model.hidden, **sc.model.options})
    elif isinstance(model, torch.nn.Module):
        return copy.deepcopy(model)
    elif not callable(model):
        raise ScenarioError(f"model: expected an nn.Module or a factory (input_shape, num_classes) -> nn.Module, "
                            f"got {type(model).__name__}")
    else:
        what, path, who = "the model factory", "model", None

        def build():
            return check_size(call_factory(model, (tuple(input_shape), num_classes), dict(sc.model.options),
                                           "the model factory", "model.options"), "the model factory", "model")
    try:
        module = build()
    except ScenarioError:
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a user's factory failing is one line naming it
        if who == BUILTIN:
            raise
        raise ScenarioError(f"{path}: {what} raised {failure(err)}") from None
    if not isinstance(module, torch.nn.Module):
        raise ScenarioError(f"{path}: {what} returned {type(module).__name__}, not a torch.nn.Module")
    return module
