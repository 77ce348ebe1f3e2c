"""MultiTowerDIN whose sequence group lists a dense feature among its query features (TorchEasyRec's DIN mock
configs: ``raw_2`` beside ``id_2``, paired with the history's ``click_50_seq__raw_2``): the query is the group's
non-sequence features concatenated in the group's order, a dense feature contributing its value
(SequenceEmbeddingGroupImpl, tzrec/modules/embedding.py), taken from ``Batch.dense`` inside the dense graph, so
every export backend reads it. Here the query is ``item | price | cate`` and each item ``item | price | cate``.
The spec (order, widths), the query the attention sees, and a model trained a few steps and exported to jit,
onnx and rtp with parity."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.batch import to_batch
from recpipe.config import parse_config
from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec, FeatureSpecError
from recpipe.models.multi_tower_din.dense import PadQuery, query_permutation
from recpipe.models.registry import build_model

TRAIN_ROWS, EVAL_ROWS, BATCH = 3000, 600, 100
BACKENDS = ("jit", "onnx", "rtp")
ITEMS, CATES = 40, 8
SEQ = ["item", "price", "cate", "clicks__item", "clicks__price", "clicks__cate"]

CONFIG = {
    "name": "dense_query",
    "data": {"label": "label", "batch_size": BATCH},
    "features": [
        {"kind": "id", "name": "user_id", "hash_bucket_size": 100, "embedding_dim": 8},
        {"kind": "id", "name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
        {"kind": "id", "name": "cate", "num_buckets": CATES, "embedding_dim": 8},
        {"kind": "raw", "name": "price"},
        {
            "kind": "sequence",
            "name": "clicks",
            "sequence_length": 10,
            "sub_features": [
                {"name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
                {"name": "price", "dense": True},
                {"name": "cate", "num_buckets": CATES, "embedding_dim": 8},
            ],
        },
    ],
    "feature_groups": [
        {"name": "deep", "type": "deep", "features": ["user_id", "item", "cate"]},
        {"name": "seq", "type": "sequence", "features": SEQ},
    ],
    "model": {
        "type": "multi_tower_din",
        "towers": [{"group": "deep", "mlp": {"hidden_units": [16]}}],
        "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [16, 8]}}],
        "final": {"hidden_units": [16]},
    },
    "train": {
        "sparse_optimizer": {"type": "adagrad", "lr": 0.1},
        "dense_optimizer": {"type": "adam", "lr": 0.01},
        "epochs": 8,
        "log_every_steps": 10,
    },
    "export": {"backends": list(BACKENDS), "max_abs_logit_diff": 1e-4},
}


def rows(n: int, seed: int) -> pa.Table:
    """Generated raw rows; the label follows a click of the candidate item (the price only reaches the model
    through the DIN query and the items)."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, ITEMS, n)
    price = np.round(rng.uniform(0, 1, n), 2)
    clicks, logit = [], np.full(n, -1.5)
    for i in range(n):  # generating row by row is fine; FG is what must not loop
        k = rng.integers(0, 8)
        seen = rng.integers(0, ITEMS, k)
        paid = np.round(rng.uniform(0, 1, k), 2)
        if k and rng.random() < 0.6:
            seen[rng.integers(0, k)] = item[i]
        clicks.append("|".join(f"{s}\x03{p:g}\x03{s % CATES}" for s, p in zip(seen, paid)))
        logit[i] += 3.0 * float((seen == item[i]).any())
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table(
        {
            "user_id": [f"u{u}" for u in rng.integers(0, 300, n)],
            "item": item,
            "cate": item % CATES,
            "price": price,
            "clicks": clicks,
            "label": label,
        }
    )


def _spec(features: list[str] = SEQ) -> FeatureSpec:
    cfg = copy.deepcopy(CONFIG)
    cfg["feature_groups"][1]["features"] = features
    return build_feature_spec(parse_config(cfg))


def test_the_group_records_its_dense_query_columns_in_order() -> None:
    spec = _spec()
    group = spec.group("seq")
    assert group.query == ["item", "cate"] and group.dense == ["price"]
    assert group.query_order == ["item", "price", "cate"] == group.query_parts()
    assert group.history == ["clicks__item", "clicks__price", "clicks__cate"]
    assert spec.group("deep").query_order == [] and spec.group("deep").query_parts() == []
    assert FeatureSpec.from_dict(spec.to_dict()).group("seq") == group
    # a group without a dense query column writes fg.json as before
    assert "query_order" not in _spec([n for n in SEQ if "price" not in n]).to_dict()["groups"][1]


