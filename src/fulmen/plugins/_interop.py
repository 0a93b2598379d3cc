"""Recognising Lightning's own plugin objects (Lightning Fabric's ``CheckpointIO``, a cluster environment ...)
without importing Lightning.

A program moving to fulmen keeps the plugins its libraries give it, and those subclass Lightning's abstract
bases: ``lightning.fabric.plugins.io.TorchCheckpointIO``, ``lightning.fabric.plugins.environments.SLURMEnvironment``
and the like. The same bases exist under three package names (``lightning.fabric``, ``lightning_fabric`` and
``pytorch_lightning``'s re-exports), so an identity check would need all three imported. The rule used instead:

- a class in the object's MRO, defined outside fulmen, carries the base's name (``CheckpointIO``,
  ``ClusterEnvironment``, ``LayerSync``): the object says what it is, as a subclass of that base; and
- the object's class has every method of that base's interface and none left abstract: it can be called the
  way fulmen calls its own.

The name alone is not enough (an unrelated class may be called ``CheckpointIO``), and the methods alone are not
either: a ``Strategy`` and a ``Trainer`` also have ``save_checkpoint`` / ``load_checkpoint`` / ``remove_checkpoint``.
"""

from __future__ import annotations

from collections.abc import Iterable


def implements_foreign_base(cls: type, base_name: str, methods: Iterable[str]) -> bool:
    """Whether ``cls`` subclasses a non-fulmen class called ``base_name`` and is a complete implementation of
    ``methods`` (see the module's docstring for why both)."""
    named = any(
        klass.__name__ == base_name and klass.__module__.split(".")[0] != "fulmen" for klass in cls.__mro__
    )
    if not named or getattr(cls, "__abstractmethods__", None):
        return False
    return all(getattr(cls, name, None) is not None for name in methods)
