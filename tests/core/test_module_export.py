"""to_onnx (run back with onnxruntime), to_torchscript (script and trace, saved and loaded), all_gather."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel


class Net(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.example_input_array = torch.randn(4, 32)


@pytest.mark.slow
def test_to_onnx_runs_in_onnxruntime_with_the_same_outputs(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="the test extras install onnxruntime")
    model = Net()
    model.train()
    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to_onnx(path, dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    assert model.training, "the module's mode is put back"
    session = ort.InferenceSession(str(path))
    x = torch.randn(7, 32)  # another batch size: the exported batch dimension is dynamic
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_to_onnx_needs_an_input(tmp_path):
    model = BoringModel()
    with pytest.raises(ValueError, match="example_input_array"):
        model.to_onnx(tmp_path / "x.onnx")


@pytest.mark.parametrize("method", ["script", "trace"])
def test_to_torchscript_saves_a_module_that_loads_and_matches(tmp_path, method):
    model = Net()
    path = tmp_path / f"{method}.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates TorchScript; the method stays for 1.x/2.x users
        scripted = model.to_torchscript(path, method=method)
        loaded = torch.jit.load(str(path))
    x = torch.randn(5, 32)
    assert torch.allclose(loaded(x), model(x)) and torch.allclose(scripted(x), model(x))
    assert model.training


def test_a_module_attached_to_a_trainer_scripts(tmp_path):
    """Properties that read the trainer (device_mesh, current_epoch ...) are left out of TorchScript."""
    model = Net()
    Trainer(fast_dev_run=1, default_root_dir=tmp_path, enable_progress_bar=False).fit(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(model)
    x = torch.randn(3, 32)
    assert torch.allclose(scripted(x), model(x))


def test_to_torchscript_errors():
    with pytest.raises(ValueError, match="method='onnx'"):
        BoringModel().to_torchscript(method="onnx")
    with pytest.raises(ValueError, match="example_inputs"):
        BoringModel().to_torchscript(method="trace")


def test_all_gather_on_one_process_returns_the_values():
    model = BoringModel()
    with pytest.raises(RuntimeError, match="needs a Trainer"):
        model.all_gather(torch.ones(2))
    model.trainer = Trainer(logger=False, enable_progress_bar=False, max_epochs=1)
    out = model.all_gather({"a": 1.5, "b": [torch.ones(2)], "c": (3,)})
    assert out["a"].item() == 1.5 and torch.equal(out["b"][0], torch.ones(2)) and out["c"][0].item() == 3


def _tensorrt_refusal(module_class):
    with pytest.raises(Exception) as err:  # each framework's own module: compared by class name and message
        module_class().to_tensorrt(input_sample=torch.randn(1, 32))
    return type(err.value).__name__, str(err.value)


@pytest.mark.parity
@pytest.mark.skipif(__import__("importlib").util.find_spec("torch_tensorrt") is not None,
                    reason="torch_tensorrt is installed")  # fmt: skip
def test_to_tensorrt_without_torch_tensorrt_refuses_as_lightning():
    from tests.parity import oracle

    lightning_boring = oracle.lightning("lightning.pytorch.demos.boring_classes").BoringModel
    ours = _tensorrt_refusal(BoringModel)
    assert ours == ("ModuleNotFoundError", "`BoringModel.to_tensorrt` requires `torch_tensorrt` to be installed. ")
    assert ours == _tensorrt_refusal(lightning_boring)


@pytest.mark.parity
def test_to_torchscript_is_deprecated_in_lightnings_words():
    from tests.parity.recorded import boring_model, both

    ours, theirs = both(lambda pl: boring_model(pl)().to_torchscript(), r"to_torchscript")
    assert ours == theirs and ours.error is None
    assert [category for category, _ in ours.warnings] == ["LightningDeprecationWarning"]
