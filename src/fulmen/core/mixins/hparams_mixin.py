"""``HyperparametersMixin``: ``save_hyperparameters()`` and the ``hparams`` it fills, for modules, data modules
and any class of yours (it needs no ``nn.Module``)."""

from __future__ import annotations

import copy
import inspect
import types
from argparse import Namespace
from collections.abc import MutableMapping, Sequence
from typing import Any

from fulmen.utilities.parsing import AttributeDict, save_hyperparameters

_PRIMITIVES = (bool, int, float, str)


class HyperparametersMixin:
    """Gives a class ``save_hyperparameters()``, ``hparams`` and ``hparams_initial``.

    ``hparams`` is what checkpoints store and what the trainer sends to the loggers (unless
    ``save_hyperparameters(logger=False)``); ``hparams_initial`` is a copy taken when they were saved, which later
    edits of ``hparams`` do not change.
    """

    __jit_unused_properties__: list[str] = ["hparams", "hparams_initial"]
    # also a class attribute: LightningModule's nn.Module.__init__ does not chain to this __init__
    _log_hyperparams: bool = False
    _hparams: Any  # an AttributeDict, or the mutable mapping (an OmegaConf DictConfig) that was given

    def __init__(self) -> None:
        super().__init__()
        self._log_hyperparams = False

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: Sequence[str] | str | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Record the arguments of ``__init__`` (all, the ones named in ``args``, or one dict / Namespace given
        as the only argument) in ``self.hparams``, leaving out the names in ``ignore``.

        They go into checkpoints and, unless ``logger=False``, to the loggers when fitting starts.
        """
        self._log_hyperparams = logger
        if frame is None:
            current = inspect.currentframe()
            frame = current.f_back if current is not None else None
        save_hyperparameters(self, *args, ignore=ignore, frame=frame)

    def _set_hparams(self, hp: MutableMapping[Any, Any] | Namespace | str) -> None:
        self._hparams = self._to_hparams_dict(hp)

    def remove_ignored_hparams(self, ignore_list: list[str]) -> None:
        """Drop the named keys from ``hparams`` (``hparams_initial`` keeps them)."""
        hparams = getattr(self, "_hparams", None)
        if hparams is None:
            return
        for key in ignore_list:
            hparams.pop(key, None)

    @staticmethod
    def _to_hparams_dict(hp: MutableMapping[Any, Any] | Namespace | str) -> MutableMapping[Any, Any] | AttributeDict:
        """A dict or Namespace as an ``AttributeDict``; another mutable mapping (an OmegaConf ``DictConfig``) as
        it is, so that its own type is what checkpoints store."""
        if isinstance(hp, Namespace):
            return AttributeDict(vars(hp))
        if isinstance(hp, dict):
            return hp if isinstance(hp, AttributeDict) else AttributeDict(hp)
        if isinstance(hp, MutableMapping):
            return hp
        if isinstance(hp, _PRIMITIVES):
            raise ValueError(
                f"Primitives {_PRIMITIVES} are not allowed as hyperparameters: got {hp!r}. Pass a dict, an "
                "argparse.Namespace or another mutable mapping of names to values."
            )
        raise ValueError(
            f"Unsupported config type of {type(hp)}: hyperparameters are a dict, an argparse.Namespace or another "
            "mutable mapping."
        )

    @property
    def hparams(self) -> AttributeDict:
        """The saved hyperparameters (an ``AttributeDict``: ``self.hparams.lr`` or ``self.hparams["lr"]``)."""
        if not hasattr(self, "_hparams"):
            self._hparams = AttributeDict()
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as ``save_hyperparameters`` saved them."""
        if not hasattr(self, "_hparams_initial"):
            return AttributeDict()
        return copy.deepcopy(self._hparams_initial)

    @property
    def log_hyperparams_enabled(self) -> bool:
        """Whether loggers receive these hyperparameters (``save_hyperparameters(logger=False)`` turns it off)."""
        return self._log_hyperparams
