"""A model added the way the registry documents (one folder, tests/models/toy/, and one registry line) trains,
evaluates, exports with parity on every default backend and is served by MLflow's scoring server, through
the normal stages. Its config also reads a feature of a kind added the same way (one module,
tests/features/toy_kind.py, and one entry-point line), so the kind goes the same whole way: FG at training,
fg.json, FG inside every served backend and the scoring server.

The registry line is an entry point (group ``recpipe.models``), as a package outside recpipe would
declare it, because the train stage runs the trainer in a fresh process (and the scoring server is one too):
an entry in the ``MODELS`` dict of this process would not reach them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from local_http import invoke, predictions, scoring_server

from recpipe.auc import binary_auc
from recpipe.config import load_config
from recpipe.config.catalogue import DEFAULT_BACKENDS, MODELS
from recpipe.config.root import model_names
from recpipe.data.synthetic import generate
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import read_manifest
from recpipe.stages import evaluate, export, promote, register, train

TRAIN_ROWS, EVAL_ROWS, BATCH = 4000, 1000, 200
REGISTRY_LINE = "toy = tests.models.toy"
KIND_LINE = "text_length = tests.features.toy_kind"
ROOT = Path(__file__).resolve().parents[2]


CONFIG = {
    "name": "toy",
    "data": {"label": "label", "batch_size": BATCH, "oracle_column": "true_prob"},
    "features": [
        *({"kind": "raw", "name": f"I{i}", "normalizer": "log(x+3)"} for i in range(1, 14)),
        *({"kind": "id", "name": f"C{i}", "hash_bucket_size": 500, "embedding_dim": 4} for i in range(1, 27)),
        {"kind": "text_length", "name": "C3_length", "column": "C3", "max_length": 8},
    ],
    "feature_groups": [
        {
            "name": "wide",
            "type": "deep",
            "features": [*(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27)), "C3_length"],
        }
    ],
    "model": {"type": "toy", "group": "wide"},
    "train": {
        "sparse_optimizer": {"type": "adagrad", "lr": 0.1},
        "dense_optimizer": {"type": "adam", "lr": 0.01},
        "epochs": 2,
        "log_every_steps": 10,
    },
    "export": {"backends": list(DEFAULT_BACKENDS), "max_abs_logit_diff": 1e-4},
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
        match=re.escape(f"unknown model type 'toy'; known: {sorted(MODELS)}"),
    ):
        load_config(toy["config"])


def test_the_declaration_loads_the_config_without_torch(
    toy: dict[str, str], declare_entry_point: Callable[[str, str], None]
) -> None:
    declare_entry_point("recpipe.models", REGISTRY_LINE)
    declare_entry_point("recpipe.feature_kinds", KIND_LINE)
    assert "toy" in model_names() and type(load_config(toy["config"]).model).__name__ == "ToyConfig"
    code = (
        "import sys; from recpipe.config import load_config; "
        f"print(type(load_config({toy['config']!r}).model).__name__, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["ToyConfig", "False"]


@pytest.mark.slow
def test_a_toy_model_and_kind_train_evaluate_export_and_serve(
    toy: dict[str, str], declare_entry_point: Callable[[str, str], None], tmp_path: Path
) -> None:
    declare_entry_point("recpipe.models", REGISTRY_LINE)
    declare_entry_point("recpipe.feature_kinds", KIND_LINE)
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
        backends=",".join(DEFAULT_BACKENDS),
        out_dir=str(tmp_path / "export"),
        data_uri=toy["eval"],
    )
    assert exported.ok and sorted(exported.backends) == sorted(DEFAULT_BACKENDS)
    for name, b in exported.backends.items():
        assert b.status == "ok" and b.parity.passed and b.max_abs_logit_diff < 1e-4, name
        model = read_manifest(tmp_path / "export" / name).model
        assert (model["type"], model["class"]) == ("toy", "ToyModel")
    # The served folder scores raw rows (FG inside) to the AUC evaluate measured on the eager model.
    rows = pq.read_table(toy["eval"])
    rtp = load_backend(tmp_path / "export" / "rtp")
    assert rtp.spec.feature("C3_length").kind == "text_length"  # read back from the served fg.json
    logits = rtp.predict_raw(rows.drop_columns(["label"]))
    assert binary_auc(np.asarray(rows.column("label")), np.asarray(logits)) == pytest.approx(
        report.auc, abs=1e-4
    )

    # Registered, promoted and served by MLflow's scoring server: JSON rows in, the export's scores out.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    version = register.run(str(tmp_path / "export"), report.report_path, "toy-served", uri).version
    promote.run("toy-served", version, uri, force=True, reason="toy test: the toy need not pass its gate")
    head = rows.slice(0, 32)
    records = json.loads(json.dumps(head.drop_columns(["label", "true_prob"]).to_pylist()))
    with scoring_server("models:/toy-served@champion", uri, tmp_path) as server:
        status, body = invoke(server.url, {"dataframe_records": records})
    assert status == 200, body
    np.testing.assert_allclose(predictions(body), rtp.predict(head), atol=1e-6)
