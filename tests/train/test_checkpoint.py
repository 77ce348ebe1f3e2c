"""Checkpoint folders: an interrupted write never replaces the last complete checkpoint."""

import json

import pytest

from recpipe.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    model_prefix,
    model_state,
    resolve_checkpoint,
)


def _fake(root, step):
    d = root / f"ckpt-{step}"
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(b"x")
    (d / "meta.json").write_text(json.dumps({"step": step}))
    return d


def test_latest_follows_the_pointer_and_survives_an_interrupted_write(tmp_path):
    root = tmp_path / "checkpoints"
    _fake(root, 50)
    c100 = _fake(root, 100)
    (root / "latest").write_text("ckpt-100\n")
    assert latest_checkpoint(tmp_path) == c100
    # A write of step 150 died before its rename: only the .tmp folder (no .metadata) exists.
    (root / "ckpt-150.tmp").mkdir()
    (root / "ckpt-150.tmp" / "meta.json").write_text("{}")
    assert latest_checkpoint(tmp_path) == c100
    assert [p.name for p in list_checkpoints(root)] == ["ckpt-50", "ckpt-100"]
    # A pointer to a folder that is gone falls back to the newest complete one.
    (root / "latest").write_text("ckpt-999\n")
    assert latest_checkpoint(tmp_path) == c100
    assert resolve_checkpoint(tmp_path) == c100 == resolve_checkpoint(root) == resolve_checkpoint(c100)


def test_no_checkpoint_is_an_error(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        resolve_checkpoint(tmp_path)


def test_model_keys_drop_the_training_wrappers():
    import torch

    inner = torch.nn.Linear(2, 1)
    outer = torch.nn.Sequential()
    outer.add_module("train_model", torch.nn.Module())
    outer.train_model.add_module("model", inner)
    prefix = model_prefix(outer, inner)
    assert prefix == "train_model.model."
    state = model_state(outer.state_dict(), prefix)
    assert sorted(state) == ["bias", "weight"] and state["weight"].data_ptr() == inner.weight.data_ptr()
