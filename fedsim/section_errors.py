"""Pydantic's validation errors turned into one line naming the field (``system.speed: must be > 0``)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .section import BoolGiven, FieldError

__all__ = ["format_error", "nested_error"]


def format_error(err: ValidationError) -> str:
    path, msg, _ = _parts(err)
    return f"{path}: {msg}" if path else msg


def nested_error(err: ValidationError, prefix: str) -> FieldError:
    """The first problem of a section validated on its own (a registered piece's keys) as a
    :class:`FieldError` at ``prefix`` (a path a validator gave in full is kept)."""
    path, msg, full = _parts(err)
    return FieldError(path if full else f"{prefix}.{path}" if path else prefix, msg)


def _parts(err: ValidationError) -> tuple[str, str, bool]:
    """(field path, message, whether a validator gave the path in full) of the first problem."""
    e = _first_problem(err.errors(include_url=False))
    loc = [str(p) for p in e["loc"] if not _is_union_tag(p)]
    path = ".".join(loc)
    msg = e["msg"]
    ctx = e.get("ctx") or {}
    if isinstance(ctx.get("error"), FieldError):
        return ctx["error"].path, ctx["error"].msg, True
    if isinstance(e.get("input"), BoolGiven):
        msg = f"must not be true/false (got {e['input']!r})"  # YAML 1.2 spelling, e.g. [1, true]
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif e["type"] == "union_tag_invalid":
        path, msg = f"{path}.{ctx['discriminator'].strip(chr(39))}", f"{ctx['tag']!r} is not one of {ctx['expected_tags']}"
    elif e["type"] == "union_tag_not_found":
        path, msg = f"{path}.{ctx['discriminator'].strip(chr(39))}", "missing (which distribution?)"
    return path, msg, False


# Errors saying only that a union member does not take this kind of value at all.
_MISMATCH = {
    "float_type", "int_type", "tuple_type", "list_type", "string_type", "bool_type", "dict_type",
    "model_type", "model_attributes_type", "literal_error", "float_parsing", "int_parsing", "bool_parsing",
}


def _first_problem(errors: list[dict]) -> dict:
    """The error that names the real problem of the first invalid field.

    For a union (``speed: 3.0 | [...] | {dist: ...}``) pydantic lists one error per member, the
    members that do not take the value's kind first; the useful one is inside the member that
    does take it (an unknown key, a missing one, ``low > high``). Unknown keys come first: a
    typo (``lo`` for ``low``) is then named, not the key it left missing.
    """
    first = errors[0]
    k = next((i for i, p in enumerate(first["loc"]) if _is_union_tag(p)), None)
    if k is None:
        return first
    prefix = first["loc"][:k]
    same = [e for e in errors if e["loc"][:k] == prefix and len(e["loc"]) > k and _is_union_tag(e["loc"][k])]
    real = [
        e for e in same
        if e["type"] not in _MISMATCH or any(not _is_union_tag(p) for p in e["loc"][k + 1 :])
    ]
    return next((e for e in real if e["type"] == "extra_forbidden"), real[0] if real else first)


def _is_union_tag(p: Any) -> bool:
    # pydantic puts union member names (e.g. 'float', 'tuple[float, ...]', 'uniform') in loc
    return isinstance(p, str) and (
        p in {"float", "int", "str", "bool", "uniform", "lognormal", "randint", "constant", "exponential"}
        or "[" in p
        or p.startswith("function-")
        or p in {"literal['always']", "Uniform", "LogNormal", "RandInt", "Constant"}
    )

