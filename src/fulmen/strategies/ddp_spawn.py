"""``strategy="ddp_spawn"``: DDP in processes that ``torch.multiprocessing`` starts from inside ``fit``.

The calling process only starts the workers and waits (see
:class:`~fulmen.strategies.launchers.multiprocessing._MultiProcessingLauncher`); each worker joins the process
group and runs the stage as under ``strategy="ddp"``, and the trained state comes back to the caller's trainer
and module. This is ``DDPStrategy(start_method="spawn")`` under its own name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.strategies.ddp import DDPStrategy
from fulmen.utilities.exceptions import InvalidValueError

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.precision import Precision


class DDPSpawnStrategy(DDPStrategy):
    """DDP whose processes ``fit`` starts with ``torch.multiprocessing`` (``start_method`` 'spawn' by
    default; 'fork' is what ``strategy="ddp_fork"``/``"ddp_notebook"`` use, e.g. in notebooks)."""

    strategy_name = "ddp_spawn"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
        start_method: str = "spawn",
        **kwargs: Any,
    ) -> None:
        """``kwargs`` are DDPStrategy's: process_group_backend, timeout, ddp_comm_hook, find_unused_parameters ..."""
        if start_method == "popen":
            raise InvalidValueError(
                "DDPSpawnStrategy(start_method='popen'): 'popen' runs the script again, which is strategy='ddp'. "
                "Use DDPStrategy(), or a start method of torch.multiprocessing: 'spawn', 'fork' or 'forkserver'."
            )
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin, start_method=start_method, **kwargs)
