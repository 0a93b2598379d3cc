"""``LitLogger`` (lightning.ai: it constructs with Lightning's arguments and fails, naming what is missing,
when it is used), ``loggers.logger.merge_dicts``, ``loggers.utilities`` and ``NeptuneLogger``'s signature."""

from __future__ import annotations

import importlib.util
import os
import statistics
import time

import pytest
import torch

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from fulmen.loggers import LitLogger
from fulmen.loggers.logger import merge_dicts
from fulmen.loggers.utilities import _scan_checkpoints, _version
from tests.parity import oracle

litlogger_missing = pytest.mark.skipif(importlib.util.find_spec("litlogger") is not None, reason="litlogger is installed")


@oracle.parity
def test_litlogger_answers_where_its_files_go_as_lightnings(tmp_path):
    oracle.lightning()
    from lightning.pytorch.loggers import LitLogger as Theirs

    for kwargs in ({"root_dir": tmp_path, "name": "run"}, {"name": "run"}, {"root_dir": str(tmp_path), "name": "b"}):
        mine, theirs = LitLogger(**kwargs), Theirs(**kwargs)
        for attribute in ("name", "version", "root_dir", "log_dir", "save_dir", "sub_dir", "LOGGER_JOIN_CHAR"):
            assert getattr(mine, attribute) == getattr(theirs, attribute), attribute
    generated = LitLogger(tmp_path)  # Lightning needs litlogger's generator for this; here a time stamp
    assert generated.name and generated.log_dir == os.path.join(str(tmp_path), generated.name)


