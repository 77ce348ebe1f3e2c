"""MultiTowerDIN over a history whose sub-features differ in embedding dim (TorchEasyRec allows it; its
multi_tower_din_mock configs do it): items are ``clicks__item (16) | clicks__cate (8) | clicks__age (8)``, the
sequence tables live in one EmbeddingCollection per dim, the query ``item (16) | cate (8)`` is zero-padded to
the item width 32. Rows from ``synthetic:config``; trained, resumed, sharded over two gloo ranks, exported to
every backend with parity, raw rows scored alike by every backend and the registered pyfunc class."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from stage_flow import export_with_parity, train_and_evaluate, write_splits

from recpipe.config import parse_config
from recpipe.data.synthetic.config import build_model, make_chunk
from recpipe.eval.metrics import sigmoid
from recpipe.export.loaders import load_backend
from recpipe.features.build import build_feature_spec
from recpipe.models.registry import build_model as build_ranking_model
from recpipe.stages import evaluate, train
from recpipe.tracking.pyfunc import RawRowsModel

TRAIN_ROWS, EVAL_ROWS, BATCH = 3000, 800, 250
BACKENDS = ("jit", "onnx", "rtp", "aoti")
ITEMS, CATES = 60, 10

CONFIG = {
    "name": "mixed_dims",
    "data": {"label": "label", "batch_size": BATCH},
    "features": [
        {"kind": "id", "name": "user_id", "hash_bucket_size": 100, "embedding_dim": 8},
        {"kind": "id", "name": "item", "num_buckets": ITEMS, "embedding_dim": 16},
        {"kind": "id", "name": "cate", "num_buckets": CATES, "embedding_dim": 8},
        {
            "kind": "sequence",
            "name": "clicks",
            "sequence_length": 10,
            "sub_features": [
                {"name": "item", "num_buckets": ITEMS, "embedding_dim": 16},
                {"name": "cate", "num_buckets": CATES, "embedding_dim": 8},
                {"name": "age", "boundaries": [1, 3, 7, 15], "embedding_dim": 8, "embedding_name": "age"},
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
        "epochs": 2,
        "log_every_steps": 10,
    },
    "export": {"backends": list(BACKENDS), "max_abs_logit_diff": 1e-4},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    model = build_model(parse_config(CONFIG, "mixed_dims"), seed=5, rows=TRAIN_ROWS)
    train_rows, eval_rows = (
        make_chunk(model, 5, chunk, n)[0] for chunk, n in ((0, TRAIN_ROWS), (1, EVAL_ROWS))
    )
    return write_splits(tmp_path_factory.mktemp("mixed_dims"), train_rows, eval_rows, CONFIG)


def test_the_history_tables_take_one_collection_per_dim_and_the_query_is_padded(data: dict[str, str]) -> None:
    cfg = parse_config(CONFIG, "mixed_dims")
    spec = build_feature_spec(cfg)
    model = build_ranking_model(spec, cfg.model)
    tables = model.embeddings.tables()
    assert sorted(tables["ec"]) == ["item"] and sorted(tables["ec_by_dim.d8"]) == ["age", "cate"]
    din = model.dense_module().din["seq"]
    assert din.pad == 8 and din.attention.out_features == 32  # query 16 + 8, items 16 + 8 + 8


@pytest.mark.slow
def test_mixed_dim_history_trains_exports_every_backend_and_serves(
    data: dict[str, str], tmp_path: Path
) -> None:
    checkpoint, report = train_and_evaluate(data, tmp_path)
    assert report.rows == EVAL_ROWS
    assert report.auc > 0.6  # the planted click model reads the history: it must have been learned

    exported = export_with_parity(checkpoint, BACKENDS, tmp_path / "export", data["eval"])
    rtp = load_backend(tmp_path / "export" / "rtp")
    sparse = json.loads((Path(exported.backends["rtp"].folder) / "sparse.json").read_text())
    dims = {t["name"]: t["dim"] for t in sparse["tables"]}
    assert {k: dims[k] for k in ("item", "cate", "age")} == {"item": 16, "cate": 8, "age": 8}
    raw = pq.read_table(data["eval"]).drop_columns(["label"]).slice(0, 40)
    want = sigmoid(np.asarray(rtp.predict_raw(raw), np.float64))
    for name in ("jit", "onnx", "aoti"):
        got = sigmoid(np.asarray(load_backend(tmp_path / "export" / name).predict_raw(raw), np.float64))
        np.testing.assert_allclose(got, want, atol=2.5e-5, err_msg=name)
    model = RawRowsModel()
    model._scorer = rtp  # what load_context sets from the registered artifact
    np.testing.assert_allclose(np.asarray(model.predict(None, raw.to_pandas())), want, atol=1e-6)


@pytest.mark.slow
def test_two_gloo_ranks_shard_both_collections_and_resume(data: dict[str, str], tmp_path: Path) -> None:
    """DistributedModelParallel plans and shards the two EmbeddingCollections (two CPU ranks, gloo), the run
    resumes from its checkpoint, and the checkpoint evaluates in one process."""
    out = tmp_path / "two"
    for steps, resume in ((4, "never"), (8, "must")):
        ran = train.run(
            config_path=data["config"],
            train_dir=data["train"],
            eval_dir=data["eval"],
            out_dir=str(out),
            nproc_per_node=2,
            overrides={"train.max_steps": steps},
            resume=resume,
        )
        assert ran.world_size == 2
    result = json.loads((out / "train_result.json").read_text())
    assert result["resumed_from"].endswith("ckpt-4")
    # The planner placed both collections' tables row-wise over the two ranks (plan.txt: the whole plan).
    placed: dict[str, tuple[str, str, str]] = {}  # table → (module, sharding type, ranks)
    module = ""
    for line in (out / "plan.txt").read_text().splitlines():
        if line.startswith("module: "):
            module = line.split(".embeddings.")[-1]
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 4 and cells[1] in ("row_wise", "table_wise"):
            placed[cells[0]] = (module, cells[1], cells[3])
    assert {t: placed[t] for t in ("item", "cate", "age")} == {
        "item": ("ec", "row_wise", "[0, 1]"),
        "cate": ("ec_by_dim.d8", "row_wise", "[0, 1]"),
        "age": ("ec_by_dim.d8", "row_wise", "[0, 1]"),
    }
    report = evaluate.run(checkpoint=str(out), data_dir=data["eval"], out=str(tmp_path / "two.json"))
    assert report.rows == EVAL_ROWS and 0.0 < report.auc < 1.0  # 8 steps: loaded and scored, not yet learned
