"""MultiTowerDIN over histories with a numeric sub-value per item the whole way: a grouped sequence whose items
carry the days since each click (bucketized, ``boundaries``), and two standalone histories read item by item
together (``sequence_id`` of bought items, ``sequence_raw`` of the prices paid). The query (the candidate's item
and category) is narrower than a history item, so DIN pads it with zeros, as TorchEasyRec's DINEncoder does.
Trained a few steps, exported to jit, onnx and rtp with parity, raw rows scored by every backend alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.auc import binary_auc
from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend

TRAIN_ROWS, EVAL_ROWS, BATCH = 3000, 600, 200
BACKENDS = ("jit", "onnx", "rtp")
ITEMS, CATES = 40, 8

CONFIG = {
    "name": "numeric_history",
    "data": {"label": "label", "batch_size": BATCH},
    "features": [
        {"kind": "id", "name": "user_id", "hash_bucket_size": 100, "embedding_dim": 8},
        {"kind": "id", "name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
        {"kind": "id", "name": "cate", "num_buckets": CATES, "embedding_dim": 8},
        {
            "kind": "sequence",
            "name": "clicks",
            "sequence_length": 10,
            "sub_features": [
                {"name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
                {"name": "cate", "num_buckets": CATES, "embedding_dim": 8},
                {"name": "age", "boundaries": [1, 3, 7, 15], "embedding_dim": 8, "embedding_name": "age"},
            ],
        },
        {
            "kind": "sequence_id",
            "name": "buys",
            "num_buckets": ITEMS,
            "embedding_dim": 8,
            "embedding_name": "item",
            "sequence_length": 5,
        },
        {
            "kind": "sequence_raw",
            "name": "buy_prices",
            "boundaries": [1.0, 2.0, 5.0],
            "embedding_dim": 8,
            "sequence_length": 5,
        },
    ],
    "feature_groups": [
        {"name": "deep", "type": "deep", "features": ["user_id", "item", "cate"]},
        {
            "name": "seq",
            "type": "sequence",
            "features": ["item", "cate", "clicks__item", "clicks__cate", "clicks__age"],
        },
        {"name": "buy", "type": "sequence", "features": ["item", "buys", "buy_prices"]},
    ],
    "model": {
        "type": "multi_tower_din",
        "towers": [{"group": "deep", "mlp": {"hidden_units": [16]}}],
        "din_towers": [
            {"group": "seq", "attn_mlp": {"hidden_units": [16, 8]}},
            {"group": "buy", "attn_mlp": {"hidden_units": [8]}},
        ],
        "final": {"hidden_units": [16]},
    },
    "train": {
        "sparse_optimizer": {"type": "adagrad", "lr": 0.1},
        "dense_optimizer": {"type": "adam", "lr": 0.01},
        "epochs": 2,
        "log_every_steps": 10,
    },
    "export": {"backends": list(BACKENDS), "max_abs_logit_diff": 1e-4},
}


def rows(n: int, seed: int) -> pa.Table:
    """Generated raw rows; the label follows a recent click (or a purchase) of the candidate item."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, ITEMS, n)
    clicks, buys, prices, logit = [], [], [], np.full(n, -1.5)
    for i in range(n):  # generating row by row is fine; FG is what must not loop
        k = rng.integers(0, 8)
        seen = rng.integers(0, ITEMS, k)
        if k and rng.random() < 0.5:
            seen[0] = item[i]
        age = np.round(rng.exponential(6, k), 1)
        clicks.append("|".join(f"{s}\x03{s % CATES}\x03{a:g}" for s, a in zip(seen, age)))
        logit[i] += 3.0 * float(((seen == item[i]) & (age < 3)).any())
        m = rng.integers(0, 4)
        bought = rng.integers(0, ITEMS, m)
        paid = np.round(rng.uniform(0, 8, m), 2)
        buys.append(";".join(str(b) for b in bought) if m else None)
        prices.append(";".join(f"{p:g}" for p in paid) if m else "")
        logit[i] += 1.5 * float((bought == item[i]).any())
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table(
        {
            "user_id": [f"u{u}" for u in rng.integers(0, 300, n)],
            "item": item,
            "cate": item % CATES,
            "clicks": clicks,
            "buys": buys,
            "buy_prices": prices,
            "label": label,
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_splits(
        tmp_path_factory.mktemp("numeric_history"), rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), CONFIG
    )


@pytest.mark.slow
def test_numeric_history_din_trains_exports_and_serves(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.65  # the label follows recent clicks of the candidate: the histories were read

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    table = pq.read_table(data["eval"])
    raw = table.drop_columns(["label"])
    rtp = load_backend(tmp_path / "export" / "rtp")
    kinds = {e.name: e.kind for e in rtp.spec.fg_entries()}
    assert (kinds["clicks"], kinds["buys"], kinds["buy_prices"]) == (
        "sequence",
        "sequence_id",
        "sequence_raw",
    )
    assert rtp.spec.feature("clicks__age").boundaries == [1, 3, 7, 15]
    logits = rtp.predict_raw(raw)
    assert binary_auc(np.asarray(table.column("label")), np.asarray(logits)) == pytest.approx(
        report.auc, abs=1e-4
    )
    head = raw.slice(0, 40)
    want = sigmoid(np.asarray(rtp.predict_raw(head), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(head), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
