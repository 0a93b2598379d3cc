"""from_compiled / to_uncompiled: a compiled LightningModule back as the module, its steps compiled, and undone;
the errors are Lightning's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fulmen
from fulmen.utilities.compile import from_compiled, to_uncompiled
from tests.parity import oracle

pytestmark = pytest.mark.slow  # torch._dynamo's first import and trace take seconds


def _module(base: type):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            return self(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def test_from_compiled_compiles_the_steps_the_user_wrote_and_to_uncompiled_undoes_it():
    model = _module(fulmen.LightningModule)
    compiled = torch.compile(model, backend="eager")
    unwrapped = from_compiled(compiled)
    assert unwrapped is model and isinstance(unwrapped, fulmen.LightningModule)
    assert {"forward", "training_step"} <= set(vars(model))  # compiled versions on the instance
    assert "validation_step" not in vars(model)  # not written by the user: left as the default
    x = torch.ones(3, 4)
    torch.testing.assert_close(model(x), model.layer(x))
    assert from_compiled(compiled) is model  # again: nothing is wrapped twice
    assert to_uncompiled(model) is model
    assert not {"forward", "training_step"} & set(vars(model))
    with pytest.raises(ValueError, match="non-compiled LightningModule"):
        to_uncompiled(model)
    assert to_uncompiled(torch.compile(model, backend="eager")) is model  # from what torch.compile returned


def test_a_module_from_from_compiled_trains():
    model = from_compiled(torch.compile(_module(fulmen.LightningModule), backend="eager"))
    before = model.layer.weight.detach().clone()
    trainer = fulmen.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False)  # fmt: skip
    trainer.fit(model, torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4))
    assert not torch.equal(before, model.layer.weight)
    assert set(model.state_dict()) == {"layer.weight", "layer.bias"}


@oracle.parity
def test_errors_are_lightnings():
    lightning = oracle.lightning()
    from lightning.pytorch.utilities.compile import from_compiled as their_from
    from lightning.pytorch.utilities.compile import to_uncompiled as their_to

    cases = [
        (lambda base: _module(base), "from", ValueError),  # not compiled
        (lambda base: torch.compile(nn.Linear(2, 2), backend="eager"), "from", ValueError),  # not a LightningModule
        (lambda base: torch.compile(nn.Linear(2, 2), backend="eager"), "to", TypeError),
        (lambda base: _module(base), "to", ValueError),  # a LightningModule that was never compiled
        (lambda base: nn.Linear(2, 2), "to", ValueError),
    ]
    for make, which, error in cases:
        for base, functions in ((fulmen.LightningModule, (from_compiled, to_uncompiled)),
                                (lightning.LightningModule, (their_from, their_to))):  # fmt: skip
            function = functions[0] if which == "from" else functions[1]
            with pytest.raises(error):
                function(make(base))
