"""``autodis {}`` / ``mlp {}`` of a dense value kind (lookup, match, expr, overlap, kv_dot_product): feature.proto
gives every value feature the raw feature's ``dense_emb`` (docs/source/feature/autodis.md), so the looked-up or
computed value enters its group as an ``embedding_dim``-wide embedding, as a raw feature's does: the
DenseFeature's ``embedding`` (in fg.json), read by the model's dense arch (recpipe/models/blocks/dense_embedding.py).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import torch
from kind_rows import config

from recpipe.batch import to_batch
from recpipe.config import ConfigError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.registry import build_model
from recpipe.models.train_model import bce_loss

CATE = {"kind": "id", "name": "cate", "hash_bucket_size": 50, "embedding_dim": 16}
LOOKUP = {"kind": "lookup", "name": "clicks", "map": "kv_cate", "key": "cate", "mlp": {}, "embedding_dim": 4}
EXPR = {
    "kind": "expr",
    "name": "ratio",
    "expression": "a / (1 + b)",
    "autodis": {"num_channels": 3},
    "embedding_dim": 6,
}
ROWS = pa.table(
    {
        "label": [1, 0, 1, 0],
        "cate": ["1", "2", "3", "1"],
        "kv_cate": ["1:2\x1d2:5", "2:1", "", None],
        "a": [1.0, 2.0, 3.0, 4.0],
        "b": [0.0, 1.0, 2.0, 3.0],
    }
)


def test_the_embedding_reaches_the_spec_and_fg_json() -> None:
    spec = build_feature_spec(config([CATE, LOOKUP, EXPR]))
    emb = {d.name: d.embedding for d in spec.dense}
    assert emb == {
        "clicks": {"type": "mlp", "dim": 4},
        "ratio": {"type": "autodis", "dim": 6, "num_channels": 3, "temperature": 0.1, "keep_prob": 0.8},
    }
    assert FeatureSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    # without one the value kinds' entries read (and digest) as before
    plain = build_feature_spec(
        config([CATE, {k: v for k, v in LOOKUP.items() if k not in ("mlp", "embedding_dim")}])
    )
    assert all("embedding" not in d for d in plain.to_dict()["dense"])


def test_a_model_reads_the_embedded_values_and_they_train() -> None:
    cfg = config([CATE, LOOKUP, EXPR], group=["cate"])  # DLRM: the sparse group, and all of Batch.dense
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert set(model.dense.embed.embeddings) == {"clicks", "ratio"}
    b = to_batch(FeatureGenerator(spec)(ROWS), spec.sparse_keys())
    assert model.dense.embed(b.dense).shape == (4, 4 + 6)
    bce_loss(model(b.dense, b.sparse), b.labels).backward()
    assert model.dense.embed.embeddings["clicks"].proj_w.grad.abs().sum() > 0
    assert model.dense.embed.embeddings["ratio"].meta_emb.grad.abs().sum() > 0
    other = b.dense.clone()
    other[:, 0] += 3.0  # another looked-up count, another logit
    with torch.no_grad():
        assert not torch.allclose(model(b.dense, b.sparse), model(other, b.sparse))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"boundaries": [0.5, 1.5]}, "autodis / mlp embed a dense value; an id output"),
        ({"hash_bucket_size": 10}, "autodis / mlp embed a dense value; an id output"),
        ({"autodis": {"num_channels": 2}}, "give one of autodis and mlp"),
    ],
)
def test_an_embedding_of_an_id_output_or_two_embeddings_are_refused(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config([CATE, {**LOOKUP, **extra}])
