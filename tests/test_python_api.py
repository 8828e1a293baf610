"""docs/python-api.md: its Python code blocks run, top to bottom, in one namespace (their asserts
are the page's claims). The registrations they make are undone afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python-api.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def test_the_page_has_examples():
    assert len(blocks()) >= 5


def test_the_examples_run(tmp_path, monkeypatch):
    from fedsim import registries

    monkeypatch.chdir(tmp_path)
    before = {kind: set(r.names()) for kind, r in registries.ALL.items()}
    try:
        namespace: dict = {}
        for i, code in enumerate(blocks()):
            exec(compile(code, f"{PAGE.name} block {i + 1}", "exec"), namespace)  # noqa: S102 - the page's own code
    finally:
        for kind, r in registries.ALL.items():
            for name in set(r.names()) - before[kind]:
                r.unregister(name)
    assert not any(tmp_path.iterdir())  # out=None everywhere: nothing left behind


@pytest.mark.parametrize("name, module", [("run", "fedsim.runner"), ("schedule", "fedsim.clock_only")])
def test_run_and_schedule_are_the_api_functions_and_no_module_shadows_them(name, module):
    import importlib

    import fedsim
    import fedsim.api

    importlib.import_module(module)  # the runner and the clock-only mode: packages of other names
    assert getattr(fedsim, name) is getattr(fedsim.api, name)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"fedsim.{name}")
