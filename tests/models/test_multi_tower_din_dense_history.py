"""MultiTowerDIN over a history whose items carry a float each the whole way (TorchEasyRec's raw_feature without
boundaries inside a sequence_feature: the days since each click), jagged from FG to the dense graph: no table,
one more column of every item beside its embeddings (TorchEasyRec's SequenceEmbeddingGroupImpl), the query
zero-padded to the item width (DINEncoder). Trained a few steps, exported to jit, onnx and rtp with parity, raw
rows scored by every backend alike."""

from __future__ import annotations

import json
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
    "name": "dense_history",
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
                {"name": "age", "dense": True, "default": 1.0},
            ],
        },
    ],
    "feature_groups": [
        {"name": "deep", "type": "deep", "features": ["user_id", "item", "cate"]},
        {
            "name": "seq",
            "type": "sequence",
            "features": ["item", "cate", "clicks__item", "clicks__cate", "clicks__age"],
        },
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
        "epochs": 3,
        "log_every_steps": 10,
    },
    "export": {"backends": list(BACKENDS), "max_abs_logit_diff": 1e-4},
}


def rows(n: int, seed: int) -> pa.Table:
    """Generated raw rows; the label follows a recent click of the candidate item (the age decides)."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, ITEMS, n)
    clicks, logit = [], np.full(n, -1.5)
    for i in range(n):  # generating row by row is fine; FG is what must not loop
        k = rng.integers(0, 8)
        seen = rng.integers(0, ITEMS, k)
        if k and rng.random() < 0.6:
            seen[rng.integers(0, k)] = item[i]
        age = np.round(np.minimum(rng.exponential(0.3, k), 1.0), 2)  # months since the click
        # an empty age is the default (1.0): an old click
        cells = ["" if rng.random() < 0.1 else f"{a:g}" for a in age]
        clicks.append("|".join(f"{s}\x03{s % CATES}\x03{c}" for s, c in zip(seen, cells)))
        recent = np.array([c != "" and float(c) < 0.3 for c in cells], bool)
        logit[i] += 3.0 * float(((seen == item[i]) & recent).any())
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table(
        {
            "user_id": [f"u{u}" for u in rng.integers(0, 300, n)],
            "item": item,
            "cate": item % CATES,
            "clicks": clicks,
            "label": label,
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_splits(
        tmp_path_factory.mktemp("dense_history"), rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), CONFIG
    )


@pytest.mark.slow
def test_dense_history_din_trains_exports_and_serves(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.6  # the label follows recent clicks of the candidate: the histories were read

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    rtp_dir = tmp_path / "export" / "rtp"
    (folder,) = (tmp_path / "export").glob("versions/*/rtp")
    sparse = json.loads((folder / "sparse.json").read_text())
    values = [p for p in sparse["plan"] if p["name"] == "seq__values"]
    assert values[0]["floats"] == ["clicks__age"] and sparse["version"] == 3
    assert "" not in {t["name"] for t in sparse["tables"]}  # the float key has no table

    table = pq.read_table(data["eval"])
    raw = table.drop_columns(["label"])
    rtp = load_backend(rtp_dir)
    assert rtp.spec.feature("clicks__age").item_float
    logits = rtp.predict_raw(raw)
    assert binary_auc(np.asarray(table.column("label")), np.asarray(logits)) == pytest.approx(
        report.auc, abs=1e-4
    )
    head = raw.slice(0, 40)
    want = sigmoid(np.asarray(rtp.predict_raw(head), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(head), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    # The age is read: the same rows with every click a month old score differently.
    old = raw.set_column(
        raw.schema.get_field_index("clicks"),
        "clicks",
        pa.array(
            [None if c is None else _aged(c) for c in head.column("clicks").to_pylist()]
            + raw.column("clicks").to_pylist()[40:]
        ),
    ).slice(0, 40)
    assert not np.allclose(np.asarray(rtp.predict_raw(old)), np.asarray(rtp.predict_raw(head)), atol=1e-3)


def _aged(history: str) -> str:
    return "|".join(item.rsplit("\x03", 1)[0] + "\x031" for item in history.split("|")) if history else ""
