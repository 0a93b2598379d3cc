"""The model summary's table is Lightning's, character for character: layer rows at each ``max_depth``, shapes and
FLOPs from ``example_input_array``, the 'other params' row, the precision used for the size estimate, the
DeepSpeed ZeRO-3 variant; and the summary the ``ModelSummary`` callback prints during fit."""

from __future__ import annotations

import logging
import random
import warnings

import pytest
import torch
from torch import nn

import fulmen
from fulmen.utilities import model_summary as fulmen_summary
from tests.parity import oracle


def _module(base: type, *, example: str | None = "tensor", extra_parameter: bool = False, lazy: bool = False):
    """The same module on either framework's LightningModule."""

    class Model(base):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Sequential(nn.Linear(64, 64), nn.ReLU()))
            self.head = nn.Linear(64, 3)
            self.frozen = nn.Linear(3, 3)  # frozen and in eval mode: counted as non-trainable / eval
            self.frozen.requires_grad_(False)
            self.frozen.eval()
            self.unused = nn.Conv2d(3, 4, 3)  # never called: shapes '?'
            self.lazy = nn.LazyLinear(2) if lazy else nn.Identity()
            if extra_parameter:  # a parameter of no layer: the 'other params' row
                self.scale = nn.Parameter(torch.ones(10))
            if example == "tensor":
                self.example_input_array = torch.zeros(5, 32)
            elif example == "tuple":
                self.example_input_array = (torch.zeros(5, 32), torch.zeros(5, 3))
            elif example == "dict":
                self.example_input_array = {"x": torch.zeros(5, 32), "offset": torch.zeros(5, 3)}

        def forward(self, x, offset=None):
            out = self.frozen(self.head(self.net(x)))
            return self.lazy(out if offset is None else out + offset)

    return Model()


def _both(depth: int, **options):
    lightning = oracle.lightning()
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = fulmen_summary.summarize(_module(fulmen.LightningModule, **options), max_depth=depth)
        theirs = lightning_summarize(_module(lightning.LightningModule, **options), max_depth=depth)
    return ours, theirs


@oracle.parity
@pytest.mark.filterwarnings("ignore:The total number of parameters detected may be inaccurate")
@pytest.mark.parametrize("depth", [-1, 0, 1, 2, 3])
@pytest.mark.parametrize(
    "options",
    [{}, {"example": None}, {"extra_parameter": True}, {"example": "tuple"}, {"example": "dict", "lazy": True},
     {"example": None, "lazy": True, "extra_parameter": True}],
)  # fmt: skip
def test_summary_table_text_is_lightnings(depth, options):
    ours, theirs = _both(depth, **options)
    assert str(ours) == str(theirs)
    assert repr(ours) == str(ours)
    assert ours.total_parameters == theirs.total_parameters
    assert ours.trainable_parameters == theirs.trainable_parameters
    assert ours.param_nums == theirs.param_nums and ours.layer_names == theirs.layer_names
    assert ours.in_sizes == theirs.in_sizes and ours.out_sizes == theirs.out_sizes
    assert ours.total_flops == theirs.total_flops and ours.total_training_modes == theirs.total_training_modes
    assert ours.get_summary_data() == theirs._get_summary_data()


@oracle.parity
def test_shapes_flops_and_modes_are_recorded_and_the_model_is_left_as_it_was():
    model = _module(fulmen.LightningModule)
    summary = fulmen_summary.summarize(model, max_depth=-1)
    rows = dict(zip(summary.layer_names, zip(summary.in_sizes, summary.out_sizes)))
    assert rows["net.0"] == ([5, 32], [5, 64]) and rows["head"] == ([5, 64], [5, 3]) and rows["unused"] == ("?", "?")
    assert summary.total_flops == 2 * 5 * (32 * 64 + 64 * 64 + 64 * 3 + 3 * 3)  # the four matmuls, no others
    # the example ran in eval mode; every module's own mode is back afterwards, and no hook is left behind
    assert model.training and model.net.training and not model.frozen.training
    assert all(not m._forward_hooks for m in model.modules())
    ours, theirs = _both(-1)
    assert ours.flop_counts == {name: dict(counts) for name, counts in theirs.flop_counts.items()}


@oracle.parity
@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-true", "16-true", "bf16-mixed"])
def test_the_size_estimate_uses_the_trainers_precision(precision):
    lightning = oracle.lightning()
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    results, total = [], 0
    frameworks = [(fulmen.LightningModule, fulmen.Trainer, fulmen_summary.summarize),
                  (lightning.LightningModule, lightning.Trainer, lightning_summarize)]  # fmt: skip
    for base, trainer_class, summarize in frameworks:
        model = _module(base, example=None)
        total = sum(p.numel() for p in model.parameters())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.trainer = trainer_class(precision=precision, accelerator="cpu", logger=False,
                                          enable_progress_bar=False, enable_checkpointing=False)  # fmt: skip
            caught.clear()
            text = str(summarize(model, max_depth=1))
        results.append((text, [str(w.message) for w in caught if "model summary" in str(w.message)]))
    assert results[0] == results[1]
    bits = {"64-true": 64, "bf16-true": 16, "16-true": 16}.get(precision, 32)
    assert f"{total * bits / 8 * 1e-6:<10.3f}Total estimated model params size (MB)" in results[0][0]
    assert bool(results[0][1]) == (precision == "bf16-mixed")  # a mixed precision warns that 32 bits are used


