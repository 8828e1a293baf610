"""The options of fedsim's own models (fedsim/models), checked when a scenario is validated (here,
not in the torch-importing ``fedsim.models`` package, so validation imports no torch).

``model.options`` of a built-in model (and ``model.hidden``, which the ``mlp`` takes) must be of
the option's type and within its bounds (issue 28 item 7: ``hidden: 100000000`` asked for a 24 GB
matrix, ``hidden: -5`` and ``hidden: "x"`` failed inside torch, ``cell: evil`` inside the model):

==============  ===========================================================================
model           options
==============  ===========================================================================
``logreg``      none
``mlp``         ``hidden``: int in [1, ``MAX_MODEL_WIDTH``]
``cnn``         none
``vgg11``       none
``resnet18_gn`` none
``leaf_cnn``    ``dense``: int in [1, ``MAX_MODEL_WIDTH``]
``char_lstm``   ``vocab``: null or int in [1, ``MAX_MODEL_WIDTH``]; ``embed``, ``units``: int in
                [1, ``MAX_MODEL_WIDTH``]; ``layers``: int in [1, ``MAX_MODEL_LAYERS``]; ``cell``:
                ``leaf`` or ``torch``
==============  ===========================================================================

Within these bounds a model can still be large for its data (``MAX_MODEL_WIDTH`` hidden units on
a wide input): :func:`fedsim.models.build_model` counts a built-in model's parameters on torch's
meta device, before anything is allocated, and refuses more than ``MAX_MODEL_PARAMETERS``.
"""

from __future__ import annotations

from typing import Any

from ..limits import MAX_MODEL_LAYERS, MAX_MODEL_WIDTH

__all__ = ["BUILTIN_OPTIONS", "RESERVED", "option_problem", "check_builtin_options", "is_builtin"]

#: Arguments fedsim passes every model factory itself: never an option.
RESERVED = ("input_shape", "num_classes")

_WIDTH = ("int", 1, MAX_MODEL_WIDTH)

#: model -> option -> rule: ("int", low, high), ("int?", low, high) (null allowed) or ("choice", values).
BUILTIN_OPTIONS: dict[str, dict[str, tuple]] = {
    "logreg": {},
    "mlp": {"hidden": _WIDTH},
    "cnn": {},
    "vgg11": {},
    "resnet18_gn": {},
    "leaf_cnn": {"dense": _WIDTH},
    "char_lstm": {"vocab": ("int?", 1, MAX_MODEL_WIDTH), "embed": _WIDTH, "units": _WIDTH,
                  "layers": ("int", 1, MAX_MODEL_LAYERS), "cell": ("choice", ("leaf", "torch"))},
}


def option_problem(rule: tuple, value: Any) -> str | None:
    """Why ``value`` breaks ``rule`` (None when it does not)."""
    kind = rule[0]
    if kind == "choice":
        return None if isinstance(value, str) and value in rule[1] else f"must be one of {', '.join(rule[1])}"
    if value is None and kind == "int?":
        return None
    low, high = rule[1], rule[2]
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer in [{low:,}, {high:,}]"
    if not low <= value <= high:
        return f"must be in [{low:,}, {high:,}]"
    return None


def is_builtin(name: str) -> bool:
    """Whether ``model.name`` is still fedsim's own model (not registered again by a user)."""
    from ..registries import MODELS

    if name not in BUILTIN_OPTIONS:
        return False
    loaded = MODELS.loaded(name)
    if loaded is None:  # still the lazy "fedsim.models...:name" target
        return True
    return getattr(loaded, "__module__", "").startswith("fedsim.models") and getattr(loaded, "__name__", "") == name


def check_builtin_options(name: str, options: dict) -> tuple[str, str] | None:
    """``(field path, problem)`` for the first option of built-in model ``name`` it does not take
    or whose value breaks its rule; None when all are fine."""
    rules = BUILTIN_OPTIONS[name]
    for key, value in options.items():
        if key not in rules:
            takes = ", ".join(rules) or "none"
            return "model.options", f"model {name!r} takes no option {key!r}; it takes: {takes}"
        problem = option_problem(rules[key], value)
        if problem:
            return f"model.options.{key}", problem
    return None
