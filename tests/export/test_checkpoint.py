"""export_checkpoint over a DCP checkpoint: loaded with the trainer's loader, exported, parity-checked."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch.distributed.checkpoint as dcp
import yaml

from recpipe.export import load_backend
from recpipe.export.checkpoint import export_checkpoint
from recpipe.train.checkpoint import CONFIG, META, SPEC


def _write_checkpoint(trained, folder):
    """The files ``load_model_for_inference`` reads, as one rank writes them (DCP + config + fg.json)."""
    folder.mkdir(parents=True)
    dcp.save({"model": trained.model.state_dict()}, checkpoint_id=str(folder), no_dist=True)
    (folder / CONFIG).write_text(yaml.safe_dump(trained.cfg.to_dict(), sort_keys=False))
    trained.spec.save(folder / SPEC)
    (folder / META).write_text(json.dumps({"step": 6}))


def test_export_checkpoint_of_a_dcp_checkpoint(dlrm, tmp_path):
    ckpt = tmp_path / "ckpt-6"
    _write_checkpoint(dlrm, ckpt)
    pq.write_table(dlrm.held_out, tmp_path / "eval.parquet")
    out = tmp_path / "export"
    result = export_checkpoint(ckpt, "rtp,trt", out, str(tmp_path / "eval.parquet"))
    assert result.summary().splitlines()[0].startswith("rtp: ok max|dlogit|=")
    trt = result.backends["trt"]
    assert trt.status == "ok" or trt.reason.startswith("requires a CUDA GPU with TensorRT")
    rows = dlrm.clean.slice(0, 64)
    got = load_backend(out / "rtp").predict_raw(rows)
    assert abs(got - dlrm.eager_logits(rows)).max() <= 1e-4


def test_a_bad_backend_fails_before_the_checkpoint_is_read(tmp_path):
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['pmml'\]"):
        export_checkpoint(tmp_path / "no-checkpoint", "jit,pmml", tmp_path / "o", "x")
