"""``ServableModuleValidator``: when training starts, serve the model over HTTP and check one request.

The server (FastAPI under uvicorn) runs on a copy of the model in a background thread of the training
process, on ``host:port``; it answers ``GET /ping`` and ``POST /serve``, and is stopped as soon as the example
request has been answered, so training goes on with the port free again.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

import torch

from fulmen.core.hooks import Callback
from fulmen.serve.servable_module import ServableModule
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import require
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

log = logging.getLogger(__name__)


class ServableModuleValidator(Callback):
    """Checks, when training starts, that the model (a :class:`ServableModule`) can be served: it serves a copy
    of the model in eval mode, sends ``configure_payload()`` to it and compares the answer with
    ``configure_response()``. The response is kept in ``resp`` (a ``requests.Response``).

    Args:
        optimization: how the served model is compiled first; only ``None`` (as it is) is supported.
        server: the server library; only ``"fastapi"`` is supported.
        host: the address the server listens on.
        port: its port (it must be free).
        timeout: seconds to wait for the server to answer ``/ping``.
        exit_on_failure: raise when the request does not succeed (else only ``successful`` is False).
    """

    def __init__(
        self,
        optimization: Literal["trace", "script", "onnx", "tensorrt"] | None = None,
        server: Literal["fastapi", "ml_server", "torchserve", "sagemaker"] = "fastapi",
        host: str = "127.0.0.1",
        port: int = 8080,
        timeout: int = 20,
        exit_on_failure: bool = True,
    ) -> None:
        super().__init__()
        for package in ("fastapi", "uvicorn", "requests"):
            require(package, "serve", "ServableModuleValidator")
        if optimization is not None:
            raise NotImplementedError(
                f"ServableModuleValidator(optimization={optimization!r}): only optimization=None (the model as it "
                "is) is supported. Export a traced, scripted or ONNX model yourself to serve it that way."
            )
        if server != "fastapi":
            raise NotImplementedError(
                f"ServableModuleValidator(server={server!r}): only server='fastapi' is supported."
            )
        self.optimization = optimization
        self.host = host
        self.port = port
        self.server = server
        self.timeout = timeout
        self.exit_on_failure = exit_on_failure
        self.resp: Any = None  # the requests.Response of the example request

    @rank_zero_only
    def on_train_start(self, trainer: Trainer, servable_module: LightningModule) -> None:
        self._check_servable(trainer, servable_module)
        import requests

        served = _detached_copy(servable_module, trainer)
        with _serving(served, self.host, self.port, self.timeout):
            payload = servable_module.configure_payload()  # type: ignore[operator]
            if not isinstance(payload, dict) or "body" not in payload:
                raise MisconfigurationException(
                    f"configure_payload() returned {payload!r}: the request must be a dict with a \"body\" field, "
                    'e.g. {"body": {"x": [1.0, 2.0]}}.'
                )
            self.resp = requests.post(f"http://{self.host}:{self.port}/serve", json=payload, timeout=self.timeout)
        if self.successful and is_overridden("configure_response", servable_module, ServableModule):
            expected, got = servable_module.configure_response(), self.resp.json()  # type: ignore[operator]
            if got != expected:
                raise MisconfigurationException(
                    f"The served model answered {got!r} where configure_response() expects {expected!r}."
                )
        if self.exit_on_failure and not self.successful:
            raise MisconfigurationException(
                f"The model isn't servable: POST /serve answered {self.resp.status_code}: {self.resp.text[:500]}. "
                "Check serve_step and configure_serialization (the server's traceback is logged above)."
            )
        if self.successful:
            log.info(f"Your model is servable and the received payload was {self.resp.json()}.")

    def _check_servable(self, trainer: Trainer, servable_module: Any) -> None:
        if trainer.strategy.shards_the_model:
            raise MisconfigurationException(
                f"ServableModuleValidator does not support the {type(trainer.strategy).__qualname__} strategy "
                "(the model is sharded across processes). Check serving with a single-device or DDP run."
            )
        if not isinstance(servable_module, ServableModule):
            raise TypeError(
                f"The provided model should be subclass of {ServableModule.__qualname__}: "
                f"{type(servable_module).__qualname__} is not. Derive it from both: "
                f"`class Served({type(servable_module).__name__}, ServableModule)`."
            )
        for hook in ("configure_payload", "configure_serialization", "serve_step"):
            if not is_overridden(hook, servable_module, ServableModule):
                raise NotImplementedError(f"The `{hook}` method needs to be overridden to serve the model.")

    @property
    def successful(self) -> bool | None:
        """Whether the example request succeeded (None before it was sent)."""
        return None if self.resp is None else self.resp.status_code == 200

    def state_dict(self) -> dict[str, Any]:
        return {"successful": self.successful, "optimization": self.optimization, "server": self.server}


def _detached_copy(module: Any, trainer: Trainer) -> Any:
    """A copy of ``module`` in eval mode without the trainer (which holds loaders, optimizers, processes)."""
    module.trainer = None
    try:
        served = copy.deepcopy(module)
    finally:
        module.trainer = trainer
    return served.eval()


def _build_app(module: Any) -> Any:
    """The FastAPI app: ``GET /ping`` answers true, ``POST /serve`` runs one request through the model."""
    from fastapi import Body, FastAPI

    app = FastAPI()
    deserializers, serializers = module.configure_serialization()

    @app.get("/ping")
    def ping() -> bool:
        return True

    @app.post("/serve")
    def serve(payload: dict = Body(...)) -> dict[str, Any]:
        body = dict(payload["body"])
        for name, deserialize in deserializers.items():
            body[name] = deserialize(body[name])
        with torch.no_grad():
            output = module.serve_step(**body)
        if not isinstance(output, dict):
            raise TypeError(f"serve_step must return a dict of outputs by name, got {type(output).__name__}.")
        for name, serialize in serializers.items():
            output[name] = serialize(output[name])
        return output

    return app


@contextlib.contextmanager
def _serving(module: Any, host: str, port: int, timeout: float) -> Any:
    """Serve ``module`` on ``host:port`` while the block runs; stop the server (and wait for it) after it."""
    import requests
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(_build_app(module), host=host, port=port, log_level="error"))

    def run() -> None:
        with contextlib.suppress(SystemExit):  # uvicorn exits when it cannot bind: seen below as a dead thread
            server.run()

    thread = threading.Thread(target=run, name="ServableModuleValidator-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            if not thread.is_alive():  # uvicorn gave up: the address is taken, or not one of this machine's
                raise RuntimeError(
                    f"The server could not start on {host}:{port} (is the port in use?). Pass a free port: "
                    "ServableModuleValidator(port=...)."
                )
            with contextlib.suppress(requests.exceptions.ConnectionError, requests.exceptions.Timeout):
                if server.started and requests.get(f"http://{host}:{port}/ping", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"The server didn't start within {timeout} seconds on {host}:{port}.")
            time.sleep(0.05)
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=max(float(timeout), 5.0))


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "DeepSpeedStrategy": "fulmen.strategies.deepspeed.DeepSpeedStrategy",
    "FSDPStrategy": "fulmen.strategies.fsdp.FSDPStrategy",
})  # fmt: skip
