"""``variants:``: one scenario per named set of dotted overrides of a base scenario."""

from __future__ import annotations

from pathlib import Path

from ..errors import ScenarioError
from .loading import _deepcopy, parse_scenario, set_dotted
from .schema import Scenario

__all__ = ["expand_variants"]


def expand_variants(sc: Scenario, raw: dict, base_dir: Path | None = None) -> list[tuple[str, Scenario]]:
    """``[(variant, scenario)]``: one scenario per entry of ``variants`` (overrides applied)."""
    if not sc.variants:
        return [("", sc)]
    out = []
    for vname, over in sc.variants.items():
        if not isinstance(over, dict):
            raise ScenarioError(f"variants.{vname}: must map dotted keys to values")
        sub = {k: v for k, v in raw.items() if k != "variants"}
        sub = _deepcopy(sub)
        for k, v in over.items():
            set_dotted(sub, str(k), _deepcopy(v), f"variants.{vname}.{k}")
        sub["name"] = f"{sc.name}/{vname}"
        try:
            out.append((vname, parse_scenario(sub, base_dir)))
        except ScenarioError as err:
            raise ScenarioError(f"variants.{vname}.{err}") from None
    return out

