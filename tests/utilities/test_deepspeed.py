"""utilities.deepspeed: finding a ZeRO checkpoint's tag directory works everywhere; converting one needs the
deepspeed package, and says so."""

from __future__ import annotations

import inspect

import pytest

from fulmen.utilities import deepspeed
from fulmen.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict, ds_checkpoint_dir
from fulmen.utilities.imports import package_available
from tests.parity import oracle


def test_the_tag_directory_is_found_from_latest_or_given(tmp_path):
    (tmp_path / "global_step14").mkdir()
    (tmp_path / "latest").write_text("global_step14\n")
    assert ds_checkpoint_dir(tmp_path) == str(tmp_path / "global_step14")
    (tmp_path / "global_step7").mkdir()
    assert ds_checkpoint_dir(tmp_path, tag="global_step7") == str(tmp_path / "global_step7")
    with pytest.raises(FileNotFoundError, match="global_step9"):
        ds_checkpoint_dir(tmp_path, tag="global_step9")
    with pytest.raises(ValueError, match="Unable to find 'latest' file"):
        ds_checkpoint_dir(tmp_path / "global_step7")


@oracle.parity
def test_tag_directory_as_lightnings(tmp_path):
    theirs = oracle.lightning("lightning.pytorch.utilities.deepspeed").ds_checkpoint_dir
    (tmp_path / "tag").mkdir()
    (tmp_path / "latest").write_text("tag")
    assert ds_checkpoint_dir(tmp_path) == theirs(tmp_path)
    for call in (lambda f: f(tmp_path, "missing"), lambda f: f(tmp_path / "tag")):
        with pytest.raises(Exception) as ours_error:
            call(ds_checkpoint_dir)
        with pytest.raises(Exception) as their_error:
            call(theirs)
        assert ours_error.type is their_error.type


@pytest.mark.skipif(package_available("deepspeed"), reason="checks the message shown without deepspeed")
def test_converting_without_deepspeed_names_it(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="`deepspeed` package is not installed.*consolidate_checkpoint"):
        convert_zero_checkpoint_to_fp32_state_dict(tmp_path, tmp_path / "out.ckpt")
    assert not (tmp_path / "out.ckpt").exists()


@oracle.parity
@pytest.mark.parametrize("name", ["ds_checkpoint_dir", "convert_zero_checkpoint_to_fp32_state_dict"])
def test_signatures_are_lightnings(name):
    theirs = getattr(oracle.lightning("lightning.pytorch.utilities.deepspeed"), name)

    def parameters(fn):
        return [(n, p.kind, p.default) for n, p in inspect.signature(fn).parameters.items()]

    assert parameters(getattr(deepspeed, name)) == parameters(theirs)
