"""The ``data`` and ``model`` sections (``data.partition`` included)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .. import registries
from ..limits import MAX_MODEL_WIDTH
from ..section import FieldError, Section, registered
from .model_options import RESERVED

class PartitionConfig(Section):
    """How training samples are split across clients (ignored for quadratic and synthetic)."""

    name: Literal["iid", "dirichlet", "dirichlet_equal", "shards", "powerlaw"] = "iid"
    alpha: float = Field(0.5, gt=0)
    classes_per_client: int = Field(2, ge=1)
    min_size: int = Field(10, ge=1)
    power: float = Field(1.5, gt=0)


class DataConfig(Section):
    """Workload data. docs/scenario.md says which keys apply to which ``name``."""

    name: str = "quadratic"  # a name in fedsim.registries.DATASETS
    clients: int | None = Field(None, ge=1)
    seed: int | None = None  # seeds the data (draws, partition); default: the scenario seed
    # quadratic
    centers: tuple[tuple[float, ...], ...] | None = None
    dim: int = Field(10, ge=1)
    center_scale: float = Field(1.0, gt=0)
    weights: tuple[float, ...] | None = None
    # synthetic (FedProx Synthetic(alpha, beta))
    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    iid: bool = False
    # digits / images
    partition: PartitionConfig = PartitionConfig()
    root: str = "data"
    download: bool = False
    standin: bool = False
    augment: bool | None = None
    n_train: int | None = Field(None, ge=1)
    n_test: int | None = Field(None, ge=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    # a registered dataset's own options (its factory reads config.options)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return registered(registries.DATASETS, v)

    @field_validator("weights")
    @classmethod
    def _weights(cls, w):
        if w is not None:
            if any(x < 0 for x in w) or sum(w) <= 0:
                raise ValueError("must be non-negative with a positive sum")
        return w

    @model_validator(mode="after")
    def _clients(self):
        if self.name == "quadratic":
            if self.centers is not None:
                if len({len(c) for c in self.centers}) != 1:
                    raise FieldError("data.centers", "every center needs the same dimension")
                if self.clients is not None and self.clients != len(self.centers):
                    raise FieldError("data.clients", "must equal the number of centers")
            if self.weights is not None and len(self.weights) != self.num_clients:
                raise FieldError("data.weights", f"need one weight per client ({self.num_clients})")
        elif self.weights is not None:
            raise FieldError("data.weights", "only for quadratic data (otherwise p_i = n_i / n)")
        return self

    @property
    def clients_from_data(self) -> bool:
        """True when the data decide the number of clients (``clients`` unset and ``name`` is not one
        of the datasets with a default count, e.g. FEMNIST's writers): the runner builds the data
        first and the scenario takes their count (:func:`fedsim.runner.build.adopt_clients`)."""
        return self.clients is None and self.centers is None and self.name not in DEFAULT_CLIENTS

    @property
    def num_clients(self) -> int:
        if self.clients is not None:
            return self.clients
        if self.centers is not None:
            return len(self.centers)
        return 30 if self.name == "synthetic" else 10


#: Datasets whose number of clients defaults to ``num_clients``'s count when ``data.clients`` is unset.
DEFAULT_CLIENTS = frozenset({"quadratic", "synthetic", "digits", "mnist", "fashion_mnist", "cifar10", "cifar100",
                              "tinyimagenet"})


class ModelConfig(Section):
    """The model: a name in :data:`fedsim.registries.MODELS` (``quadratic``: the quadratic problem's
    point, no model) and the factory's own ``options`` (``factory(input_shape, num_classes,
    **options)``; an option its signature does not take is refused when the model is built).
    ``hidden`` is the ``mlp``'s width (passed to factories that take ``hidden``). A built-in model's
    options are checked here (:mod:`.model_options`)."""

    name: str | None = None
    hidden: int = Field(200, ge=1, le=MAX_MODEL_WIDTH)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return v if v is None or v == "quadratic" else registered(registries.MODELS, v)

    @field_validator("options")
    @classmethod
    def _options(cls, v):
        for key in v:
            if not (isinstance(key, str) and key.isidentifier()):
                raise ValueError(f"option {key!r} is not a Python identifier")
            if key in RESERVED:  # fedsim passes these itself: factory(input_shape, num_classes, **options)
                raise ValueError(f"{key!r} is not an option: fedsim gives every model factory the data's {key}")
        return v

