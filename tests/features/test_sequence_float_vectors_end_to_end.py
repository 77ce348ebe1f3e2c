"""Histories of ``value_dim`` floats per item the whole way, on rows ``synthetic:config`` generates for the
config: a DIN group over a grouped history whose items carry an item id and two floats (a dense sub-feature of
value_dim 2: keys ``clicks__emb__0``, ``clicks__emb__1``), a second DIN group over a standalone ``sequence_raw``
of eight floats per item (``dense: true``); the grouped history also holds 0 to 3 tag ids per item (value_dim 0, pooled by mean) queried by a shop's embedding of four and a raw vector of four. A MultiTowerDIN trained a few steps,
exported to jit, onnx, rtp and aoti with parity, every backend scoring raw rows alike, and the registered
pyfunc class scoring a DataFrame to the same probabilities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.config import parse_config
from recpipe.data.synthetic import generate
from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend
from recpipe.tracking.pyfunc import RawRowsModel

TRAIN_ROWS, EVAL_ROWS, BATCH = 3000, 1000, 300
BACKENDS = ("jit", "onnx", "rtp", "aoti")
ITEMS = 40
DIN = {"attn_mlp": {"hidden_units": [8]}}

CONFIG = {
    "name": "float_vector_histories",
    "data": {"label": "label", "batch_size": BATCH, "on_bad_row": "error"},
    "features": [
        {"kind": "id", "name": "user_id", "hash_bucket_size": 100, "embedding_dim": 8},
        {"kind": "id", "name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
        {"kind": "id", "name": "shop", "num_buckets": 10, "embedding_dim": 4},
        {"kind": "id", "name": "tag", "num_buckets": 30, "embedding_dim": 4},
        {"kind": "raw", "name": "taste", "value_dim": 4},
        {
            "kind": "sequence",
            "name": "clicks",
            "sequence_length": 8,
            "sub_features": [
                {"name": "item", "num_buckets": ITEMS, "embedding_dim": 8},
                {"name": "emb", "dense": True, "value_dim": 2, "default": 0.5},
                # several ids per item (TorchEasyRec's value_dim 0), each item the mean of its ids' rows
                {"name": "tag", "num_buckets": 30, "embedding_dim": 4, "value_dim": 0, "pooling": "mean"},
            ],
        },
        {"kind": "sequence_raw", "name": "tastes", "dense": True, "value_dim": 8, "sequence_length": 6},
    ],
    "feature_groups": [
        {"name": "deep", "type": "deep", "features": ["user_id", "item"]},
        {
            "name": "seq",
            "type": "sequence",
            "features": ["item", "tag", "clicks__item", "clicks__tag", "clicks__emb"],
        },
        {"name": "taste_seq", "type": "sequence", "features": ["shop", "taste", "tastes"]},
    ],
    "model": {
        "type": "multi_tower_din",
        "towers": [{"group": "deep", "mlp": {"hidden_units": [16]}}],
        "din_towers": [{"group": "seq", **DIN}, {"group": "taste_seq", **DIN}],
        "final": {"hidden_units": [16]},
    },
    "train": {
        "sparse_optimizer": {"type": "adagrad", "lr": 0.5},
        "dense_optimizer": {"type": "adam", "lr": 0.03},
        "epochs": 3,
        "log_every_steps": 10,
    },
    "export": {"backends": list(BACKENDS), "max_abs_logit_diff": 1e-4},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    # One generated click model (one seed), its first chunk to train on and its second to evaluate.
    gen = tmp_path_factory.mktemp("generated")
    generate(
        "config", TRAIN_ROWS + EVAL_ROWS, gen, seed=1, chunk_rows=TRAIN_ROWS, config=parse_config(CONFIG)
    )
    train_rows, eval_rows = (pq.read_table(p) for p in sorted(gen.glob("part-*.parquet")))
    assert (train_rows.num_rows, eval_rows.num_rows) == (TRAIN_ROWS, EVAL_ROWS)
    return write_splits(tmp_path_factory.mktemp("float_vectors"), train_rows, eval_rows, CONFIG)


@pytest.mark.slow
def test_float_vector_histories_train_export_and_serve(data: dict[str, str], tmp_path: Path) -> None:
    table = pq.read_table(data["eval"])
    # The generated histories hold two floats per item, as FG reads them.
    click = next(h for h in table.column("clicks").to_pylist() if h).split("|")[0]
    taste = next(h for h in table.column("tastes").to_pylist() if h).split(";")[0]
    assert click.split("\x03")[1].count("\x1d") == 1 and taste.count("\x1d") == 7
    # and 0 to 3 tag ids per item, an empty item among them
    tags = [i.split("\x03")[2] for h in table.column("clicks").to_pylist() if h for i in h.split("|")]
    assert {len(t.split("\x1d")) if t else 0 for t in tags} == {0, 1, 2, 3}

    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.55  # the planted model (oracle AUC 0.8): user, item and shop effects, the history

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])

    rtp = load_backend(tmp_path / "export" / "rtp")
    floats = {k for k in rtp.spec.sparse_keys() if rtp.spec.feature(k).item_float}
    assert floats == {"clicks__emb__0", "clicks__emb__1", *(f"tastes__{i}" for i in range(8))}
    (folder,) = (tmp_path / "export").glob("versions/*/rtp")
    plan = {p["name"]: p for p in json.loads((folder / "sparse.json").read_text())["plan"]}
    assert plan["seq__values"]["floats"] == ["clicks__emb__0", "clicks__emb__1"]
    assert plan["taste_seq__values"]["floats"] == [f"tastes__{i}" for i in range(8)]
    assert plan["seq__values"]["items"] == {"clicks__tag": ["clicks__tag__item_lengths", "mean"]}
    assert json.loads((folder / "sparse.json").read_text())["version"] == 5

    raw = table.drop_columns(["label", "true_prob"])
    head = raw.slice(0, 40)
    want = sigmoid(np.asarray(rtp.predict_raw(head), np.float64))
    for name in ("jit", "onnx", "aoti"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(head), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    model = RawRowsModel()
    model._scorer = rtp  # what load_context sets from the registered artifact
    np.testing.assert_allclose(np.asarray(model.predict(None, head.to_pandas())), want, atol=1e-6)

    # Every float of an item is read: the same rows with the second value of every item moved score apart.
    moved = head.set_column(
        head.schema.get_field_index("tastes"),
        "tastes",
        pa.array([_moved(h) for h in head.column("tastes").to_pylist()]),
    )
    assert not np.allclose(np.asarray(rtp.predict_raw(moved)), np.asarray(rtp.predict_raw(head)), atol=1e-4)
    # and every id of an item: the same rows with each item's last tag id dropped score apart
    fewer = head.set_column(
        head.schema.get_field_index("clicks"),
        "clicks",
        pa.array([_fewer_tags(h) for h in head.column("clicks").to_pylist()]),
    )
    assert not np.allclose(np.asarray(rtp.predict_raw(fewer)), np.asarray(rtp.predict_raw(head)), atol=1e-4)


def _moved(history: str | None) -> str | None:
    """Every item's second float plus 50."""
    if not history:
        return history
    items = [item.split("\x1d") for item in history.split(";")]
    return ";".join("\x1d".join([v[0], f"{float(v[1]) + 50:g}", *v[2:]]) for v in items)


def _fewer_tags(history: str | None) -> str | None:
    """Every item of two or more tag ids without its last one."""
    if not history:
        return history
    items = [item.split("\x03") for item in history.split("|")]
    return "|".join(
        "\x03".join([*v[:2], "\x1d".join(v[2].split("\x1d")[:-1]) if "\x1d" in v[2] else v[2]]) for v in items
    )