def test_a_dense_query_wider_than_an_item_or_out_of_order_is_refused() -> None:
    with pytest.raises(FeatureSpecError, match=r"wider than a history item"):
        _spec(["item", "cate", "price", "clicks__item", "clicks__cate"])  # width 17 > 16
    with pytest.raises(FeatureSpecError, match=r"paired by position"):
        _spec(["item", "price", "cate", "clicks__item", "clicks__cate", "clicks__price"])
    with pytest.raises(FeatureSpecError, match=r"only dense features"):
        _spec(["price", "clicks__price"])


def test_the_attention_reads_the_query_in_the_groups_order(tmp_path: Path) -> None:
    spec = _spec()
    cfg = parse_config(CONFIG)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    tower = model.dense.din_towers_spec[0]
    assert tower.dense_columns == (spec.dense_names().index("price"),) and tower.dense_positions == (1,)
    assert query_permutation(tower, {"item": 8, "cate": 8}) == [*range(8), 16, *range(8, 16)]
    assert not isinstance(model.dense.din["seq"], PadQuery)  # 17 == 17: no padding
    b = to_batch(FeatureGenerator(spec)(rows(50, 3)), spec.sparse_keys())
    seen = {}
    model.dense.din["seq"].register_forward_hook(lambda m, args, out: seen.update(query=args[0]))
    model(b.dense, b.sparse)
    emb = model.sparse_arch(b.sparse)
    price = b.dense[:, spec.dense_names().index("price")]
    torch.testing.assert_close(seen["query"][:, :8], emb["seq__query"][:, :8])
    torch.testing.assert_close(seen["query"][:, 8], price)
    torch.testing.assert_close(seen["query"][:, 9:], emb["seq__query"][:, 8:])
    assert emb["seq__values"].shape[1] == 17


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_splits(
        tmp_path_factory.mktemp("dense_query"), rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), CONFIG
    )


@pytest.mark.slow
def test_dense_query_din_trains_exports_and_serves(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.6

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    table = pq.read_table(data["eval"])
    head = table.drop_columns(["label"]).slice(0, 40)
    rtp = load_backend(tmp_path / "export" / "rtp")
    assert rtp.spec.group("seq").query_order == ["item", "price", "cate"]
    want = sigmoid(np.asarray(rtp.predict_raw(head), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(head), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    # The candidate's price (in no deep group: the DIN query only) is read by every backend alike.
    moved = head.set_column(head.schema.get_field_index("price"), "price", pa.array(np.full(40, 5.0)))
    want_moved = sigmoid(np.asarray(rtp.predict_raw(moved), np.float64))
    assert not np.allclose(want_moved, want, atol=1e-3)
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(moved), np.float64))
        np.testing.assert_allclose(got, want_moved, atol=2.5e-5, err_msg=name)


def test_a_multitask_din_tower_reads_the_dense_query_too() -> None:
    """MMoE (and DBMTL, PLE: one builder) over the same DIN tower: the query carries the price there too."""
    cfg = copy.deepcopy(CONFIG)
    cfg["data"] = {"label_fields": ["label", "buy"], "batch_size": BATCH}
    cfg["model"] = {
        "type": "mmoe",
        "towers": [{"group": "deep"}],
        "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [8]}}],
        "expert_mlp": {"hidden_units": [8]},
        "num_experts": 2,
        "task_towers": [{"name": "ctr", "label": "label"}, {"name": "cvr", "label": "buy"}],
    }
    cfg = parse_config(cfg)
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert model.dense.din_towers_spec[0].dense_positions == (1,)
    table = rows(30, 4)
    table = table.append_column("buy", table.column("label"))
    b = to_batch(FeatureGenerator(spec)(table), spec.sparse_keys())
    seen = {}
    model.dense.din["seq"].register_forward_hook(lambda m, args, out: seen.update(query=args[0]))
    assert model(b.dense, b.sparse).shape == (30, 2)
    torch.testing.assert_close(seen["query"][:, 8], b.dense[:, spec.dense_names().index("price")])
