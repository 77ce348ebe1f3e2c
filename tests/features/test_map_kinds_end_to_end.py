"""The kinds lookup, match, expr and overlap the whole way, as tests/models/test_toy_model.py takes a toy kind:
generated rows (a user's category click counts as a map, a two-level category^brand map, numbers, query and
title terms, clicks by the bucket of a number: a lookup keyed by ``feature:a_bucket``), a DLRM trained a few steps on them, exported to jit, onnx and rtp with parity, the served rtp
folder scoring raw rows to the AUC evaluate measured, and the registered pyfunc class scoring a DataFrame and
JSON records to the same probabilities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.auc import binary_auc
from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend
from recpipe.tracking.pyfunc import RawRowsModel

TRAIN_ROWS, EVAL_ROWS, BATCH = 3000, 600, 200
BACKENDS = ("jit", "onnx", "rtp")
CATES, BRANDS, WORDS = 12, 6, 20

CONFIG = {
    "name": "map_kinds",
    "data": {"label": "label", "batch_size": BATCH},
    "features": [
        {"kind": "id", "name": "cate", "hash_bucket_size": 50, "embedding_dim": 8},
        {"kind": "lookup", "name": "cate_clicks", "map": "kv_cate", "key": "cate", "normalizer": "log(x+1)"},
        {
            "kind": "lookup",
            "name": "cate_clicks_bucket",
            "map": "kv_cate",
            "key": "cate",
            "boundaries": [0.5, 1.5, 3.5],
            "embedding_dim": 8,
        },
        # TorchEasyRec's FG_DAG "feature:X": clicks at the bucket of the row's a, which FG derives from a.
        {"kind": "raw", "name": "a_bucket", "column": "a", "boundaries": [1.0, 2.0], "embedding_dim": 8},
        {"kind": "lookup", "name": "a_bucket_clicks", "map": "kv_bucket", "key": "feature:a_bucket"},
        {"kind": "match", "name": "cate_brand", "nested_map": "kkv", "pkey": "cate", "skey": "brand"},
        {
            "kind": "match",
            "name": "brand_any",
            "nested_map": "kkv",
            "pkey": "ALL",
            "skey": "brand",
            "hash_bucket_size": 40,
            "embedding_dim": 8,
        },
        {"kind": "expr", "name": "price_ratio", "expression": "a / (1 + b) + (a > b ? 1 : 0)"},
        {
            "kind": "expr",
            "name": "price_bucket",
            "expression": "max(a, b) - min(a, b)",
            "boundaries": [0.5, 1.0, 2.0],
            "embedding_dim": 8,
        },
        {
            "kind": "overlap",
            "name": "term_ratio",
            "query": "query",
            "title": "title",
            "method": "query_common_ratio",
        },
        {
            "kind": "overlap",
            "name": "term_contain",
            "query": "query",
            "title": "title",
            "method": "is_contain",
            "boundaries": [0.5],
            "embedding_dim": 8,
        },
    ],
    "feature_groups": [
        {
            "name": "sparse",
            "type": "deep",
            "features": [
                "cate",
                "cate_clicks_bucket",
                "a_bucket",
                "brand_any",
                "price_bucket",
                "term_contain",
            ],
        }
    ],
    # DLRM's bottom MLP reads every dense column (cate_clicks, cate_brand, price_ratio, term_ratio).
    "model": {
        "type": "dlrm",
        "dense_mlp": {"hidden_units": [16, 8]},
        "over_mlp": {"hidden_units": [16]},
        "sparse_group": "sparse",
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
    """Generated raw rows; the label follows the user's clicks of the candidate's category."""
    rng = np.random.default_rng(seed)
    cate = rng.integers(0, CATES, n)
    brand = rng.integers(0, BRANDS, n)
    kv, kkv, query, title, clicks = [], [], [], [], np.zeros(n)
    for i in range(n):  # generating the data row by row is fine; FG is what must not loop
        seen = rng.choice(CATES, rng.integers(0, 5), replace=False)
        counts = rng.integers(1, 6, seen.size)
        kv.append("\x1d".join(f"c{c}:{k}" for c, k in zip(seen, counts)))
        clicks[i] = counts[seen == cate[i]].sum()
        kkv.append(
            "|".join(f"c{c}^" + ",".join(f"b{b}:{rng.integers(1, 4)}" for b in range(3)) for c in seen)
        )
        q = rng.choice(WORDS, rng.integers(1, 3), replace=False)
        t = rng.choice(WORDS, rng.integers(1, 6), replace=False)
        query.append("\x1d".join(f"w{w}" for w in q))
        title.append("\x1d".join(f"w{w}" for w in t))
    a = np.round(rng.uniform(0, 3, n), 3)
    b = np.where(rng.random(n) < 0.1, np.nan, np.round(rng.uniform(0, 3, n), 3))  # pandas' missing value
    # Counts by bucket of a (0, 1, 2; its own generator, so the other columns are as before), the clicks at
    # a's bucket (b_clicks) part of the label too: the lookup keyed by feature:a_bucket must be read.
    extra = np.random.default_rng(seed + 100)
    maps = [
        dict(zip(extra.choice(3, extra.integers(0, 3), replace=False), extra.integers(1, 6, 3)))
        for _ in range(n)
    ]
    kv_bucket = ["\x1d".join(f"{k}:{v}" for k, v in m.items()) for m in maps]
    b_clicks = np.array([m.get(k, 0) for m, k in zip(maps, np.searchsorted([1.0, 2.0], a, side="right"))])
    logit = 0.8 * clicks - 1.5 + 0.3 * (a - np.nan_to_num(b)) + 0.4 * (b_clicks - 1.5)
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table(
        {
            "cate": [f"c{c}" for c in cate],
            "brand": [f"b{x}" for x in brand],
            "kv_cate": kv,
            "kkv": kkv,
            "kv_bucket": kv_bucket,
            "a": a,
            "b": pa.array(b, mask=np.isnan(b)),
            "query": query,
            "title": title,
            "label": label,
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_splits(tmp_path_factory.mktemp("map_kinds"), rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), CONFIG)


@pytest.mark.slow
def test_lookup_match_expr_overlap_train_export_and_serve(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.7  # the label follows the looked-up clicks: the model must have read them

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    table = pq.read_table(data["eval"])
    raw = table.drop_columns(["label"])
    rtp = load_backend(tmp_path / "export" / "rtp")
    kinds = {e.name: e.kind for e in rtp.spec.fg_entries()}
    assert rtp.spec.input_columns().count("a") == 1 and "feature:a_bucket" not in rtp.spec.input_columns()
    assert rtp.spec.dense[rtp.spec.dense_names().index("a_bucket_clicks")].inputs == ["feature:a_bucket"]
    assert {kinds["cate_clicks"], kinds["cate_brand"], kinds["price_ratio"], kinds["term_contain"]} == {
        "lookup",
        "match",
        "expr",
        "overlap",
    }
    logits = rtp.predict_raw(raw)
    assert binary_auc(np.asarray(table.column("label")), np.asarray(logits)) == pytest.approx(
        report.auc, abs=1e-4
    )

    # Every backend scores the same raw rows alike, and the registered pyfunc class (over rtp) takes a
    # DataFrame and JSON records to the same probabilities.
    head = raw.slice(0, 40)
    want = sigmoid(np.asarray(rtp.predict_raw(head), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(head), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    model = RawRowsModel()
    model._scorer = rtp  # what load_context sets from the registered artifact
    records = json.loads(json.dumps(head.to_pylist()))
    for frame in (head.to_pandas(), pd.DataFrame.from_records(records)):
        np.testing.assert_allclose(np.asarray(model.predict(None, frame)), want, atol=1e-6)
