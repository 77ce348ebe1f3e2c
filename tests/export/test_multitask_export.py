"""A multi-task model (DBMTL, labels clk and buy, buy's tower two-class) through every backend: parity per task, one output
column per task from the scorer, the registered pyfunc and ``recpipe predict``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from small_training import TABLE_CAP, train_small

from recpipe.config import load_config
from recpipe.config.caps import cap_tables
from recpipe.config.sections import JrcLossConfig
from recpipe.eval.metrics import sigmoid
from recpipe.export.api import export
from recpipe.export.layout import backend_folder
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import read_manifest
from recpipe.models.blocks.multitask import TwoClassLogit
from recpipe.tracking.pyfunc import ARTIFACT, RawRowsModel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dbmtl(tmp_path_factory):
    """cvr's tower is two-class with a JRC loss (Linear(·, 2), its logit l1 - l0): the exported graph too."""
    cfg = cap_tables(load_config(ROOT / "configs" / "dbmtl_taobao_small.yaml"), TABLE_CAP)
    towers = cfg.model.task_towers
    towers[1] = towers[1].model_copy(
        update={"num_class": 2, "loss": JrcLossConfig(type="jrc", session="user_id")}
    )
    small = train_small(cfg, "taobao", tmp_path_factory.mktemp("dbmtl_data"))
    assert isinstance(small.model.dense.head.towers.outputs[1], TwoClassLogit)
    return cfg, small


def _check(result, backend: str) -> None:
    parity = result.backends[backend].parity
    assert result.backends[backend].status == "ok" and parity.passed, parity
    assert set(parity.tasks) == {"clk", "buy"} and parity.auc_eager == parity.tasks["clk"]["auc_eager"]
    assert all(t["max_abs_logit_diff"] <= 1e-4 for t in parity.tasks.values())


def test_every_backend_passes_parity_per_task_and_outputs_a_column_per_task(dbmtl, tmp_path):
    cfg, small = dbmtl
    result = export(small.model, small.spec, cfg, ["jit", "onnx", "rtp"], tmp_path, small.held_out)
    rows = small.clean.slice(0, 40)
    eager = small.model(*_inputs(small, rows)).detach().numpy()
    assert eager.shape == (40, 2)
    for backend in ("jit", "onnx", "rtp"):
        _check(result, backend)
        logits = load_backend(tmp_path / backend).predict(rows.to_pandas(), output="logit")
        np.testing.assert_allclose(logits, eager, atol=1e-4)
    session = load_backend(tmp_path / "onnx").session  # the graph names each task's output
    assert [o.name for o in session.get_outputs()] == ["logits", "logit_clk", "logit_buy"]
    assert [o.shape[1:] for o in session.get_outputs()] == [[2], [], []]
    manifest = read_manifest(tmp_path / "onnx")
    assert manifest.outputs["logits"] == {"dtype": "float32", "shape": ["B", 2], "tasks": ["clk", "buy"]}
    assert manifest.extra["task_outputs"] == "logit_clk,logit_buy"
    model = RawRowsModel()
    model.load_context(SimpleNamespace(artifacts={ARTIFACT: str(backend_folder(tmp_path / "rtp"))}))
    served = model.predict(None, rows.to_pandas())
    assert list(served.columns) == ["probability_clk", "probability_buy"]
    np.testing.assert_allclose(served.to_numpy(), sigmoid(eager.astype(np.float64)), atol=1e-4)


def test_recpipe_predict_writes_a_probability_column_per_task(dbmtl, tmp_path):
    from recpipe.stages.predict import run

    cfg, small = dbmtl
    export(small.model, small.spec, cfg, ["rtp"], tmp_path / "export", small.held_out)
    pq.write_table(small.clean.slice(0, 100), tmp_path / "rows.parquet")
    run(str(tmp_path / "export"), str(tmp_path / "rows.parquet"), str(tmp_path / "scores.parquet"))
    scores = pq.read_table(tmp_path / "scores.parquet")
    assert scores.column_names == ["row", "probability_clk", "probability_buy"] and scores.num_rows == 100


@pytest.mark.slow
def test_aoti_passes_parity_per_task(dbmtl, tmp_path):
    cfg, small = dbmtl
    _check(export(small.model, small.spec, cfg, ["aoti"], tmp_path, small.held_out), "aoti")


def _inputs(small, rows):
    from recpipe.batch import to_batch
    from recpipe.features.fg import FeatureGenerator

    b = to_batch(FeatureGenerator(small.spec, with_labels=False)(rows), small.spec.sparse_keys())
    return b.dense, b.sparse
