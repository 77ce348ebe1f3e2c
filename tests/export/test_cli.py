"""``recpipe export`` over a DCP checkpoint: loaded with the trainer's loader, exported, parity-checked."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import torch.distributed.checkpoint as dcp
import yaml

from recpipe.export import load_backend
from recpipe.export.cli import main
from recpipe.train.checkpoint import CONFIG, META, SPEC


def _write_checkpoint(trained, folder):
    """The files ``load_model_for_inference`` reads, as one rank writes them (DCP + config + fg.json)."""
    folder.mkdir(parents=True)
    dcp.save({"model": trained.model.state_dict()}, checkpoint_id=str(folder), no_dist=True)
    (folder / CONFIG).write_text(yaml.safe_dump(trained.cfg.to_dict(), sort_keys=False))
    trained.spec.save(folder / SPEC)
    (folder / META).write_text(json.dumps({"step": 6}))


def test_cli_exports_a_checkpoint(dlrm, tmp_path, capsys):
    ckpt = tmp_path / "ckpt-6"
    _write_checkpoint(dlrm, ckpt)
    pq.write_table(dlrm.held_out, tmp_path / "eval.parquet")
    out = tmp_path / "export"
    code = main(
        [
            "--checkpoint",
            str(ckpt),
            "--backends",
            "rtp,trt",
            "--out",
            str(out),
            "--data",
            str(tmp_path / "eval.parquet"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert printed.splitlines()[0].startswith("rtp: ok max|dlogit|=")
    assert "trt: skipped (requires a CUDA GPU with TensorRT" in printed
    rows = dlrm.clean.slice(0, 64)
    got = load_backend(out / "rtp").predict_raw(rows)
    assert abs(got - dlrm.eager_logits(rows)).max() <= 1e-4


def test_cli_reports_a_bad_backend(tmp_path, capsys):
    code = main(
        ["--checkpoint", str(tmp_path), "--backends", "jit,pmml", "--out", str(tmp_path / "o"), "--data", "x"]
    )
    assert code == 1
    assert "unknown backend(s) ['pmml']" in capsys.readouterr().err
