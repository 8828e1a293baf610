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


def test_federated_data_arguments_are_all_documented():
    """docs/python-api.md names every field of FederatedData and every parameter of its two
    constructors (issue 28, the researcher's rough edges)."""
    import dataclasses
    import inspect
    from pathlib import Path

    from fedsim.data.federated import FederatedData

    text = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text()
    section = text[text.index("### `FederatedData`"):text.index("## Your own loss")]
    for f in dataclasses.fields(FederatedData):
        assert f"`{f.name}`" in section, f.name
    for ctor in (FederatedData.from_clients, FederatedData.from_column):
        params = [p for p in inspect.signature(ctor).parameters if p != "kw"]
        shown = f"`FederatedData.{ctor.__name__}({', '.join(params[:-1] if ctor.__name__ == 'from_column' else params[:1])}"
        assert shown in section, shown
        for p in params:
            assert p in section, p
    sig = "`fedsim.FederatedData(" + ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}={f.default!r}" for f in dataclasses.fields(FederatedData))
    assert sig.replace("'", '"') in " ".join(section.split()), sig