@litlogger_missing
def test_litlogger_fails_at_use_naming_the_package_and_the_alternatives(tmp_path):
    logger = LitLogger(tmp_path, name="run", teamspace="team", metadata={"k": "v"}, log_model=True)
    for use in (lambda: logger.experiment, lambda: logger.url, lambda: logger.log_metrics({"a": 1.0}, step=0),
                lambda: logger.log_hyperparams({"lr": 0.1}), lambda: logger.log_file("x"),
                lambda: logger.log_model(torch.nn.Linear(1, 1)), lambda: logger.after_save_checkpoint(None)):  # fmt: skip
        with pytest.raises(ModuleNotFoundError, match=r"litlogger.*CSVLogger"):
            use()
    logger.save()
    logger.finalize("success")  # nothing was started: nothing to close
    with pytest.warns(UserWarning, match="does not support `log_graph`"):
        logger.log_graph(torch.nn.Linear(1, 1))

    class Logs(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("loss", out["loss"])
            return out

    trainer = Trainer(logger=LitLogger(tmp_path, name="run"), max_steps=1, limit_val_batches=0, log_every_n_steps=1,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with pytest.raises(ModuleNotFoundError, match="pip install litlogger"):
        trainer.fit(Logs())


@oracle.parity
def test_merge_dicts_as_lightnings():
    oracle.lightning()
    from lightning.pytorch.loggers.logger import merge_dicts as theirs

    d1 = {"a": 1.7, "b": 2.0, "c": 1, "d": {"d1": 1, "d3": 3}}
    d2 = {"a": 1.1, "b": 2.2, "v": 1, "d": {"d1": 2, "d2": 3}}
    d3 = {"a": 1.1, "v": 2.3, "d": {"d3": 3, "d4": {"d5": 1}}}
    funcs = {"a": statistics.mean, "v": max, "d": {"d1": sum}}
    cases = [([d1, d2, d3], funcs, min), ([d1, d2, d3], None, statistics.mean), ([{"a": None}, {"a": 2}], None, max),
             ([{"a": True}, {"a": False}], None, statistics.mean), ([{"a": 1}, {"b": 2}], None, sum)]  # fmt: skip
    for dicts, agg, default in cases:
        assert merge_dicts(dicts, agg, default) == theirs(dicts, agg, default)
    assert merge_dicts([d1, d2, d3], funcs, min) == {"a": 1.3, "b": 2.0, "c": 1, "v": 2.3,
                                                     "d": {"d1": 3, "d2": 3, "d3": 3, "d4": {"d5": 1}}}  # fmt: skip
    assert merge_dicts([{"a": 1}, {"a": 2}]) == {"a": 1.5}  # the mean by default
    assert merge_dicts([]) == {} and merge_dicts([{"a": None}]) == {}  # Lightning raises on both


class _Callback:
    def __init__(self, folder, best_k=True):
        self.files = {}
        for name in ("a", "b", "c"):
            path = folder / f"{name}.ckpt"
            path.write_text(name)
            os.utime(path, (time.time(), time.time() + {"a": 0, "b": 1, "c": 2}[name]))
            self.files[name] = str(path)
        self.last_model_path, self.current_score = self.files["c"], torch.tensor(3.0)
        self.best_model_path, self.best_model_score = self.files["a"], torch.tensor(1.0)
        self.best_k_models = {self.files["a"]: torch.tensor(1.0), self.files["b"]: torch.tensor(2.0)} if best_k else {}


@oracle.parity
def test_scan_checkpoints_and_version_as_lightnings(tmp_path):
    oracle.lightning()
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.utilities import _scan_checkpoints as their_scan
    from lightning.pytorch.loggers.utilities import _version as their_version

    for best_k in (True, False):
        callback = _Callback(tmp_path, best_k)
        for logged in ({}, {callback.files["a"]: os.path.getmtime(callback.files["a"])}):
            assert _scan_checkpoints(callback, logged) == their_scan(callback, logged)
    tags = [tag for _, _, _, tag in _scan_checkpoints(_Callback(tmp_path), {})]
    assert tags == ["best_k", "best_k", "latest"]
    loggers = [CSVLogger(tmp_path, version=1), CSVLogger(tmp_path, version="x"), CSVLogger(tmp_path, version=1)]
    for chosen in (loggers[:1], loggers[:2], loggers):
        assert _version(chosen) == their_version(chosen) and _version(chosen, "-") == their_version(chosen, "-")


@oracle.parity
def test_neptune_logger_has_lightnings_signature_and_takes_keywords_only():
    import inspect

    oracle.lightning()
    from lightning.pytorch.loggers.neptune import NeptuneLogger as Theirs

    from fulmen.loggers import NeptuneLogger

    kinds = {p.kind for p in inspect.signature(NeptuneLogger).parameters.values()}
    assert {p.kind for p in inspect.signature(Theirs).parameters.values()} <= kinds
    with pytest.raises(TypeError, match="keyword arguments only"):
        NeptuneLogger("workspace/project")


def _dummy_answers(logger_module):
    logger = logger_module.DummyLogger()
    answers = [
        logger.log_metrics({"a": 1.0}, 3), logger.log_metrics(metrics={"a": 1.0}, step=1), logger.log_metrics(),
        logger.log_metrics(1, 2, 3, extra=4), logger.log_hyperparams({"lr": 0.1}), logger.log_hyperparams(),
        logger.log_hyperparams(params={"lr": 0.1}, metrics={"m": 1}), logger[0] is logger,
        logger[0].experiment.add_image("x", None) and None, logger.some_method_of_another_logger(1, key=2),
        logger.name, logger.version, logger.save_dir, logger.log_dir,
    ]  # fmt: skip  (an experiment call answers None in Lightning, the experiment itself here: not compared)
    return [a if a is None or isinstance(a, (bool, str)) else type(a).__name__ for a in answers]


@oracle.parity
def test_dummy_logger_takes_any_call_as_lightnings():
    from fulmen.loggers import logger as fulmen_logger

    ours = _dummy_answers(fulmen_logger)
    assert ours == _dummy_answers(oracle.lightning("lightning.pytorch.loggers.logger"))
    assert ours[7] is True and ours[-4:-2] == ["", ""]
