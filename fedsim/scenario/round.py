"""The ``round`` section: the server's round policy and the work each client is given."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ..section import FieldError, Section, registered
from .distributions import Constant, IntDist, dist_low
from ..section_errors import nested_error

#: Largest ``round.overcommit`` factor (FedScale's default is 1.3).
MAX_OVERCOMMIT = 100.0


class RoundConfig(Section):
    """Server round policy and the work each client is given."""

    policy: Literal["window", "wait", "deadline", "overcommit", "async"] = "window"
    window: float | None = Field(None, gt=0)
    deadline: float | None = Field(None, gt=0)
    local_steps: int | IntDist | None = None
    local_epochs: int | IntDist | None = None
    max_local_steps: int | None = Field(None, ge=1)
    clients_per_round: int | None = Field(None, ge=1)
    #: whom the server picks: a registered rule's section {name: NAME, ...} (fedsim.registries.SELECTORS);
    #: None: the rule round.sampling and round.weights name
    selection: Any = None
    sampling: Literal["uniform", "weighted"] = "uniform"
    weights: Literal["normalized", "unbiased"] = "normalized"  # uniform sampling's w_i (docs/algorithms.md)
    # over-commitment (FedScale): select ceil(overcommit * clients_per_round), keep the first K
    overcommit: float = 1.3
    # asynchronous policy
    concurrency: int | None = Field(None, ge=1)
    buffer: int = Field(1, ge=1)
    #: async on a time budget: each job computes for S seconds (tau_i from the device, as in a window)
    local_time: float | None = Field(None, gt=0)
    #: deadline: a job still computing when the time left is its upload time is dropped (drop) or
    #: uploads the steps it has done (partial)
    on_deadline: Literal["drop", "partial"] = "drop"

    @field_validator("local_steps", "local_epochs")
    @classmethod
    def _work(cls, w, info):
        if isinstance(w, Constant) and not float(w.value).is_integer():
            raise ValueError("a constant number of steps or epochs must be an integer")
        if w is not None and dist_low(w) < 1:
            raise ValueError("must be >= 1")
        return w  # upper bounds: fedsim.validate.check_limits

    @field_validator("selection", mode="before")
    @classmethod
    def _selection(cls, v):
        return selection_value(v)

    @model_validator(mode="after")
    def _one_selection(self):
        if self.selection is None:
            return self
        legacy = sorted({"sampling", "weights"} & self.model_fields_set)
        if legacy:
            raise FieldError("round.selection", f"give the rule here or round.{legacy[0]}, not both")
        if self.policy == "async" and self.selection.clock_value().sync_only:
            raise FieldError("round.selection", f"{self.selection.name!r} picks synchronous rounds only, not "
                              "policy async")
        return self

    @field_validator("overcommit")
    @classmethod
    def _overcommit(cls, v):
        if not 1 <= v <= MAX_OVERCOMMIT:
            raise ValueError(f"must be between 1 and {MAX_OVERCOMMIT:g} (a factor on clients_per_round)")
        return v

    def value(self, batch_size: int):
        """The clock's :class:`fedsim.clock.model.RoundRule` (:func:`.clock_values.round_value`)."""
        from .clock_values import round_value

        return round_value(self, batch_size)


def selection_value(v: Any) -> Any:
    """``round.selection`` checked: a registered rule's section ``{name: NAME, ...}``
    (``fedsim.registries.SELECTORS``, :mod:`fedsim.selection`) whose ``clock_value()`` gives the
    clock a :class:`~fedsim.clock.selection.SelectionRule`; None when not given."""
    from ..clock.selection import SelectionRule
    from ..registries import SELECTORS
    from ..selection.section import SelectionSection

    if v is None or isinstance(v, SelectionSection):
        section = v
    elif isinstance(v, dict):
        name = v.get("name")
        if not isinstance(name, str):
            known = ", ".join(SELECTORS.names())
            raise FieldError("round.selection.name", f"missing (which rule? {known})" if name is None
                              else f"must be a rule's name ({known})")
        cls = SELECTORS.get(registered(SELECTORS, name))
        if not (isinstance(cls, type) and issubclass(cls, SelectionSection)):
            raise FieldError("round.selection.name", f"{name!r} is registered as {cls!r}, not a subclass of "
                              "fedsim.selection.section.SelectionSection")
        try:
            section = cls.model_validate(v)
        except ValidationError as err:
            raise nested_error(err, "round.selection") from None
    else:
        raise FieldError("round.selection", "give {name: NAME, ...} (a registered selection rule)")
    if section is None:
        return None
    try:
        rule = section.clock_value()
    except Exception as err:  # noqa: BLE001 -- a user's section: one line naming it
        raise FieldError("round.selection", f"rule {section.name!r}: clock_value() failed: {type(err).__name__}: "
                          f"{err}".rstrip(": ")) from None
    if not isinstance(rule, SelectionRule):
        raise FieldError("round.selection", f"rule {section.name!r}: clock_value() returned {type(rule).__name__}, "
                          "not a fedsim.clock.selection.SelectionRule")
    return section
