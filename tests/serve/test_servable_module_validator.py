"""ServableModuleValidator serves the model over HTTP (FastAPI on 127.0.0.1) when training starts, checks the
example request's answer, and stops the server before training goes on."""

from __future__ import annotations

import inspect
import socket
import threading

import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extras install fastapi")
pytest.importorskip("uvicorn", reason="the serve extras install uvicorn")
pytest.importorskip("requests", reason="the serve extras install requests")

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from fulmen.serve import ServableModule, ServableModuleValidator
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle

# each test starts a web server (the first also imports FastAPI and uvicorn): seconds, not milliseconds
pytestmark = pytest.mark.slow

QUIET = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
             enable_model_summary=False, enable_checkpointing=False)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_is_gone(port: int) -> bool:
    """No server thread left, and nothing listening on the port (a connection is refused)."""
    if any(t.name == "ServableModuleValidator-server" for t in threading.enumerate()):
        return False
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class Served(BoringModel, ServableModule):
    def __init__(self, answer=None):
        super().__init__()
        self.answer = answer
        self.modes_seen: list[bool] = []

    def configure_payload(self):
        return {"body": {"x": [float(i) for i in range(32)]}}

    def configure_serialization(self):
        return {"x": lambda x: torch.tensor(x, dtype=torch.float)[None]}, {"output": lambda t: t.tolist()}

    def serve_step(self, x):
        self.modes_seen.append(self.training)
        return {"output": self(x)}

    def configure_response(self):
        if self.answer is None:  # the true answer of this model for the example
            with torch.no_grad():
                return {"output": self(torch.arange(32, dtype=torch.float)[None]).tolist()}
        return self.answer


def test_the_model_is_served_checked_and_the_server_stopped():
    port = _free_port()
    validator = ServableModuleValidator(port=port, timeout=20)
    model = Served()
    trainer = Trainer(callbacks=[validator], **QUIET)
    trainer.fit(model)
    assert validator.successful is True
    assert len(validator.resp.json()["output"][0]) == 2  # the layer's two outputs for the example
    assert validator.state_dict() == {"successful": True, "optimization": None, "server": "fastapi"}
    assert model.modes_seen == [] and model.training  # a copy was served (in eval mode), not the model
    assert trainer.global_step == 2 and _server_is_gone(port)  # training went on; the server is gone


def test_a_wrong_answer_and_a_failing_step_stop_the_run():
    with pytest.raises(MisconfigurationException, match="configure_response"):
        Trainer(callbacks=[ServableModuleValidator(port=_free_port())], **QUIET).fit(Served(answer={"output": [0]}))

    class Broken(Served):
        def serve_step(self, x):
            return self(x)  # not a dict

    validator = ServableModuleValidator(port=_free_port(), exit_on_failure=False)
    Trainer(callbacks=[validator], **QUIET).fit(Broken())
    assert validator.successful is False and validator.resp.status_code == 500
    with pytest.raises(MisconfigurationException, match="isn't servable"):
        Trainer(callbacks=[ServableModuleValidator(port=_free_port())], **QUIET).fit(Broken())


def test_what_is_refused():
    with pytest.raises(TypeError, match="subclass of ServableModule"):
        Trainer(callbacks=[ServableModuleValidator(port=_free_port())], **QUIET).fit(BoringModel())

    class NoPayload(Served):
        def configure_payload(self):
            return {"x": [1.0]}

    with pytest.raises(MisconfigurationException, match='"body" field'):
        Trainer(callbacks=[ServableModuleValidator(port=_free_port())], **QUIET).fit(NoPayload())
    with pytest.raises(NotImplementedError, match="optimization='onnx'"):
        ServableModuleValidator(optimization="onnx")
    with pytest.raises(NotImplementedError, match="server='torchserve'"):
        ServableModuleValidator(server="torchserve")


def test_a_taken_port_is_said():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}"):
            Trainer(callbacks=[ServableModuleValidator(port=port, timeout=5)], **QUIET).fit(Served())


@oracle.parity
def test_signatures_and_the_servable_api_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.serve import ServableModule as LServable
    from lightning.pytorch.serve import ServableModuleValidator as LValidator

    def shape(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert shape(ServableModuleValidator) == shape(LValidator)
    assert ServableModule.__abstractmethods__ == LServable.__abstractmethods__
    assert issubclass(ServableModule, torch.nn.Module) and issubclass(LServable, torch.nn.Module)
    assert {"successful", "optimization", "server"} == set(LValidator(port=_free_port()).state_dict())
    for name in ("configure_payload", "configure_serialization", "serve_step", "configure_response"):
        assert list(inspect.signature(getattr(ServableModule, name)).parameters) == list(
            inspect.signature(getattr(LServable, name)).parameters
        )


@pytest.mark.parametrize(
    ("strategy", "refused"),
    [("SingleDeviceStrategy", False), ("DDPStrategy", False), ("FSDPStrategy", True),
     ("ModelParallelStrategy", True), ("DeepSpeedStrategy", True)],
)  # fmt: skip
def test_a_model_split_over_processes_is_not_served(strategy, refused):
    """The check asks the strategy (``shards_the_model``); no one process of FSDP, model parallelism or DeepSpeed
    holds the whole model to serve."""
    from types import SimpleNamespace

    import fulmen.strategies as strategies

    cls = getattr(strategies, strategy)
    assert cls.shards_the_model is refused
    trainer = SimpleNamespace(strategy=SimpleNamespace(shards_the_model=cls.shards_the_model))
    validator = ServableModuleValidator(port=_free_port())
    if refused:
        with pytest.raises(MisconfigurationException, match="sharded across processes"):
            validator._check_servable(trainer, Served())
    else:
        validator._check_servable(trainer, Served())
