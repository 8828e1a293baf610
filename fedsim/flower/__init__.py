"""A Flower app, unchanged, on fedsim's clock (docs/flower.md). The only part of fedsim that
imports ``flwr`` (the optional extra ``fedsim[flower]``).

* :func:`run`: a ServerApp and a ClientApp on a scenario's clock, the run folder written;
* :class:`ClockGrid`: the Grid itself (``fedsim.flower.grid``);
* :data:`STEPS_KEY`: ``"fedsim-steps"``, the config key carrying tau_i and the metric billed.
"""

from .grid import ClockGrid, NODE_ID_OFFSET, billed_steps
from .load import load_app
from .run import FlowerRun, grid_for, run
from .timing import STEPS_KEY

__all__ = ["run", "grid_for", "FlowerRun", "ClockGrid", "STEPS_KEY", "NODE_ID_OFFSET", "billed_steps", "load_app"]
