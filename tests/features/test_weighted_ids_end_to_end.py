"""Weighted ids (TorchEasyRec's ``weighted: true``) the whole way: rows whose tags carry weights (``k:w`` text,
sum-pooled, and a Parquet list of ``k:w`` texts, mean-pooled), a DLRM trained a few steps on them, exported to
every backend with parity (jit, onnx, rtp, aoti: each applies the weights), the backends scoring raw rows alike
and the registered pyfunc class scoring a DataFrame the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend
from recpipe.stages import evaluate, train
from recpipe.tracking.pyfunc import RawRowsModel

TRAIN_ROWS, EVAL_ROWS, BATCH = 2000, 400, 200
BACKENDS = ("jit", "onnx", "rtp", "aoti")
TAGS = 12

CONFIG = {
    "name": "weighted_ids",
    "data": {"label": "label", "batch_size": BATCH},
    "features": [
        {"kind": "id", "name": "item", "num_buckets": 50, "embedding_dim": 8},
        {"kind": "raw", "name": "price"},
        {"kind": "id", "name": "tags", "num_buckets": TAGS, "weighted": True, "embedding_dim": 8},
        {
            "kind": "id",
            "name": "prefs",
            "hash_bucket_size": 40,
            "weighted": True,
            "pooling": "mean",
            "embedding_dim": 8,
        },
    ],
    "feature_groups": [{"name": "sparse", "type": "deep", "features": ["item", "tags", "prefs"]}],
    "model": {
        "type": "dlrm",
        "dense_mlp": {"hidden_units": [8]},
        "over_mlp": {"hidden_units": [16]},
        "sparse_group": "sparse",
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
    """Rows whose label follows the weight of the user's tag 0..3 (a weight only the weighted pooling sees)."""
    rng = np.random.default_rng(seed)
    tags, prefs, signal = [], [], np.zeros(n)
    for i in range(n):  # generating the data row by row is fine; FG is what must not loop
        ids = rng.choice(TAGS, rng.integers(0, 4), replace=False)
        w = np.round(rng.uniform(0.1, 2.0, ids.size), 2)
        tags.append("\x1d".join(f"{t}:{x}" for t, x in zip(ids, w)))
        signal[i] = w[ids < 4].sum()
        k = rng.integers(0, 3)
        prefs.append([f"p{p}:{np.round(rng.uniform(0, 1), 2)}" for p in rng.choice(8, k, replace=False)])
    logit = 2.5 * signal - 1.0
    label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table(
        {
            "item": rng.integers(0, 50, n),
            "price": rng.uniform(0, 1, n),
            "tags": tags,
            "prefs": pa.array(prefs, pa.list_(pa.string())),
            "label": label,
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_splits(tmp_path_factory.mktemp("weighted"), rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), CONFIG)


@pytest.mark.slow
def test_weighted_ids_train_export_every_backend_and_serve(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.65  # the label follows the tags' weights: the model must have pooled by them

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    raw = pq.read_table(data["eval"]).drop_columns(["label"]).slice(0, 40)
    rtp = load_backend(tmp_path / "export" / "rtp")
    assert rtp.spec.feature("tags").weights_key == "tags__weights"
    want = sigmoid(np.asarray(rtp.predict_raw(raw), np.float64))
    for name in ("jit", "onnx", "aoti"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(raw), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    # The weights matter at serving: the same rows with every weight doubled score otherwise.
    doubled = raw.set_column(
        raw.schema.get_field_index("tags"),
        "tags",
        pa.array(
            [
                "\x1d".join(f"{p.split(':')[0]}:{2 * float(p.split(':')[1])}" for p in t.split("\x1d") if p)
                for t in raw.column("tags").to_pylist()
            ]
        ),
    )
    assert not np.allclose(sigmoid(np.asarray(rtp.predict_raw(doubled), np.float64)), want, atol=1e-4)
    model = RawRowsModel()
    model._scorer = rtp  # what load_context sets from the registered artifact
    np.testing.assert_allclose(np.asarray(model.predict(None, raw.to_pandas())), want, atol=1e-6)


@pytest.mark.slow
def test_weighted_tables_shard_over_two_gloo_ranks(data: dict[str, str], tmp_path: Path) -> None:
    """DistributedModelParallel shards the weighted EmbeddingBagCollection (two CPU ranks, gloo) and the
    checkpoint evaluates in one process as the one-rank run's does."""
    for name, nproc in (("one", 1), ("two", 2)):
        ran = train.run(
            config_path=data["config"],
            train_dir=data["train"],
            eval_dir=data["eval"],
            out_dir=str(tmp_path / name),
            nproc_per_node=nproc,
        )
        assert ran.world_size == nproc
    scores = [
        evaluate.run(checkpoint=str(tmp_path / n), data_dir=data["eval"], out=str(tmp_path / f"{n}.json")).auc
        for n in ("one", "two")
    ]
    assert scores[1] > 0.65 and scores[1] == pytest.approx(scores[0], abs=0.02)
