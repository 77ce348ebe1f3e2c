"""export_checkpoint over a DCP checkpoint: loaded with the trainer's loader, exported, parity-checked."""

from __future__ import annotations

import json
import pickle

import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed.checkpoint as dcp
import yaml

from recpipe.config.placeholders import UnresolvedPlaceholder
from recpipe.export.checkpoint import export_checkpoint
from recpipe.export.loaders import load_backend
from recpipe.train.checkpoint import (
    CONFIG,
    META,
    SPEC,
    CheckpointError,
    load_model_for_inference,
    load_weights_and_optimizer,
    write_manifest,
)


def _write_checkpoint(trained, folder):
    """The files ``load_model_for_inference`` reads, as one rank writes them (DCP + config + fg.json + a
    random state), and the manifest rank 0 writes over them."""
    folder.mkdir(parents=True)
    dcp.save({"model": trained.model.state_dict()}, checkpoint_id=str(folder), no_dist=True)
    (folder / CONFIG).write_text(yaml.safe_dump(trained.cfg.to_dict(), sort_keys=False))
    trained.spec.save(folder / SPEC)
    (folder / META).write_text(json.dumps({"step": 6}))
    (folder / "rng").mkdir()
    torch.save({"torch": torch.get_rng_state()}, folder / "rng" / "rank-0.pt")
    write_manifest(folder)


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


# ------------------------------------------------------------- tampering: refused before deserialization
@pytest.fixture
def dlrm_checkpoint(dlrm, tmp_path):
    ckpt = tmp_path / "ckpt-6"
    _write_checkpoint(dlrm, ckpt)
    return ckpt


def test_dcp_metadata_with_payload_is_refused(dlrm_checkpoint, payload):
    data = payload.pickle_bytes()
    payload.proven(data, lambda p: pickle.loads(p.read_bytes()))  # DCP unpickles .metadata
    (dlrm_checkpoint / ".metadata").write_bytes(data)
    with pytest.raises(CheckpointError, match=r"refusing to load checkpoint .*sha256 of '.metadata' is"):
        load_model_for_inference(dlrm_checkpoint)
    assert not payload.marker.exists()


def test_rng_state_with_payload_is_refused(dlrm_checkpoint, payload):
    data = payload.torch_bytes()
    payload.proven(data, lambda p: torch.load(p, weights_only=False))
    rng = dlrm_checkpoint / "rng" / "rank-0.pt"
    rng.write_bytes(data)
    with pytest.raises(CheckpointError, match=r"sha256 of 'rng/rank-0.pt' is"):
        load_weights_and_optimizer(
            dlrm_checkpoint, {}, None, None
        )  # refused before the live state is touched
    # Even a payload listed in a rewritten manifest is not run: the random state is read tensors-only.
    with pytest.raises(pickle.UnpicklingError):
        torch.load(rng, weights_only=True)
    assert not payload.marker.exists()


def test_checkpoint_with_unlisted_or_without_manifest_is_refused(dlrm_checkpoint, payload):
    (dlrm_checkpoint / "__1_0.distcp").write_bytes(payload.pickle_bytes())
    with pytest.raises(CheckpointError, match=r"'__1_0.distcp' is not listed in manifest.json"):
        load_model_for_inference(dlrm_checkpoint)
    (dlrm_checkpoint / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"manifest.json is missing"):
        load_model_for_inference(dlrm_checkpoint)
    assert not payload.marker.exists()


def test_checkpoint_manifest_edited_without_the_key_is_refused(dlrm_checkpoint, payload, monkeypatch):
    from recpipe.integrity import sha256_file

    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "the-cluster-secret")
    with pytest.raises(CheckpointError, match="is not signed, but a signing key is configured"):
        load_model_for_inference(dlrm_checkpoint)
    write_manifest(dlrm_checkpoint)  # signed
    model, _, _ = load_model_for_inference(dlrm_checkpoint)
    assert model is not None
    (dlrm_checkpoint / ".metadata").write_bytes(payload.pickle_bytes())
    manifest = json.loads((dlrm_checkpoint / "manifest.json").read_text())
    manifest["files"][".metadata"]["sha256"] = sha256_file(dlrm_checkpoint / ".metadata")
    (dlrm_checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="the signature does not match its content"):
        load_model_for_inference(dlrm_checkpoint)
    assert not payload.marker.exists()


def test_the_configs_eval_path_with_a_placeholder_is_resolved_at_export(dlrm, tmp_path, monkeypatch):
    """A TorchEasyRec-style ``{NAME}`` in ``data.eval`` resolves from the environment when export runs."""
    ckpt = tmp_path / "ckpt-6"
    _write_checkpoint(dlrm, ckpt)
    data = yaml.safe_load((ckpt / CONFIG).read_text())
    data["data"].update(eval=str(tmp_path / "{SPLIT}.parquet"), params={"SPLIT": None})
    (ckpt / CONFIG).write_text(yaml.safe_dump(data, sort_keys=False))
    write_manifest(ckpt)  # the config is part of the checkpoint's digests
    pq.write_table(dlrm.held_out, tmp_path / "eval.parquet")
    with pytest.raises(UnresolvedPlaceholder, match=r"RECPIPE_PARAM_SPLIT"):
        export_checkpoint(ckpt, "rtp", tmp_path / "no")
    monkeypatch.setenv("RECPIPE_PARAM_SPLIT", "eval")
    assert export_checkpoint(ckpt, "rtp", tmp_path / "export").backends["rtp"].status == "ok"
