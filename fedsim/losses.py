"""Losses by name (``loss: {name: ...}``, :data:`fedsim.registries.LOSSES`).

A loss is ``loss(outputs, targets) -> scalar`` (the minibatch mean), registered by name as a
user's would be (``fedsim.register_loss``). fedsim's own is ``cross_entropy`` over the last
dimension of the outputs, the default. The engine runs that default through its own fused
cross-entropy path (the same arithmetic, batched across clients), so :func:`scenario_loss` hands
it on as ``None``; any other loss, or ``cross_entropy`` registered again with ``replace=True``, is
called as given.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

__all__ = ["cross_entropy", "scenario_loss", "NamedLoss"]


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of class ``targets`` (int64, any leading shape) under ``outputs`` logits
    (the same leading shape plus the classes)."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


def scenario_loss(sc: Any) -> Callable | None:
    """The loss a scenario names (``loss.name``): None for fedsim's own cross-entropy (the engine's
    default path), else the registered callable."""
    from .registries import LOSSES

    loss = LOSSES.get(sc.loss.name)
    return None if loss is cross_entropy else loss


class NamedLoss:
    """A user's loss that, failing, says which it is: whatever ``fn`` raises (``sys.exit``
    included; not KeyboardInterrupt) becomes a one-line :class:`fedsim.errors.PartError`
    ``loss 'NAME': raised Type: message`` (a run that fails mid-way exits 1 naming it)."""

    def __init__(self, fn: Callable, label: str):
        self.fn, self.label = fn, label

    def __call__(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        try:
            return self.fn(outputs, targets)
        except (Exception, SystemExit) as err:  # noqa: BLE001 -- a user's loss: one line naming it
            from .errors import PartError
            from .factory_options import failure

            raise PartError(f"{self.label}: raised {failure(err)}") from err
