"""Progress bars: ``ProgressBar`` (the base), ``TQDMProgressBar`` (the default) and ``RichProgressBar``.

``RichProgressBar`` is loaded on first use, so that ``rich`` is imported only by those who draw with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.callbacks.progress.progress_bar import ProgressBar
from fulmen.callbacks.progress.tqdm_progress import TQDMProgressBar
from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.callbacks.progress.rich_progress import RichProgressBar

__all__ = ["ProgressBar", "RichProgressBar", "TQDMProgressBar"]
__getattr__, __dir__ = lazy_exports(__name__, {"RichProgressBar": "rich_progress"})
