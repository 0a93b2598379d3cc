"""FSDPStrategy / ModelParallelStrategy without processes: Lightning's arguments mapped, accepted or refused
with a clear message; the strategy names; Trainer.init_module; the sharded-checkpoint helpers (atomic
replacement repaired after a kill, safe reading, consolidation, optimizer states by position and by name)."""

from __future__ import annotations

import os
import pickle
from datetime import timedelta

import pytest
import torch
from torch import nn

import fulmen
from fulmen.checkpoint import files as checkpoint_io
from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.strategies import FSDPStrategy, ModelParallelStrategy
from fulmen.strategies.fsdp import ARGUMENTS
from fulmen.utilities.exceptions import MisconfigurationException

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def test_strategy_names_select_fsdp_without_starting_anything():
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="fsdp")
    assert type(trainer.strategy) is FSDPStrategy
    assert trainer.strategy.world_size == 2 and trainer.strategy.state_dict_type == "full"
    assert fulmen.Trainer(accelerator="cpu", devices=2, strategy="fsdp_cpu_offload").strategy.cpu_offload
    assert fulmen.Trainer(accelerator="cpu", devices=2, strategy=ModelParallelStrategy()).strategy.world_size == 2


def test_lightning_arguments_are_kept():
    strategy = FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", state_dict_type="sharded", cpu_offload=True,
                            auto_wrap_policy={nn.Linear}, activation_checkpointing_policy={nn.Linear},
                            process_group_backend="gloo", timeout=timedelta(seconds=60))  # fmt: skip
    assert strategy.sharding_strategy == "SHARD_GRAD_OP" and strategy.state_dict_type == "sharded"
    assert strategy.cpu_offload and strategy.auto_wrap_policy == {nn.Linear}
    assert strategy.activation_checkpointing_policy == (nn.Linear,)
    assert strategy.process_group_backend == "gloo" and strategy.timeout == timedelta(seconds=60)
    assert strategy.restore_checkpoint_after_setup
    # torch's enum, and the older CPUOffload
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy

    assert FSDPStrategy(sharding_strategy=ShardingStrategy.NO_SHARD).sharding_strategy == "NO_SHARD"
    assert FSDPStrategy(cpu_offload=CPUOffload(offload_params=True)).cpu_offload
    # a (replicate, shard) mesh means hybrid sharding
    assert FSDPStrategy(device_mesh=(1, 2)).sharding_strategy == "HYBRID_SHARD"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sharding_strategy": "FULLY"}, r"sharding_strategy='FULLY'\) is not a sharding strategy"),
        ({"state_dict_type": "local"}, r"state_dict_type='local'\) is not a checkpoint format"),
        ({"param_init_fn": lambda m: m}, r"param_init_fn=\.\.\.\) is not supported on FSDP2: create the model"),
        ({"process_group": object()}, r"pass `device_mesh=`"),
        ({"flatten_parameters": True}, r"unknown keyword flatten_parameters=True"),
        ({"cpu_offload": "yes"}, r"cpu_offload='yes'"),
        ({"device_mesh": (2,)}, r"device_mesh=\(2,\)"),
        ({"activation_checkpointing": [nn.Linear], "activation_checkpointing_policy": {nn.Linear}}, r"only"),
        ({"activation_checkpointing_policy": {int}}, r"every entry must be an nn.Module class"),
    ],
)
def test_bad_arguments_are_refused_clearly(kwargs, match):
    with pytest.raises(MisconfigurationException, match=match):
        FSDPStrategy(**kwargs)


def test_arguments_without_effect_on_fsdp2_warn_once_each():
    with pytest.warns(UserWarning, match="use_orig_params=...\\) has no effect: FSDP2 always trains the original"):
        FSDPStrategy(use_orig_params=True)
    assert set(ARGUMENTS["accepted without effect"]) >= {"use_orig_params", "limit_all_gathers", "forward_prefetch"}
    assert "param_init_fn" in ARGUMENTS["refused"] and "auto_wrap_policy" in ARGUMENTS["supported"]


