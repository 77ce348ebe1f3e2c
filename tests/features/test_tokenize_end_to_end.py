"""Kind tokenize the whole way: titles whose label follows one word, a DLRM trained a few steps on their token
ids (a BPE tokenizer.json built here, lower-cased first), exported to jit, onnx and rtp with parity, the tokenizer
file deleted, and every backend scoring raw rows alike from its own fg.json (aoti left out: its C++ compile
takes minutes; it scores FG's tensors as jit does). Marked slow: 19 s on 2 busy cores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits
from tokenizer_files import write_bpe

from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend

TRAIN_ROWS, EVAL_ROWS, BATCH = 1600, 400, 200
BACKENDS = ("jit", "onnx", "rtp")
WORDS = np.array(["abc", "efg", "hij", "xyz", "ABC", "Xyz", "klm"])


def config(vocab_file: Path) -> dict:
    return {
        "name": "tokenize",
        "data": {"label": "label", "batch_size": BATCH},
        "features": [
            {"kind": "id", "name": "item", "num_buckets": 20, "embedding_dim": 8},
            {"kind": "raw", "name": "price"},
            {
                "kind": "tokenize",
                "name": "title_token",
                "column": "title",
                "vocab_file": str(vocab_file),
                "embedding_dim": 8,
                "pooling": "mean",
                "text_normalizer": {"norm_options": ["TEXT_UPPER2LOWER"]},
            },
        ],
        "feature_groups": [{"name": "sparse", "type": "deep", "features": ["item", "title_token"]}],
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
    """Titles of 0..3 words; a click is likelier when the title holds "xyz" in any case."""
    rng = np.random.default_rng(seed)
    words = WORDS[rng.integers(0, WORDS.size, (n, 3))]
    count = rng.integers(0, 4, n)
    titles = [" ".join(w[:k]) for w, k in zip(words, count)]  # generating rows in Python is fine; FG is not
    has = np.array(["xyz" in t.lower() for t in titles])
    label = (rng.random(n) < np.where(has, 0.8, 0.15)).astype(np.int64)
    title = pa.array([t or None for t in titles])
    return pa.table(
        {"item": rng.integers(0, 20, n), "price": rng.uniform(0, 1, n), "title": title, "label": label}
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tokenize")
    vocab = write_bpe(root / "tokenizer.json")
    return write_splits(root, rows(TRAIN_ROWS, 1), rows(EVAL_ROWS, 2), config(vocab))


@pytest.mark.slow
def test_tokenize_trains_exports_and_serves_without_its_file(data: dict[str, str], tmp_path: Path) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS and report.auc > 0.7  # the label follows a token

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])
    Path(data["config"]).with_name("tokenizer.json").unlink()  # fg.json carries the tokenizer

    raw = pq.read_table(data["eval"]).drop_columns(["label"]).slice(0, 50)
    rtp = load_backend(tmp_path / "export" / "rtp")
    want = sigmoid(np.asarray(rtp.predict_raw(raw), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(raw), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    # The token matters at serving, in any case: "XYZ" scores as "xyz", above a title without it.
    probe = pa.table({"item": [3, 3, 3], "price": [0.5] * 3, "title": ["XYZ", "xyz", "klm"]})
    p = sigmoid(np.asarray(rtp.predict_raw(probe), np.float64))
    assert p[0] == pytest.approx(p[1], abs=1e-6) and p[0] > p[2] + 0.2


@pytest.mark.slow
def test_tokens_as_sequence_feeds_a_din_tower_trains_exports_and_serves(tmp_path: Path) -> None:
    """tokens_as_sequence: the title's tokens a history (one token an item, the first 4 kept) that a DIN tower
    attends over with a pooled tokenize feature of the same table as its query; a click likelier when the
    query word is in the title. Trained, exported to jit, onnx and rtp with parity, served from fg.json."""
    vocab = write_bpe(tmp_path / "tokenizer.json")

    def seq_rows(n: int, seed: int) -> pa.Table:
        rng = np.random.default_rng(seed)
        t = rows(n, seed)
        query = WORDS[rng.integers(0, 4, n)]
        title = t["title"].to_pylist()
        hit = np.array([bool(s) and q in s.lower() for q, s in zip(query, title)])
        label = (rng.random(n) < np.where(hit, 0.85, 0.1)).astype(np.int64)
        return t.set_column(t.schema.get_field_index("label"), "label", pa.array(label)).append_column(
            "query", pa.array(query)
        )

    seq = {"kind": "tokenize", "name": "title_seq", "column": "title", "vocab_file": str(vocab), "embedding_dim": 8,
           "embedding_name": "tokens", "tokens_as_sequence": True, "sequence_length": 4,
           "text_normalizer": {"norm_options": ["TEXT_UPPER2LOWER"]}}  # fmt: skip
    query = {"kind": "tokenize", "name": "query_tokens", "column": "query", "vocab_file": str(vocab),
             "embedding_dim": 8, "embedding_name": "tokens"}  # fmt: skip
    cfg = config(vocab)
    cfg["features"] = [cfg["features"][0], cfg["features"][1], query, seq]
    cfg["feature_groups"] = [
        {"name": "deep", "type": "deep", "features": ["item", "price"]},
        {"name": "seq", "type": "sequence", "features": ["query_tokens", "title_seq"]},
    ]
    cfg["model"] = {
        "type": "multi_tower_din",
        "towers": [{"group": "deep", "mlp": {"hidden_units": [8]}}],
        "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [8]}}],
        "final": {"hidden_units": [8]},
    }
    (tmp_path / "rows").mkdir()
    data = write_splits(tmp_path / "rows", seq_rows(TRAIN_ROWS, 1), seq_rows(EVAL_ROWS, 2), cfg)
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS and report.auc > 0.65  # the label follows the query word in the title

    export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])
    vocab.unlink()  # fg.json carries the tokenizer
    raw = pq.read_table(data["eval"]).drop_columns(["label"]).slice(0, 50)
    rtp = load_backend(tmp_path / "export" / "rtp")
    assert [s.kind for s in rtp.spec.sequences] == ["tokenize"]
    want = sigmoid(np.asarray(rtp.predict_raw(raw), np.float64))
    for name in ("jit", "onnx"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(raw), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
