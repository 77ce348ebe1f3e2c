"""A model added the way the registry documents (one file, tests/models/toy_model.py, and one registry
line) trains, evaluates and exports through the normal stages, with parity on every backend.

The registry line is an entry point (group ``recpipe.models``), as a package outside recpipe would
declare it, because the train stage runs the trainer in a fresh process: an entry in the ``MODELS``
dict of this process would not reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from recpipe.auc import binary_auc
from recpipe.config import load_config
from recpipe.config.root import model_names
from recpipe.data.synthetic import generate
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import read_manifest
from recpipe.stages import evaluate, export, train

TRAIN_ROWS, EVAL_ROWS, BATCH = 4000, 1000, 200
REGISTRY_LINE = "toy = tests.models.toy_model"


CONFIG = {
    "name": "toy",
    "data": {"label": "label", "batch_size": BATCH, "oracle_column": "true_prob"},
    "features": [
        *({"kind": "raw", "name": f"I{i}", "normalizer": "log(x+3)"} for i in range(1, 14)),
        *({"kind": "id", "name": f"C{i}", "hash_bucket_size": 500, "embedding_dim": 4} for i in range(1, 27)),
    ],
    "feature_groups": [
        {
            "name": "wide",
            "type": "deep",
            "features": [*(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))],
        }
    ],
    "model": {"type": "toy", "group": "wide"},
    "train": {
        "sparse_optimizer": {"type": "adagrad", "lr": 0.1},
        "dense_optimizer": {"type": "adam", "lr": 0.01},
        "epochs": 2,
        "log_every_steps": 10,
    },
    "export": {"backends": ["jit", "onnx", "rtp"], "max_abs_logit_diff": 1e-4},
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("toy")
    generate("criteo", TRAIN_ROWS + EVAL_ROWS, root / "all", seed=2, max_vocab=300)
    table = pq.read_table(root / "all")
    for name, part in (("train", table.slice(0, TRAIN_ROWS)), ("eval", table.slice(TRAIN_ROWS))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    (root / "toy.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return {
        "root": str(root),
        "config": str(root / "toy.yaml"),
        "train": str(root / "train"),
        "eval": str(root / "eval"),
    }


def test_unregistered_the_model_is_unknown(toy: dict[str, str]) -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown model type 'toy'; known: \['dbmtl', 'deepfm', 'dlrm', 'mmoe', 'multi_tower', 'multi_tower_din', 'ple', 'wide_and_deep'\]",
    ):
        load_config(toy["config"])


@pytest.mark.slow
def test_a_toy_model_trains_evaluates_and_exports(
    toy: dict[str, str], declare_model: Callable[[str], None], tmp_path: Path
) -> None:
    declare_model(REGISTRY_LINE)
    assert "toy" in model_names() and type(load_config(toy["config"]).model).__name__ == "ToyConfig"
    checkpoint = tmp_path / "train"
    trained = train.run(
        config_path=toy["config"], train_dir=toy["train"], eval_dir=toy["eval"], out_dir=str(checkpoint)
    )
    assert (trained.where, trained.world_size) == ("local", 1)
    assert (checkpoint / "checkpoints" / "latest").is_file()

    report = evaluate.run(checkpoint=str(checkpoint), data_dir=toy["eval"], out=str(tmp_path / "eval.json"))
    assert report.rows == EVAL_ROWS
    # 8000 rows seen: a logistic regression learns part of the signal (chance is 0.5, the oracle 0.78).
    assert 0.55 < report.auc < report.oracle_auc

    exported = export.run(
        checkpoint=str(checkpoint),
        backends="jit,onnx,rtp",
        out_dir=str(tmp_path / "export"),
        data_uri=toy["eval"],
    )
    assert exported.ok and sorted(exported.backends) == ["jit", "onnx", "rtp"]
    for name, b in exported.backends.items():
        assert b.status == "ok" and b.parity.passed and b.max_abs_logit_diff < 1e-4, name
        model = read_manifest(tmp_path / "export" / name).model
        assert (model["type"], model["class"]) == ("toy", "ToyModel")
    # The served folder scores raw rows (FG inside) to the AUC evaluate measured on the eager model.
    rows = pq.read_table(toy["eval"])
    logits = load_backend(tmp_path / "export" / "rtp").predict_raw(rows.drop_columns(["label"]))
    assert binary_auc(np.asarray(rows.column("label")), np.asarray(logits)) == pytest.approx(
        report.auc, abs=1e-4
    )
