"""DSSMv2 and DSSM's pooled histories: one table per name across the towers (DSSM keeps one per tower), the
user tower's jagged mean / sum of its history, the config's refusals, and training from the config's
``data.negative_sampler``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import ConfigError, load_config, parse_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.models.dssm.model import DSSM
from recpipe.models.registry import build_model
from recpipe.train.retrieval import rows_batch, train_retrieval

SMALL = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"


def _config(kind: str = "dssm_v2", pooling: str = "mean", **model) -> dict:
    return {
        "name": "t",
        "data": {"label": "clk", "batch_size": 4, "split": {"time_column": None, "eval_fraction": 0.1}},
        "features": [
            {"kind": "id", "name": "user_id", "num_buckets": 50, "embedding_dim": 4},
            {"kind": "id", "name": "item_id", "num_buckets": 50, "embedding_dim": 4},
            {"kind": "id", "name": "cate_id", "num_buckets": 10, "embedding_dim": 4},
            {
                "kind": "sequence",
                "name": "hist",
                "sub_features": [
                    {"name": "item_id", "num_buckets": 50, "embedding_dim": 4, "embedding_name": "item_id"},
                    {"name": "cate_id", "num_buckets": 10, "embedding_dim": 4, "embedding_name": "hist_cate"},
                ],
            },
        ],
        "feature_groups": [
            {"name": "user", "type": "deep", "features": ["user_id", "cate_id"]},
            {"name": "hist", "type": "sequence", "features": ["hist__item_id", "hist__cate_id"]},
            {"name": "item", "type": "deep", "features": ["item_id", "cate_id"]},
        ],
        "model": {
            "type": kind,
            "user_tower": {
                "group": "user",
                "mlp": {"hidden_units": [8]},
                "sequence_pooling": [{"group": "hist", "pooling": pooling}],
            },
            "item_tower": {"group": "item", "mlp": {"hidden_units": [8]}},
            "output_dim": 4,
            **model,
        },
    }


ROWS = pa.table(
    {
        "user_id": [1, 2],
        "item_id": [5, 6],
        "cate_id": [1, 2],
        "hist": ["5\x031|7\x032|9\x031", ""],  # row 0: three items; row 1: none
        "clk": [1, 1],
    }
)


def _built(data: dict):
    cfg = parse_config(data)
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    return cfg, spec, build_model(spec, cfg.model), rows_batch(FeatureGenerator(spec), ROWS)


def test_v2_shares_tables_across_towers_and_v1_does_not() -> None:
    _, _, v2, batch = _built(_config("dssm_v2"))
    assert isinstance(v2, DSSM) and v2.shared_embeddings is not None and v2.user_embeddings is None
    names = sorted(n.split(".")[-2] for n, _ in v2.named_parameters() if "embeddings." in n)
    assert names == ["cate_id", "hist_cate", "item_id", "user_id"]  # cate_id and item_id once for both towers
    _, _, v1, _ = _built(_config("dssm"))
    v1_names = sorted(n.split(".")[-2] for n, _ in v1.named_parameters() if "embeddings." in n)
    assert v1_names == ["cate_id", "cate_id", "hist_cate", "item_id", "item_id", "user_id"]
    user, item = v2.user_embedding(batch.dense, batch.sparse), v2.item_embedding(batch.dense, batch.sparse)
    assert user.shape == item.shape == (2, 4)
    torch.testing.assert_close(v2(batch.dense, batch.sparse), (user * item).sum(1))


@pytest.mark.parametrize("kind", ["dssm", "dssm_v2"])
@pytest.mark.parametrize("pooling", ["mean", "sum"])
def test_user_tower_pools_its_history_jagged(kind, pooling) -> None:
    _, _, model, batch = _built(_config(kind, pooling))
    tower, group = model.user_tower, model.shared_embeddings if kind == "dssm_v2" else model.user_embeddings
    lookup = group(batch.sparse)
    assert lookup.offsets["hist__item_id"].tolist() == [0, 3, 3]  # jagged: 3 real items, none padded
    got = tower.histories[0](lookup)
    table = dict(group.named_parameters())
    item_w = next(w for n, w in table.items() if n == "ec.embeddings.item_id.weight")
    cate_w = next(w for n, w in table.items() if n.endswith("hist_cate.weight"))
    want = torch.cat([item_w[[5, 7, 9]], cate_w[[1, 2, 1]]], dim=1)
    want = want.mean(0) if pooling == "mean" else want.sum(0)
    torch.testing.assert_close(got[0], want)
    torch.testing.assert_close(got[1], torch.zeros(8))  # an empty history is zeros
    first = next(m for m in tower.mlp.modules() if isinstance(m, torch.nn.Linear))
    assert first.in_features == 4 + 4 + 8  # user_id | cate_id | the pooled history (item_id | hist_cate)


def test_sequence_pooling_config_errors() -> None:
    data = _config()
    data["model"]["user_tower"]["sequence_pooling"] = [{"group": "item"}]
    with pytest.raises(ConfigError, match="sequence_pooling group 'item' is a deep group"):
        parse_config(data)
    data["model"]["user_tower"]["sequence_pooling"] = [{"group": "hist"}, {"group": "hist"}]
    with pytest.raises(ConfigError, match=r"pools groups \['hist'\] more than once"):
        parse_config(data)
    data = _config()
    data["feature_groups"][1]["features"] = ["item_id", "hist__item_id", "hist__cate_id"]
    with pytest.raises(ValueError, match="sequence_pooling group 'hist' lists query features"):
        _built(data)


def test_din_refuses_a_history_without_query() -> None:
    data = _config()
    data["model"] = {
        "type": "multi_tower_din",
        "towers": [{"group": "user", "mlp": {"hidden_units": [8]}}],
        "din_towers": [{"group": "hist", "attn_mlp": {"hidden_units": [8]}}],
        "final": {"hidden_units": [4]},
    }
    with pytest.raises(ValueError, match="no query feature to attend with"):
        _built(data)


def test_v2_trains_from_the_configured_negative_sampler(tmp_path) -> None:
    report = generate("retrieval", 6000, tmp_path, seed=0, users=200, items=300)
    rows = pq.read_table(report.files[0])
    sampler = {
        "input_path": str(tmp_path / "_items.parquet"),
        "item_id_field": "item_id",
        "num_sample": 64,
        "attr_fields": ["item_id", "cate_id"],
    }
    cfg = load_config(
        SMALL, {"model.type": "dssm_v2", "data.negative_sampler": sampler, "train.max_steps": 60}
    )
    spec = build_feature_spec(cfg)
    torch.set_num_threads(1)
    run = train_retrieval(cfg, spec, rows)
    assert isinstance(run.model, DSSM) and run.model.shared_embeddings is not None and len(run.losses) == 60
    assert sum(run.losses[-10:]) / 10 < 0.85 * run.losses[0]
    bad = load_config(SMALL, {"data.negative_sampler": {**sampler, "attr_fields": ["item_id"]}})
    with pytest.raises(ValueError, match=r"reads column\(s\) \['cate_id'\] that are not in attr_fields"):
        train_retrieval(bad, build_feature_spec(bad), rows, steps=1)
    with pytest.raises(ValueError, match="give data.negative_sampler"):
        train_retrieval(load_config(SMALL, {"data.negative_sampler": None}), spec, rows, steps=1)
