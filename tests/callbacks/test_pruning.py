"""ModelPruning on torch.nn.utils.prune: the same masks, weights and saved checkpoint as Lightning's."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from torch import nn

import fulmen
from fulmen.callbacks import ModelPruning
from fulmen.checkpoint import files as checkpoint_io
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _module_class(pl):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.first = nn.Linear(8, 16)
            self.second = nn.Linear(16, 1)

        def forward(self, x):
            return self.second(torch.relu(self.first(x)))

        def training_step(self, batch, batch_idx):
            return self(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(32, 8, generator=torch.Generator().manual_seed(1)), batch_size=8)

    return Net


def _fit(pl, callback, tmp_path):
    model = _module_class(pl)()
    trainer = pl.Trainer(max_epochs=3, callbacks=[callback], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model)
    return model, trainer


CASES = {
    "global_l1": dict(pruning_fn="l1_unstructured", amount=0.3, use_lottery_ticket_hypothesis=False),
    "local_l1": dict(pruning_fn="l1_unstructured", use_global_unstructured=False, amount=0.25,
                                use_lottery_ticket_hypothesis=False),
    "ln_structured_epochs": dict(pruning_fn="ln_structured", use_global_unstructured=False, pruning_dim=0,
                                 pruning_norm=1, amount=lambda epoch: 0.2 * epoch, parameter_names=["weight"],
                                 use_lottery_ticket_hypothesis=False),
}  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("case", list(CASES))
def test_same_pruned_weights_and_checkpoint_as_lightning(tmp_path, case):
    pl = oracle.lightning()
    ours, our_trainer = _fit(fulmen, ModelPruning(**CASES[case]), tmp_path / "f")
    theirs, their_trainer = _fit(pl, pl.callbacks.ModelPruning(**CASES[case]), tmp_path / "l")
    assert ours.state_dict().keys() == theirs.state_dict().keys() == {"first.weight", "first.bias", "second.weight",
                                                                       "second.bias"}  # permanent: no masks left
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    assert (ours.first.weight == 0).any()
    saved = checkpoint_io.load(our_trainer.checkpoint_callback.best_model_path)["state_dict"]
    reference = torch.load(their_trainer.checkpoint_callback.best_model_path, weights_only=False)["state_dict"]
    assert saved.keys() == reference.keys()
    for name in saved:
        torch.testing.assert_close(saved[name], reference[name], msg=name)
    _module_class(fulmen)().load_state_dict(saved)  # loads into the unpruned module


def test_lottery_ticket_rewinds_the_surviving_weights(tmp_path):
    """After each pruning the unpruned weights go back to their values when fit started (Lightning writes the
    initial values into the masked tensor, which the next forward recomputes: its weights are not rewound)."""
    initial = _module_class(fulmen)()
    callback = ModelPruning("l1_unstructured", amount=0.3, make_pruning_permanent=False)
    model = _module_class(fulmen)()
    trainer = fulmen.Trainer(max_epochs=2, callbacks=[callback], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model)
    mask = model.first.weight_mask.bool()
    assert 0 < (~mask).sum() < mask.numel()
    torch.testing.assert_close(model.first.weight_orig[mask], initial.first.weight[mask])
    assert torch.equal(model.first.weight[~mask], torch.zeros_like(model.first.weight[~mask]))


def test_verbose_reports_sparsity(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        _fit(fulmen, ModelPruning("l1_unstructured", amount=0.5, verbose=2), tmp_path)
    messages = [r.getMessage() for r in caplog.records if "Applied `l1_unstructured`" in r.getMessage()]
    assert any(re.search(r"Pruned: 0/(\d+) \(0.00%\) -> \d+/\1 \([45]\d.\d\d%\)", m) for m in messages), messages
    assert any("Linear.weight" in m for m in messages)


def test_configuration_errors():
    with pytest.raises(MisconfigurationException, match="not supported"):
        ModelPruning("magnitude")
    with pytest.raises(MisconfigurationException, match="only unstructured"):
        ModelPruning("ln_structured", pruning_dim=0, pruning_norm=1)
    with pytest.raises(MisconfigurationException, match="pruning_dim"):
        ModelPruning("random_structured", use_global_unstructured=False)
    with pytest.raises(MisconfigurationException, match="'gamma'"):
        ModelPruning("l1_unstructured", parameter_names=["gamma"])
    with pytest.raises(MisconfigurationException, match="amount"):
        ModelPruning("l1_unstructured", amount="half")
