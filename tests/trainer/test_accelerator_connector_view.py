"""``trainer._accelerator_connector``: libraries built on Lightning read it (optuna-integration's pruning
callback asks ``is_distributed`` in ``on_fit_start``), so it answers as Lightning's does."""

from __future__ import annotations

import pytest

from tests.parity import oracle

_CASES = [("auto", 1), ("single_device", 1), ("ddp", 2), ("ddp_spawn", 2), ("ddp_fork", 2)]


@oracle.parity
@pytest.mark.parametrize(("strategy", "devices"), _CASES)
def test_is_distributed_as_lightning(strategy: str, devices: int) -> None:
    import fulmen

    pl = oracle.lightning()
    kwargs = dict(accelerator="cpu", strategy=strategy, devices=devices, logger=False)
    ours = fulmen.Trainer(**kwargs)._accelerator_connector
    theirs = pl.Trainer(**kwargs)._accelerator_connector
    assert ours.is_distributed is theirs.is_distributed


def test_view_reads_the_trainer_choices() -> None:
    import fulmen

    trainer = fulmen.Trainer(accelerator="cpu", strategy="ddp_spawn", devices=2, logger=False)
    connector = trainer._accelerator_connector
    assert connector.is_distributed is True
    assert connector.strategy is trainer.strategy
    assert connector.accelerator is trainer.accelerator
    assert connector.precision_plugin is trainer.precision_plugin
    assert fulmen.Trainer(accelerator="cpu", logger=False)._accelerator_connector.is_distributed is False