def test_torch_fsdp1_mixed_precision_is_mapped_and_buffer_casting_refused():
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy

    strategy = FSDPStrategy(mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    assert strategy._mixed_precision_policy() == MixedPrecisionPolicy(torch.bfloat16, torch.float32)
    with pytest.raises(MisconfigurationException, match="FSDP2 does not cast buffers"):
        FSDPStrategy(mixed_precision=MixedPrecision(param_dtype=torch.float32, buffer_dtype=torch.float16))._mixed_precision_policy()
    # precision="bf16-mixed" alone: float32 shards under autocast, float32 reduction
    bf16 = fulmen.Trainer(accelerator="cpu", devices=2, strategy="fsdp", precision="bf16-mixed").strategy
    assert bf16._mixed_precision_policy() == MixedPrecisionPolicy(reduce_dtype=torch.float32)


@pytest.mark.parametrize(("dp", "tp"), [(0, 2), ("two", 1), (True, 2)])
def test_model_parallel_sizes_are_checked(dp, tp):
    with pytest.raises(MisconfigurationException, match="must be a positive int or 'auto'"):
        ModelParallelStrategy(data_parallel_size=dp, tensor_parallel_size=tp)


def test_model_parallel_shares_data_per_data_parallel_rank():
    strategy = fulmen.Trainer(accelerator="cpu", devices=4, strategy=ModelParallelStrategy(2, 2)).strategy
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}
    assert strategy.state_dict_type == "sharded"
    assert ModelParallelStrategy(save_distributed_checkpoint=False).state_dict_type == "full"


def test_init_module_creates_on_the_device_in_the_precision_dtype():
    trainer = fulmen.Trainer(accelerator="cpu", precision="64-true")
    with trainer.init_module():
        layer = nn.Linear(3, 2)
    assert layer.weight.dtype == torch.float64 and layer.weight.device.type == "cpu"


def test_init_module_empty_init_skips_initialisation():
    trainer = fulmen.Trainer(accelerator="cpu")
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    with trainer.init_module(empty_init=True):
        nn.Linear(300, 200)
    assert torch.equal(torch.random.get_rng_state(), state)  # no init function drew random numbers
    with trainer.init_module(empty_init=False):
        nn.Linear(3, 2)
    assert not torch.equal(torch.random.get_rng_state(), state)


def test_init_module_under_fsdp_creates_on_the_meta_device():
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="fsdp")
    with trainer.init_module(empty_init=True):
        layer = nn.Linear(3000, 3000)  # no memory at all
    assert layer.weight.is_meta


# -- sharded checkpoints (written here by one process, no process group) ---------------------------------------
def _write_sharded(path, meta, tensors):
    import torch.distributed.checkpoint as dcp

    dcp.save(tensors, checkpoint_id=path, no_dist=True)
    checkpoint_io.save(meta, os.path.join(path, distributed_checkpoint.META_FILE))


def _checkpoint_shards(tmp_path):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    positional = optimizer.state_dict()
    named = distributed_checkpoint.optimizer_state_by_name(positional, ["weight", "bias"])
    path = tmp_path / "epoch=0-step=1.ckpt"
    meta = {"epoch": 0, "global_step": 1, "sharded_optimizers": 1, "pytorch-lightning_version": "2.6.6"}
    _write_sharded(path, meta, {"model": model.state_dict(), "optimizer_0": named})
    return path, model, positional


