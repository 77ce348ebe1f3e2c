"""AutoDis and MLP embeddings of numeric features (TorchEasyRec's ``raw_feature { autodis {...} }`` / ``mlp {}``,
docs/source/feature/autodis.md): the modules compute TorchEasyRec's formulas, a raw feature with one enters
its group as an embedding of embedding_dim (every model, through the registry), its parameters train, and
fg.json keeps the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from recpipe.batch import to_batch
from recpipe.config import ConfigError, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.dense_embedding import (
    AutoDis,
    DenseEmbeddings,
    EmbeddedDense,
    MlpEmbedding,
    expand_dense,
)
from recpipe.models.registry import build_model
from recpipe.models.train_model import bce_loss

ROOT = Path(__file__).resolve().parents[2]


def _autodis_reference(m: AutoDis, x: torch.Tensor) -> torch.Tensor:
    """tzrec/modules/dense_embedding_collection.py's AutoDisEmbedding.forward for one feature (n = 1)."""
    w, mm, meta = m.proj_w[None], m.proj_m[None], m.meta_emb[None]
    hidden = torch.nn.functional.leaky_relu(torch.einsum("nc,bn->bnc", w, x[:, None]))
    x_bar = torch.einsum("nij,bnj->bni", mm, hidden) + m.keep_prob * hidden
    x_hat = torch.softmax(x_bar / m.temperature, dim=-1)
    return torch.einsum("ncd,bnc->bnd", meta, x_hat).reshape(-1, meta.shape[-1])


def test_autodis_and_mlp_compute_torcheasyrecs_formulas() -> None:
    torch.manual_seed(0)
    x = torch.tensor([-1.5, 0.0, 0.3, 7.0])
    m = AutoDis(embedding_dim=8, num_channels=3, temperature=0.1, keep_prob=0.8)
    torch.testing.assert_close(m(x), _autodis_reference(m, x))
    assert m(x).shape == (4, 8)
    mlp = MlpEmbedding(6)
    torch.testing.assert_close(
        mlp(x), torch.einsum("ni,bn->bni", mlp.proj_w[None], x[:, None]).reshape(-1, 6)
    )


def _din(**price) -> dict:
    data = yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    for f in data["features"]:
        if f["name"] == "price":
            f.clear()
            f.update({"kind": "raw", "name": "price", "normalizer": "log(x+1)", "embedding_dim": 8, **price})
    data["features"].append(
        {"kind": "raw", "name": "price_mlp", "column": "price", "embedding_dim": 4, "mlp": {}}
    )
    data["feature_groups"][0]["features"].append("price_mlp")
    return data


def test_the_columns_expand_in_place() -> None:
    spec = build_feature_spec(parse_config(_din(autodis={"num_channels": 3})))
    assert [d.embedding["type"] for d in spec.dense] == ["autodis", "mlp"]
    wide = expand_dense(spec)
    assert wide.dense_names() == [
        *(f"price__emb{i}" for i in range(8)),
        *(f"price_mlp__emb{i}" for i in range(4)),
    ]
    assert wide.group("deep").dense == wide.dense_names() and wide.tables() == spec.tables()
    embed = DenseEmbeddings(spec)
    assert embed(torch.tensor([[1.0, 2.0], [0.0, 0.5]])).shape == (2, 12)


def test_a_model_reads_the_embedding_and_its_parameters_train(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from recpipe.data.synthetic import generate

    cfg = parse_config(_din(autodis={"num_channels": 3, "temperature": 0.5}))
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert isinstance(model.dense, EmbeddedDense) and model.dense_in_features == 2
    generate("taobao", 200, tmp_path / "rows", seed=1)
    b = to_batch(
        FeatureGenerator(spec, on_bad_row="skip")(pq.read_table(tmp_path / "rows")), spec.sparse_keys()
    )
    loss = bce_loss(model(b.dense, b.sparse), b.labels)
    loss.backward()
    autodis = model.dense.embed.embeddings["price"]
    for p in (
        autodis.meta_emb,
        autodis.proj_w,
        autodis.proj_m,
        model.dense.embed.embeddings["price_mlp"].proj_w,
    ):
        assert p.grad is not None and p.grad.abs().sum() > 0
    # The value matters: another price, another logit.
    other = b.dense.clone()
    other[:, 0] += 3.0
    with torch.no_grad():
        assert not torch.allclose(model(b.dense, b.sparse), model(other, b.sparse))
    names = [n for n, _ in model.named_parameters()]
    assert "dense.embed.embeddings.price.meta_emb" in names


def test_every_model_takes_it() -> None:
    data = yaml.safe_load((ROOT / "configs" / "dlrm_criteo_small.yaml").read_text())
    data["features"][0].update(autodis={"num_channels": 4}, embedding_dim=8)
    data["features"][1].update(mlp={}, embedding_dim=8)
    for f in data["features"]:
        for key in ("num_buckets", "hash_bucket_size"):
            if f.get(key, 0) > 1000:
                f[key] = 1000
    cfg = parse_config(data)
    spec = build_feature_spec(cfg)
    model = build_model(spec, cfg.model)
    dense = torch.randn(3, spec.dense_dim)
    assert model.dense.embed(dense).shape == (3, spec.dense_dim - 2 + 16)


def test_fg_json_keeps_the_setting_and_others_read_as_before() -> None:
    spec = build_feature_spec(parse_config(_din(autodis={"num_channels": 3})))
    d = spec.to_dict()
    assert d["dense"][0]["embedding"] == {
        "type": "autodis",
        "dim": 8,
        "num_channels": 3,
        "temperature": 0.1,
        "keep_prob": 0.8,
    }
    assert FeatureSpec.from_dict(json.loads(json.dumps(d))) == spec
    plain = build_feature_spec(
        parse_config(yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text()))
    )
    assert all("embedding" not in e for e in plain.to_dict()["dense"])


def test_configs_that_are_probably_mistakes_are_refused() -> None:
    with pytest.raises(ConfigError, match="give one of autodis and mlp"):
        parse_config(_din(autodis={"num_channels": 3}, mlp={}))
    with pytest.raises(ConfigError, match="a bucketized feature"):
        parse_config(_din(autodis={"num_channels": 3}, boundaries=[1.0, 2.0]))
    with pytest.raises(ConfigError, match="num_channels"):
        parse_config(_din(autodis={}))
