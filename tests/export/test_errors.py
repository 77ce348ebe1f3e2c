"""Bad input: tampered files, newer manifests, a FeatureSpec that does not match the model, a backend
that fails parity (nothing left in place), unknown backends."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from recpipe.export.api import export
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import ArtifactError, ExportError, read_manifest
from recpipe.export.split import SpecMismatchError
from recpipe.features.spec import FeatureSpec, IdMapping


def _linked_copy(src: str, dst: Path) -> Path:
    """A copy of an export folder made of hard links (cheap); rewrite files with :func:`_rewrite` only."""
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def _rewrite(path: Path, data: bytes) -> None:
    path.unlink()  # break the hard link: the session's export stays intact
    path.write_bytes(data)


@pytest.mark.parametrize("victim", ["dense.pt2", "model-00000.safetensors", "fg.json"])
def test_tampered_file_is_named(dlrm_export, tmp_path, victim):
    _, result = dlrm_export
    folder = _linked_copy(result.backends["rtp"].folder, tmp_path / "rtp")
    data = bytearray((folder / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    _rewrite(folder / victim, bytes(data))
    with pytest.raises(
        ArtifactError, match=rf"sha256 of '{victim}' is [0-9a-f]{{64}}, but manifest.json says"
    ):
        load_backend(folder)


def test_missing_file_is_named(dlrm_export, tmp_path):
    _, result = dlrm_export
    folder = _linked_copy(result.backends["jit"].folder, tmp_path / "jit")
    (folder / "model.pt").unlink()
    with pytest.raises(ArtifactError, match="'model.pt' listed in manifest.json is missing"):
        load_backend(folder)


def test_newer_manifest_major_version_is_refused(dlrm_export, tmp_path):
    _, result = dlrm_export
    folder = _linked_copy(result.backends["rtp"].folder, tmp_path / "rtp")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format_version"] = "2.0"
    _rewrite(folder / "manifest.json", json.dumps(manifest).encode())
    with pytest.raises(ArtifactError, match="manifest format version 2.0 is newer than this recpipe"):
        load_backend(folder)
    manifest["format_version"] = "1.7"  # a newer minor version only adds fields: still readable
    _rewrite(folder / "manifest.json", json.dumps(manifest).encode())
    assert read_manifest(folder).backend == "rtp"


def test_folder_without_manifest(tmp_path):
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        load_backend(tmp_path)


def _resize(spec: FeatureSpec, key: str, size: int) -> FeatureSpec:
    sparse = [
        dataclasses.replace(
            f, mapping=IdMapping(f.mapping.kind, size, f.mapping.vocab, f.mapping.default_value)
        )
        if f.name == key
        else f
        for f in spec.sparse
    ]
    return dataclasses.replace(spec, sparse=sparse)


def test_spec_mismatch_is_a_clear_error(din, tmp_path):
    spec = _resize(din.spec, "pid", 30)
    with pytest.raises(
        SpecMismatchError, match=r"table 'pid' is 20 x 16 in the model but 30 x 16 in the FeatureSpec"
    ):
        export(din.model, spec, din.cfg, ["rtp"], tmp_path / "out", din.held_out)
    assert not (tmp_path / "out").exists()


def test_spec_with_other_dims_is_a_clear_error(din, tmp_path):
    sparse = [dataclasses.replace(f, embedding_dim=8) if f.table == "cate_id" else f for f in din.spec.sparse]
    with pytest.raises(SpecMismatchError, match=r"table 'cate_id' is 12961 x 16 in the model but 12961 x 8"):
        export(
            din.model, dataclasses.replace(din.spec, sparse=sparse), din.cfg, ["jit"], tmp_path, din.held_out
        )


def test_failed_parity_leaves_nothing_in_place(dlrm, tmp_path):
    out = tmp_path / "out"
    (out / "onnx").mkdir(parents=True)
    (out / "onnx" / "previous.txt").write_text("the last good export")
    cfg = dlrm.cfg.model_copy(deep=True)
    # ONNX Runtime's float32 kernels differ from torch's by ~1e-7; with several threads the RTP lookup's
    # summation order can differ by ~6e-8 too, so either backend may be the first to fail.
    cfg.export.max_abs_logit_diff = 1e-12
    with pytest.raises(
        ExportError, match=r"backend '(rtp|onnx)' failed parity on 1032 rows: max \|Δlogit\| = "
    ):
        export(dlrm.model, dlrm.spec, cfg, ["rtp", "onnx"], out, dlrm.held_out)
    assert sorted(p.name for p in out.iterdir()) == ["onnx"]  # no rtp, no staging folder
    assert (out / "onnx" / "previous.txt").read_text() == "the last good export"


def test_unknown_backend(dlrm, tmp_path):
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['tflite'\]"):
        export(dlrm.model, dlrm.spec, dlrm.cfg, ["jit", "tflite"], tmp_path, dlrm.held_out)


# ------------------------------------------------------------- tampering: refused before deserialization
def _payload_in(folder: Path, name: str, data: bytes) -> None:
    _rewrite(folder / name, data)


def test_dense_program_with_payload_is_refused_before_loading(dlrm_export, tmp_path, payload):
    _, result = dlrm_export
    folder = _linked_copy(result.backends["rtp"].folder, tmp_path / "rtp")
    data = payload.pickle_bytes()
    payload.proven(data, lambda p: __import__("pickle").loads(p.read_bytes()))
    _payload_in(folder, "dense.pt2", data)
    with pytest.raises(ArtifactError, match=r"sha256 of 'dense.pt2' is"):
        load_backend(folder)
    assert not payload.marker.exists()


@pytest.mark.parametrize("how", ["extra file", "entry deleted", "files emptied"])
def test_unlisted_file_is_refused(dlrm_export, tmp_path, payload, how):
    _, result = dlrm_export
    folder = _linked_copy(result.backends["jit"].folder, tmp_path / "jit")
    manifest = json.loads((folder / "manifest.json").read_text())
    if how == "extra file":
        (folder / "extra.pt").write_bytes(payload.pickle_bytes())
        unlisted = "extra.pt"
    elif how == "entry deleted":
        _payload_in(folder, "model.pt", payload.pickle_bytes())
        del manifest["files"]["model.pt"]
        unlisted = "model.pt"
    else:
        _payload_in(folder, "model.pt", payload.pickle_bytes())
        manifest["files"] = {}
        unlisted = "fg.json"  # the first of the folder's files, in sorted order
    _rewrite(folder / "manifest.json", json.dumps(manifest).encode())
    with pytest.raises(ArtifactError, match=rf"'{unlisted}' is not listed in manifest.json"):
        load_backend(folder)
    assert not payload.marker.exists()


def test_manifest_edited_without_the_key_is_refused(dlrm_export, tmp_path, payload, monkeypatch):
    from recpipe.export.manifest import Manifest, sha256_file

    _, result = dlrm_export
    folder = _linked_copy(result.backends["rtp"].folder, tmp_path / "rtp")
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "the-cluster-secret")
    with pytest.raises(ArtifactError, match="is not signed, but a signing key is configured"):
        load_backend(folder)  # exported without a key: refused once a key is required
    manifest = read_manifest(folder, verify=False)
    Manifest(**{**manifest.to_dict(), "signature": None}).write(folder)  # signed with the key
    assert load_backend(folder).manifest.signature  # the signed folder loads

    # Whoever can write the folder but not read the key: plant a payload and fix up the sha256.
    _payload_in(folder, "dense.pt2", payload.pickle_bytes())
    forged = json.loads((folder / "manifest.json").read_text())
    forged["files"]["dense.pt2"] = {"sha256": sha256_file(folder / "dense.pt2"), "bytes": 1}
    _rewrite(folder / "manifest.json", json.dumps(forged).encode())
    with pytest.raises(ArtifactError, match="the signature does not match its content"):
        load_backend(folder)
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "another-key")
    forged = Manifest(**{**manifest.to_dict(), "files": forged["files"]})
    forged.write(folder)  # signed with a key the loader does not hold
    monkeypatch.setenv("RECPIPE_SIGNING_KEY", "the-cluster-secret")
    with pytest.raises(ArtifactError, match="the signature does not match its content"):
        load_backend(folder)
    assert not payload.marker.exists()