def test_optimizer_states_by_position_and_by_name_round_trip():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    optimizer = torch.optim.SGD([{"params": model[1].parameters()}, {"params": model[0].parameters(), "lr": 0.5}],
                                lr=0.1, momentum=0.9)  # fmt: skip
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    positional = optimizer.state_dict()
    names = ["1.weight", "1.bias", "0.weight", "0.bias"]
    named = distributed_checkpoint.optimizer_state_by_name(positional, names)
    assert named["param_groups"][1]["params"] == ["0.weight", "0.bias"] and set(named["state"]) == set(names)
    back = distributed_checkpoint.optimizer_state_by_position(named)
    assert back["param_groups"] == positional["param_groups"]
    for index, state in positional["state"].items():
        assert torch.equal(back["state"][index]["momentum_buffer"], state["momentum_buffer"])


def test_consolidate_writes_one_ordinary_checkpoint(tmp_path, capsys):
    path, model, positional = _checkpoint_shards(tmp_path)
    fulmen.cli.main(["consolidate", str(path), str(tmp_path / "out.ckpt")])
    assert "2 tensors of the model, 1 optimizer state(s)" in capsys.readouterr().out
    checkpoint = torch.load(tmp_path / "out.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 1 and "sharded_optimizers" not in checkpoint
    assert all(torch.equal(checkpoint["state_dict"][k], v) for k, v in model.state_dict().items())
    assert checkpoint["optimizer_states"][0]["param_groups"] == positional["param_groups"]
    assert torch.equal(checkpoint["optimizer_states"][0]["state"][0]["exp_avg"], positional["state"][0]["exp_avg"])
    with pytest.raises(SystemExit, match="usage: fulmen consolidate"):
        fulmen.cli.main(["consolidate", str(path)])
    with pytest.raises(FileNotFoundError, match="is not a sharded checkpoint"):
        distributed_checkpoint.consolidate(tmp_path / "out.ckpt", tmp_path / "again.ckpt")


def test_a_plain_process_reads_a_checkpoint_shards_whole(tmp_path):
    path, model, _ = _checkpoint_shards(tmp_path)
    checkpoint = fulmen.strategies.SingleDeviceStrategy().load_checkpoint(str(path))
    assert all(torch.equal(checkpoint["state_dict"][k], v) for k, v in model.state_dict().items())


class Normalizer:
    """An object among a model's hyperparameters (what save_hyperparameters records, pickled as Lightning does)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale


def test_a_checkpoint_shards_whose_hyperparameters_hold_objects_loads_when_trusted(tmp_path, capsys):
    """Its training state is read as a file checkpoint is: refused by default, naming the class; loaded with
    weights_only=False (load_consolidated, a strategy's load_checkpoint, `fulmen consolidate --no-weights-only`)."""
    model = nn.Linear(3, 2)
    path = tmp_path / "objects.ckpt"
    meta = {"global_step": 1, "hyper_parameters": {"norm": Normalizer(3.0)}, "pytorch-lightning_version": "2.6.6"}
    _write_sharded(path, meta, {"model": model.state_dict()})
    with pytest.raises(pickle.UnpicklingError, match=rf"{__name__}\.Normalizer"):
        distributed_checkpoint.load_consolidated(path)
    with pytest.raises(pickle.UnpicklingError, match="Normalizer"):
        fulmen.strategies.SingleDeviceStrategy().load_checkpoint(str(path))
    assert distributed_checkpoint.load_consolidated(path, weights_only=False)["hyper_parameters"]["norm"].scale == 3.0
    checkpoint = fulmen.strategies.SingleDeviceStrategy().load_checkpoint(str(path), weights_only=False)
    assert checkpoint["hyper_parameters"]["norm"].scale == 3.0
    with pytest.raises(pickle.UnpicklingError, match="Normalizer"):
        fulmen.cli.main(["consolidate", str(path), str(tmp_path / "out.ckpt")])
    fulmen.cli.main(["consolidate", str(path), str(tmp_path / "out.ckpt"), "--no-weights-only"])
    assert "2 tensors of the model" in capsys.readouterr().out
    assert torch.load(tmp_path / "out.ckpt", weights_only=False)["hyper_parameters"]["norm"].scale == 3.0


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo unsafe",))


def test_reading_a_checkpoint_shards_runs_no_code(tmp_path):
    """A pickled entry that would call a function is refused (weights_only unpickling), as for files."""
    path = tmp_path / "evil.ckpt"
    _write_sharded(path, {"global_step": 0}, {"model": {"w": torch.zeros(2)}, "extra": _Payload()})
    with pytest.raises(pickle.UnpicklingError):
        distributed_checkpoint.read_full(path)


def test_a_sharded_directory_without_fulmens_meta_is_named(tmp_path):
    import torch.distributed.checkpoint as dcp

    dcp.save({"model": {"w": torch.zeros(2)}}, checkpoint_id=tmp_path / "bare", no_dist=True)
    with pytest.raises(checkpoint_io.CorruptCheckpointError, match="without fulmen's meta.pt"):
        distributed_checkpoint.load_consolidated(tmp_path / "bare")


def test_a_sharded_save_to_a_remote_url_is_refused_not_written_locally(tmp_path, monkeypatch):
    """A remote URL as a local path would be a directory named ``gs:`` here (the run's checkpoints silently not
    where asked): the sharded save refuses it, before anything is written."""
    monkeypatch.chdir(tmp_path)
    strategy = FSDPStrategy(state_dict_type="sharded")
    with pytest.raises(MisconfigurationException, match=r"not to 'gs://bucket/run/last.ckpt'.*state_dict_type='full'"):
        strategy.save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, "gs://bucket/run/last.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_a_replacement_cut_between_its_renames_is_repaired(tmp_path):
    """A kill between moving the old directory aside and moving the new one in: the old comes back under its
    name when the directory is next listed for `last`, and an unfinished `.partial` is never picked."""
    path, _, _ = _checkpoint_shards(tmp_path)
    last = tmp_path / "last.ckpt"
    os.rename(path, tmp_path / ".last.ckpt.replaced")
    os.makedirs(tmp_path / ".last.ckpt.partial")  # the new one, never finished
    callback = fulmen.callbacks.ModelCheckpoint(dirpath=tmp_path)
    assert callback.find_last_checkpoints(None) == [str(last)]
    assert distributed_checkpoint.is_sharded_checkpoint(last)
    assert not (tmp_path / ".last.ckpt.replaced").exists()


def test_materialising_initialises_a_meta_model_and_refuses_a_half_real_one():
    from fulmen.strategies.fsdp import _materialise

    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    _materialise(model, torch.device("cpu"))
    assert not model[0].weight.is_meta and torch.equal(model[1].weight, torch.ones(3))  # reset_parameters ran
    half = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2, device="meta"))
    with pytest.raises(MisconfigurationException, match="partly on the meta device"):
        _materialise(half, torch.device("cpu"))



LAYER_SYNC_SCRIPT = """
import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins.layer_sync import LayerSync

seen = []


class Recording(LayerSync):
    def apply(self, model):
        seen.append(("apply", any(type(p).__name__ == "DTensor" for p in model.parameters())))
        return model

    def revert(self, model):
        return model


if __name__ == "__main__":
    trainer = fulmen.Trainer(accelerator="cpu", devices=1, strategy="fsdp", plugins=[Recording()], max_steps=1,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False)
    trainer.fit(BoringModel())
    print(type(trainer.strategy).__name__, seen)
"""


@pytest.mark.slow
def test_a_layer_sync_plugin_is_applied_before_sharding(tmp_path):
    """``sync_batchnorm`` / ``plugins=[LayerSync]`` under FSDP, as under DDP: the layers are swapped before the
    module is sharded (SyncBatchNorm itself runs on GPUs only; a recording plugin shows the call on a CPU). A
    script: the one FSDP process is started as a user starts it."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "train.py"
    script.write_text(LAYER_SYNC_SCRIPT)
    launch = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in launch and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "FSDPStrategy [('apply', False)]"  # once, before sharding