@oracle.parity
def test_human_readable_counts_and_sizes_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.utilities.model_summary import model_summary as theirs

    rng = random.Random(0)
    numbers = [0, 1, 9, 99, 100, 999, 1000, 1049, 1050, 9_999, 99_949, 99_950, 99_999, 100_000, 999_499, 999_500,
               999_999, 1_000_000, 2e6, 3e9, 4e14, 5e15, 123_456_789_012_345_678]  # fmt: skip
    numbers += [rng.randrange(10 ** rng.randrange(1, 18)) for _ in range(2000)]
    for number in numbers:
        assert fulmen_summary.get_human_readable_count(number) == theirs.get_human_readable_count(number), number
    for size in (0.0, 0.0004, 0.0005, 1.2345, 1234.5678, 1e9):
        assert fulmen_summary.get_formatted_model_size(size) == theirs.get_formatted_model_size(size)
    with pytest.raises(AssertionError, match="number=-1"):
        fulmen_summary.get_human_readable_count(-1)
    with pytest.raises(AssertionError):
        theirs.get_human_readable_count(-1)
    for batch in (torch.zeros(2, 3), [torch.zeros(1), (torch.zeros(2, 2), "x")], "text", None, {"a": torch.zeros(1)}):
        assert fulmen_summary.parse_batch_shape(batch) == theirs.parse_batch_shape(batch)


@oracle.parity
def test_layer_summary_and_bad_depth():
    oracle.lightning()
    from lightning.pytorch.utilities.model_summary import LayerSummary, ModelSummary

    layers = [cls(nn.Conv2d(3, 8, 3)) for cls in (fulmen_summary.LayerSummary, LayerSummary)]
    for layer in layers:
        layer._module(torch.rand(1, 3, 5, 5))
        layer._module(torch.rand(2, 3, 7, 7))  # a second call keeps the first shapes
    assert [(s.in_size, s.out_size, s.num_parameters, s.layer_type, s.training) for s in layers] == [
        ([1, 3, 5, 5], [1, 8, 3, 3], 224, "Conv2d", True)
    ] * 2
    for bad in (-2, 1.5, "1"):
        with pytest.raises(ValueError, match="`max_depth` can be -1, 0 or > 0"):
            fulmen_summary.ModelSummary(_module(fulmen.LightningModule), max_depth=bad)
        with pytest.raises(ValueError, match="`max_depth` can be -1, 0 or > 0"):
            ModelSummary(_module(oracle.lightning().LightningModule), max_depth=bad)


def test_a_plain_torch_module_can_be_summarized():
    """Any nn.Module (a logger's log_model_summary gets one): no trainer, no example input needed."""
    summary = fulmen_summary.summarize(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), max_depth=1)
    assert summary.layer_names == ["0", "1"] and summary.total_parameters == 30
    assert "30        Total params" in str(summary)


def _deepspeed_parameters(module: nn.Module, world_size: int) -> None:
    """What ZeRO-3 leaves on a process: each parameter knows its full size and this process's share."""
    for p in module.parameters():
        p.ds_numel = p.numel()
        share = -(-p.numel() // world_size)
        p.partition_numel = lambda share=share: share


@oracle.parity
@pytest.mark.parametrize("depth", [1, -1])
def test_deepspeed_summary_counts_full_and_per_device_sizes(depth):
    lightning = oracle.lightning()
    from lightning.pytorch.utilities.model_summary import DeepSpeedSummary
    from lightning.pytorch.utilities.model_summary.model_summary_deepspeed import deepspeed_param_size

    from fulmen.utilities.model_summary.model_summary_deepspeed import DeepSpeedSummary as OurSummary
    from fulmen.utilities.model_summary.model_summary_deepspeed import deepspeed_param_size as our_size

    summaries, models = [], []
    for base, cls in ((fulmen.LightningModule, OurSummary), (lightning.LightningModule, DeepSpeedSummary)):
        models.append(_module(base, extra_parameter=True))
        _deepspeed_parameters(models[-1], world_size=4)
        summaries.append(cls(models[-1], max_depth=depth))
    assert str(summaries[0]) == str(summaries[1])
    assert "Params per Device" in str(summaries[0])
    assert summaries[0].parameters_per_layer[0] == sum(-(-p.numel() // 4) for p in models[0].net.parameters())
    weight = nn.Linear(2, 2).weight
    with pytest.raises(AssertionError, match="ZeRO stage 3"):
        our_size(weight)
    with pytest.raises(AssertionError):
        deepspeed_param_size(weight)


@oracle.parity
def test_the_callback_prints_lightnings_table_during_fit(capsys, caplog):
    """During fit the example input goes through the batch-transfer hooks, as in Lightning."""
    lightning = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningBoringModel

    from fulmen.demos.boring_classes import BoringModel

    class Ours(BoringModel):
        def __init__(self):
            super().__init__()
            self.example_input_array = torch.zeros(4, 64)

        def on_before_batch_transfer(self, batch, dataloader_idx):  # the summary's forward sees its result
            return batch[..., :32]

    class Theirs(LightningBoringModel):
        def __init__(self):
            super().__init__()
            self.example_input_array = torch.zeros(4, 64)

        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch[..., :32]

    quiet = dict(max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    fulmen.Trainer(callbacks=[fulmen.callbacks.ModelSummary()], **quiet).fit(Ours())
    ours = capsys.readouterr().out
    with caplog.at_level(logging.INFO), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (with rich installed Lightning's default is RichModelSummary)
        lightning.Trainer(callbacks=[lightning.callbacks.ModelSummary()], **quiet).fit(Theirs())
    theirs = next(r.getMessage() for r in caplog.records if "Trainable params" in r.getMessage())
    assert theirs.strip() in ours
    assert "[4, 32]" in ours and "[4, 2]" in ours
