"""What a launcher is: it starts the processes a strategy trains in, then runs the stage in them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

# the note a rank's error gets when it failed only because another rank had ended first (the connection closed):
# launchers then look for that other rank's own error
FOLLOWS_ANOTHER_RANK = "another rank of this job probably ended first"


class _Launcher(ABC):
    """Starts the processes of a run and calls the stage's function in them (or in this one)."""

    @property
    @abstractmethod
    def is_interactive_compatible(self) -> bool:
        """Whether it can start processes from a notebook or an interactive shell."""

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the processes, run ``function(*args, **kwargs)`` and return its result (rank 0's)."""

    @abstractmethod
    def kill(self, signum: int) -> None:
        """Send ``signum`` to the processes this launcher started."""
