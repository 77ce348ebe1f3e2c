"""A model with AutoDis and MLP embeddings of numeric features exports to jit, onnx and rtp with parity: the
embeddings are part of the dense arch, so every backend serves them from the same FG output (fg.json keeps
the setting; RTP's program holds the AutoDis parameters)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from small_training import train_small

from recpipe.config import parse_config
from recpipe.export.api import export
from recpipe.features.spec import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["jit", "onnx", "rtp"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    data = yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    for f in data["features"]:
        if f["name"] == "price":
            f.clear()
            f.update(
                kind="raw", name="price", normalizer="log(x+1)", embedding_dim=8, autodis={"num_channels": 3}
            )
        for key in ("num_buckets", "hash_bucket_size"):
            if f.get(key, 0) > 1000:
                f[key] //= 100
        for sub in f.get("sub_features", []):
            if sub.get("num_buckets", 0) > 1000:
                sub["num_buckets"] //= 100
    data["features"].append(
        {"kind": "raw", "name": "price_mlp", "column": "price", "embedding_dim": 4, "mlp": {}}
    )
    data["feature_groups"][0]["features"].append("price_mlp")
    cfg = parse_config(data)
    small = train_small(cfg, "taobao", tmp_path_factory.mktemp("autodis"))
    return small, export(small.model, small.spec, cfg, BACKENDS, tmp_path_factory.mktemp("x"), small.held_out)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_autodis_and_mlp_export_with_parity(exported, backend):
    small, result = exported
    r = result.backends[backend]
    assert r.status == "ok", r.reason
    assert r.parity.passed and r.parity.rows >= 1000
    spec = FeatureSpec.load(r.folder)
    assert spec.digest() == small.spec.digest()
    assert [d.embedding["type"] for d in spec.dense] == ["autodis", "mlp"]
