"""Multi-value ids, a raw vector (dense and bucketized) and a combo go the whole way: a DLRM reading them
trains a few steps on generated rows, exports to jit, onnx and rtp with parity, and every backend and the
registered pyfunc class score the same raw rows (Arrow, DataFrames of many rows and of one, JSON records) as
the eager model does. The shared helpers of the export tests (small_training, raw_contract_check) do the work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from raw_contract_check import probabilities_agree
from small_training import train_steps
from torch import nn

from recpipe.batch import to_batch
from recpipe.config import RecpipeConfig, parse_config
from recpipe.data.synthetic import generate
from recpipe.export.api import export
from recpipe.export.loaders import load_backend
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.registry import build_model

BACKENDS = ("jit", "onnx", "rtp")
TRAIN_ROWS, HELD_OUT_ROWS = 2048, 1100
DIM = 8
FEATURES = [
    *({"kind": "raw", "name": f"I{i}", "normalizer": "log(x+4)"} for i in (1, 3)),
    *({"kind": "id", "name": f"C{i}", "hash_bucket_size": 200, "embedding_dim": DIM} for i in (1, 2, 5)),
    # C2 and C3 joined by \x1d, some rows only one of them, some none
    {"kind": "id", "name": "tags", "hash_bucket_size": 300, "embedding_dim": DIM, "pooling": "mean"},
    {
        "kind": "id",
        "name": "first_tag",
        "column": "tags",
        "hash_bucket_size": 300,
        "embedding_dim": DIM,
        "value_dim": 1,
    },
    # [log1p I5, log1p I6, log1p I7] as a list<float> column
    {"kind": "raw", "name": "vec", "value_dim": 3, "default": [0.0, 0.5, 1.0]},
    {
        "kind": "raw",
        "name": "vec_bucket",
        "column": "vec",
        "value_dim": 3,
        "boundaries": [1.0, 2.0, 4.0],
        "embedding_dim": DIM,
    },
    {
        "kind": "combo",
        "name": "c5_x_tags",
        "columns": ["C5", "tags"],
        "hash_bucket_size": 500,
        "embedding_dim": DIM,
    },
]


def _config() -> RecpipeConfig:
    dense = ["I1", "I3", "vec"]  # the group lists the vector; it gets vec__0, vec__1, vec__2
    sparse = [f["name"] for f in FEATURES if f["name"] not in dense]
    return parse_config(
        {
            "name": "multi_value",
            "data": {"label": "label"},
            "features": FEATURES,
            "feature_groups": [
                {"name": "dense", "type": "deep", "features": dense},
                {"name": "all", "type": "deep", "features": sparse},
            ],
            "model": {
                "type": "dlrm",
                "dense_mlp": {"hidden_units": [16, DIM]},
                "over_mlp": {"hidden_units": [16]},
                "sparse_group": "all",
            },
            "export": {"max_abs_logit_diff": 1e-4},
        }
    )


def _rows(tmp: Path) -> pa.Table:
    generate("criteo", TRAIN_ROWS + HELD_OUT_ROWS, tmp / "criteo", seed=5, max_vocab=150)
    t = pq.read_table(tmp / "criteo")
    n = t.num_rows
    pick = np.arange(n) % 4
    c2, c3 = t.column("C2").to_pylist(), t.column("C3").to_pylist()
    tags = [
        None if k == 0 else a if k == 1 or not b else f"{a}\x1d{b}" if a else b
        for k, a, b in zip(pick, c2, c3)
    ]
    ints = [np.log1p(np.maximum(pc.fill_null(t.column(f"I{i}"), 0).to_numpy(), 0)) for i in (5, 6, 7)]
    vec = pa.array(
        [None if k == 3 else [float(x) for x in v] for k, v in zip(pick, zip(*ints))], pa.list_(pa.float32())
    )
    return t.append_column("tags", pa.array(tags, pa.string())).append_column("vec", vec)


@dataclass
class _Trained:
    model: nn.Module
    spec: FeatureSpec

    def eager_logits(self, rows: pa.Table) -> np.ndarray:
        b = to_batch(FeatureGenerator(self.spec, with_labels=False)(rows), self.spec.sparse_keys())
        with torch.no_grad():
            return self.model(b.dense, b.sparse).numpy()


@pytest.mark.slow
def test_multi_value_vector_and_combo_features_train_export_and_serve(tmp_path: Path) -> None:
    cfg = _config()
    spec = build_feature_spec(cfg)
    assert spec.group("dense").dense == ["I1", "I3", "vec__0", "vec__1", "vec__2"]
    table = _rows(tmp_path)
    torch.manual_seed(0)
    model = train_steps(build_model(spec, cfg.model), spec, table.slice(0, TRAIN_ROWS), 6)
    held_out = table.slice(TRAIN_ROWS)
    fg = FeatureGenerator(spec, with_labels=False)(held_out)
    lengths = {k: set(fg.lengths[j].tolist()) for j, k in enumerate(spec.sparse_keys())}
    assert {0, 1, 2} <= lengths["tags"] and lengths["first_tag"] == {0, 1} and lengths["vec_bucket"] == {3}
    assert {0, 1, 2} <= lengths["c5_x_tags"]
    out = export(model, spec, cfg, list(BACKENDS), tmp_path / "export", held_out)
    for name in BACKENDS:
        b = out.backends[name]
        assert b.status == "ok" and b.parity.passed and b.max_abs_logit_diff < 1e-4, name
    served = load_backend(Path(out.out_dir) / "rtp").spec  # read back from the served fg.json
    assert served.feature("c5_x_tags").kind == "combo" and served == spec
    # Every backend and the pyfunc, every representation of the rows (lists in JSON and DataFrames too).
    rows = held_out.drop_columns(["label", "true_prob"]).slice(0, 24)
    probabilities_agree(
        _Trained(model, spec),
        out.out_dir,
        rows.to_pylist(),
        dict(zip(rows.schema.names, rows.schema.types)),
        BACKENDS,
    )
