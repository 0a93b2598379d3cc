"""``ServableModule``: what a model implements so that it can be served over HTTP."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


class ServableModule(ABC, torch.nn.Module):
    """Mix into a ``LightningModule`` (``class Served(MyModel, ServableModule)``) and implement:

    - ``configure_payload()``: an example request, ``{"body": {name: value, ...}}`` (plain JSON values);
    - ``configure_serialization()``: ``(deserializers, serializers)``, two dicts of functions: each request
      value named in the first is turned into a tensor by its function before ``serve_step``, and each output
      named in the second back into JSON values after it;
    - ``serve_step(**inputs)``: the outputs for one request, as a dict of tensors (run under ``torch.no_grad``);
    - ``configure_response()``: the response the example request must get (compared as JSON).

    ``ServableModuleValidator`` serves the model this way and checks the example when training starts.
    """

    @abstractmethod
    def configure_payload(self) -> dict[str, Any]:
        """An example request: ``{"body": {input name: JSON value}}``."""

    @abstractmethod
    def configure_serialization(self) -> tuple[dict[str, Callable], dict[str, Callable]]:
        """``(deserializers, serializers)``: per input name, a function from the request's JSON value to what
        ``serve_step`` takes; per output name, a function from ``serve_step``'s tensor to a JSON value."""

    @abstractmethod
    def serve_step(self, *args: Tensor, **kwargs: Tensor) -> dict[str, Tensor]:
        """The outputs for one request's deserialized inputs, by name."""

    @abstractmethod
    def configure_response(self) -> dict[str, Any]:
        """The JSON response ``configure_payload()``'s request must get."""
