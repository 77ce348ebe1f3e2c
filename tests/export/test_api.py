"""export(): jit, onnx, rtp pass parity against the eager model; trt is skipped with its reason; the
folders are complete (manifest with sha256, versions, parity; fg.json) and load back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import recpipe
from recpipe.batch import to_batch
from recpipe.export.api import export
from recpipe.export.layout import POINTER
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import read_manifest, sha256_file
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.registry import build_model

TOL = 1e-4


@pytest.mark.parametrize("backend", ["jit", "onnx", "rtp"])
def test_backend_passes_parity(exported, backend):
    trained, result = exported
    r = result.backends[backend]
    assert r.status == "ok", r.reason
    p = r.parity
    assert p.passed and p.rows >= 1000
    assert p.batch_sizes == [1, 7, 512]
    assert p.history_lengths == ([0, 1, 100] if trained.name == "din" else [])
    assert 0.0 <= p.max_abs_logit_diff <= TOL == p.tolerance
    assert round(p.auc_backend, 4) == round(p.auc_eager, 4)
    assert 0.3 < p.auc_eager < 0.9


def test_trt_is_skipped_with_reason(exported):
    _, result = exported
    r = result.backends["trt"]
    assert r.status == "skipped"
    assert r.reason.startswith("requires a CUDA GPU with TensorRT (")
    manifest = read_manifest(r.folder)
    assert (
        manifest.status == "skipped" and manifest.reason == r.reason and list(manifest.files) == ["fg.json"]
    )
    with pytest.raises(ValueError, match="skipped at export"):
        load_backend(r.folder)


@pytest.mark.parametrize("backend", ["jit", "onnx", "rtp"])
def test_manifest_lists_every_file_with_sha256(exported, backend):
    trained, result = exported
    folder = result.backends[backend].folder
    m = json.loads((Path(folder) / "manifest.json").read_text())
    assert m["backend"] == backend and m["status"] == "ok" and m["format_version"] == "1.0"
    on_disk = sorted(p.name for p in Path(folder).iterdir() if p.name != "manifest.json")
    assert sorted(m["files"]) == on_disk and "fg.json" in on_disk
    for name, info in m["files"].items():
        assert info["sha256"] == sha256_file(f"{folder}/{name}")
    assert m["versions"]["recpipe"] == recpipe.__version__
    assert m["versions"]["torch"] == torch.__version__ and "torchrec" in m["versions"]
    assert m["parity"]["passed"] and m["parity"]["max_abs_logit_diff"] <= TOL
    assert m["model"]["spec_digest"] == trained.spec.digest()
    assert FeatureSpec.load(folder).digest() == trained.spec.digest()
    assert not any(p.name.startswith(".") for p in Path(folder).parent.iterdir())
    summary = json.loads((Path(folder).parent / POINTER).read_text())
    assert summary["backends"][backend]["parity"]["max_abs_logit_diff"] == m["parity"]["max_abs_logit_diff"]


def test_split_backends_keep_histories_jagged(din_export):
    _, result = din_export
    inputs = {i["name"]: i for i in read_manifest(result.backends["rtp"].folder).inputs["dense_program"]}
    assert inputs["seq__values"]["shape"][0].startswith("T") and inputs["seq__values"]["shape"][1] == 48
    assert inputs["seq__offsets"]["shape"] == ["B+1"]
    assert inputs["seq__query"]["shape"] == ["B", 48]


@pytest.mark.parametrize("backend", ["jit", "onnx", "rtp"])
def test_loaded_backend_matches_eager_on_new_rows(exported, backend):
    trained, result = exported
    scorer = load_backend(result.backends[backend].folder)
    rows = trained.clean.slice(100, 3)  # a batch size parity never used
    assert np.abs(scorer.predict_raw(rows) - trained.eager_logits(rows)).max() <= TOL
    # Nullable integer ids stay integers (a plain to_pandas() would make them float64).
    df = trained.clean.slice(200, 33).to_pandas(types_mapper=pd.ArrowDtype)
    assert np.abs(scorer.predict_raw(df) - trained.eager_logits(trained.clean.slice(200, 33))).max() <= TOL


def test_jit_scripts_and_generalizes_across_batch_sizes(din_export):
    """The JIT module is scripted (its lookups) around a dense program; any batch size works."""
    trained, result = din_export
    manifest = read_manifest(result.backends["jit"].folder)
    assert manifest.extra["method"].startswith("script")
    scorer = load_backend(result.backends["jit"].folder)
    for n in (2, 9, 130):
        rows = trained.clean.slice(300, n)
        assert np.abs(scorer.predict_raw(rows) - trained.eager_logits(rows)).max() <= TOL


def _exports_with_parity(trained, model: torch.nn.Module, cfg, out: Path) -> None:
    result = export(model.eval(), trained.spec, cfg, ["jit", "onnx", "rtp"], out, trained.held_out)
    for backend in ("jit", "onnx", "rtp"):
        r = result.backends[backend]
        assert r.status == "ok", (backend, r.reason)
        assert r.parity.passed and r.parity.max_abs_logit_diff <= TOL, backend


def test_sigmoid_weighted_din_exports_with_parity(din, tmp_path):
    # The unnormalized attention (weighting: sigmoid) takes another branch of the dense graph: it must
    # export as well. Same parameters as the trained softmax model, so its weights load unchanged.
    cfg = din.cfg.model_copy(deep=True)
    for tower in cfg.model.din_towers:
        tower.weighting = "sigmoid"
    model = build_model(din.spec, cfg.model)
    model.load_state_dict(din.model.state_dict())
    _exports_with_parity(din, model, cfg, tmp_path)
    rows = din.clean.slice(0, 64)
    b = to_batch(FeatureGenerator(din.spec, with_labels=False)(rows), din.spec.sparse_keys())
    with torch.no_grad():
        assert not np.allclose(din.eager_logits(rows), model(b.dense, b.sparse).numpy(), atol=1e-3)


def test_dlrm_with_raw_embeddings_to_the_over_arch_exports_with_parity(dlrm, tmp_path):
    cfg = dlrm.cfg.model_copy(deep=True)
    cfg.model.arch_with_sparse = True
    torch.manual_seed(3)
    model = build_model(dlrm.spec, cfg.model)
    model.load_state_dict(
        {k: v for k, v in dlrm.model.state_dict().items() if not k.startswith("dense.over.")}, strict=False
    )  # the trained tables and bottom MLP; the wider over arch stays freshly initialized
    _exports_with_parity(dlrm, model, cfg, tmp_path)
