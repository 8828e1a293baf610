"""docs/selection.md states keys, defaults, flags and FedScale's commit; each is checked here, and
the sections' keys against their rules."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from fedsim.section_errors import nested_error
from fedsim.selection.fastest import Fastest, FastestSelection
from fedsim.selection.oort import Oort, OortSelection
from fedsim.selection.tiers import AdaptiveTiers, Tiers, TiersSelection

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "selection.md").read_text()
FIXTURES = ROOT / "tests" / "fixtures" / "oort_fedscale"


def key_table(heading: str) -> dict[str, str]:
    section = DOC.split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return dict(re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \|", section, flags=re.M))


def as_value(text: str):
    words = {"null": None, "true": True, "false": False}
    return words[text] if text in words else float(text)


@pytest.mark.parametrize("heading, section", [("## `oort`", OortSelection), ("## `tiers`", TiersSelection)])
def test_key_tables_list_exactly_the_keys_with_their_defaults(heading, section):
    table = key_table(heading)
    fields = {k: f.default for k, f in section.model_fields.items() if k != "name"}
    assert list(table) == list(fields)
    for key, text in table.items():
        assert as_value(text) == fields[key], key


def test_fastest_has_no_keys():
    assert list(FastestSelection.model_fields) == ["name"] and "`{name: fastest}` (no keys)" in DOC


def test_section_defaults_are_the_rules_defaults():
    assert OortSelection(name="oort").clock_value() == Oort()
    assert TiersSelection(name="tiers").clock_value() == AdaptiveTiers()
    assert type(TiersSelection(name="tiers", adaptive=False).clock_value()) is Tiers
    assert FastestSelection(name="fastest").clock_value() == Fastest()
    rule = OortSelection(name="oort", pacer_step=3, blacklist_rounds=2).clock_value()
    assert (rule.pacer_step, rule.blacklist_rounds) == (3, 2)


def test_oort_defaults_are_fedscales():
    sys.path.insert(0, str(FIXTURES))
    try:
        from make_reference import FEDSCALE_DEFAULTS
    finally:
        sys.path.remove(str(FIXTURES))
    ours = OortSelection.model_fields
    for key, value in FEDSCALE_DEFAULTS.items():
        if key == "exploration_alpha":  # FedScale logs it only
            assert key not in ours
        elif key == "blacklist_rounds":
            assert value == -1 and ours[key].default is None  # FedScale's "off"
        else:
            assert ours[key].default == value, key


def test_flag_table():
    table = re.findall(r"^\| `(\w+)`( \(`adaptive: (true|false)`\))? \| (yes|no) \| (yes|no) \| (yes|no) \|$", DOC, flags=re.M)
    rules = {("oort", ""): Oort, ("tiers", "true"): AdaptiveTiers, ("tiers", "false"): Tiers, ("fastest", ""): Fastest}
    assert len(table) == 4
    for name, _, adaptive, feedback, losses, sync in table:
        cls = rules[(name, adaptive)]
        assert (cls.uses_feedback, cls.uses_losses, cls.sync_only) == (feedback == "yes", losses == "yes", sync == "yes")


def test_the_fedscale_commit_is_the_fixtures():
    commit = json.loads((FIXTURES / "reference.json").read_text())["fedscale_commit"]
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    assert f"commit {commit}" in DOC and commit in (FIXTURES / "README.md").read_text()


def test_the_feedback_timing_rules_are_stated():
    """The two timing rules the runner's tests check (tests/test_selection_run.py)."""
    assert "Round r+1's pick sees the observations of rounds 0..r" in DOC
    assert "It sees the\nobservations of every server update made at or before t" in DOC
    assert "Placeholder" not in DOC


@pytest.mark.parametrize("section, keys, message", [
    (OortSelection, {"exploration_factor": 1.5}, "round.selection.exploration_factor: Input should be less than or equal to 1"),
    (OortSelection, {"bogus": 1}, "round.selection.bogus: unknown key"),
    (OortSelection, {"pacer_step": True}, "round.selection.pacer_step: must not be true/false"),
    (OortSelection, {"pacer_step": 0}, "round.selection.pacer_step: Input should be greater than or equal to 1"),
    (OortSelection, {"sample_window": 0.5}, "round.selection.sample_window: Input should be greater than or equal to 1"),
    (OortSelection, {"round_penalty": float("nan")}, "round.selection.round_penalty: Input should be a finite number"),
    (OortSelection, {"blacklist_rounds": -1}, "round.selection.blacklist_rounds: Input should be greater than or equal to 0"),
    (OortSelection, {"round_threshold": 101}, "round.selection.round_threshold: Input should be less than or equal to 100"),
    (TiersSelection, {"tiers": 0}, "round.selection.tiers: Input should be greater than or equal to 1"),
    (TiersSelection, {"tiers": 10**30}, "round.selection.tiers: Input should be less than or equal to 1000000"),
    (TiersSelection, {"credits": 2.5}, "round.selection.credits: Input should be a valid integer"),
    (TiersSelection, {"interval": True}, "round.selection.interval: must not be true/false"),
    (TiersSelection, {"adaptive": "maybe"}, "round.selection.adaptive: Input should be a valid boolean"),
    (FastestSelection, {"k": 1}, "round.selection.k: unknown key"),
])
def test_errors_name_the_key(section, keys, message):
    with pytest.raises(ValidationError) as err:
        section(name=section.model_fields["name"].default, **keys)
    assert str(nested_error(err.value, "round.selection")).startswith(message)
