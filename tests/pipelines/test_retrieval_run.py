"""``recpipe run`` on a retrieval config (issue 30): the same kfp.local pipeline trains two towers in one process on
generated ``synthetic:retrieval`` rows with their catalogue as the negative sampler's item table, gates recall@K,
exports the user tower, item embeddings and FAISS index, registers and promotes (a second run gated against that
champion and rejected: tests/pipelines/test_pair_run.py, whose retriever goes through the same gate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recpipe import tracking

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "dssm_retrieval_small.yaml"
ROWS = 20_000


def test_a_retrieval_config_defaults_to_its_own_backends_and_one_process():
    from recpipe.config import load_config
    from recpipe.config.catalogue import RETRIEVAL_BACKENDS

    assert load_config(CONFIG).export.backends == list(RETRIEVAL_BACKENDS) == ["aoti"]
    assert "jit" in load_config(ROOT / "configs" / "din_taobao_small.yaml").export.backends


def test_generated_rows_bring_their_catalogue_only_where_the_config_leaves_it_unset(tmp_path):
    import pyarrow.parquet as pq

    from pipelines.local_run import _generate_retrieval
    from recpipe.config import load_config

    cfg = load_config(CONFIG)
    source, placeholder, oracle = _generate_retrieval(cfg, 2000, tmp_path / "a")
    assert (source, placeholder) == (str(tmp_path / "a"), "ITEMS")
    assert pq.read_table(tmp_path / "a" / "_items.parquet").num_rows == 40  # one item per 50 rows
    assert set(oracle) >= {1, 5, 10} and 0 < oracle[1] < oracle[10] <= 1
    cfg.data.params = {"ITEMS": "/data/my_items.parquet"}  # the config names its own catalogue: kept
    assert _generate_retrieval(cfg, 2000, tmp_path / "b")[1] is None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from pipelines.local_run import run_local

    root = tmp_path_factory.mktemp("retrieval-run")
    first = run_local(runs_dir=root / "runs", config=str(CONFIG), rows=ROWS)
    # A second run gated against this champion (re-scored from its checkpoint) and rejected is the pair run's
    # (tests/pipelines/test_pair_run.py: its retriever takes the same gate): one kfp.local run fewer here.
    return {"first": first, "uri": f"sqlite:///{root / 'runs' / 'mlflow.db'}"}


@pytest.mark.slow
def test_the_pipeline_trains_gates_exports_registers_and_promotes_two_towers(runs):
    s = runs["first"]
    assert s.status == "FINISHED", s.format()
    assert s.gate_passed is True and s.champion_source == "none"
    # recall over the catalogue beats random (K / 400 items) by far, and stays under the generator's oracle
    assert s.recall[50] > 0.3 and s.recall[10] < s.recall[50]
    assert s.oracle_recall[50] >= s.recall[50] - 0.05
    assert s.backends == {"user_tower": "passed"}
    text = s.format()
    assert f"recall        @10 {s.recall[10]:.4f} (oracle {s.oracle_recall[10]:.4f})" in text
    assert f"v1   challenger,champion  recall@50 {s.recall[50]:.4f}  gate True" in text

    (version,) = tracking.list_models(runs["uri"], s.model_name)
    assert version["aliases"] == ["challenger", "champion"]
    tags = version["tags"]
    assert tags["serving_backend"] == "retrieval" and float(tags["recall_at_50"]) == pytest.approx(
        s.recall[50]
    )
    assert tags["backends"] == "faiss_index,item_embeddings,user_tower" and tags["items"] == "400"
    # the export the version names: its three parts, published together
    (export_json,) = Path(s.run_dir, "kfp").glob("*/export/exported/export.json")
    doc = json.loads(export_json.read_text())
    assert doc["kind"] == "retrieval" and set(doc["backends"]) == {
        "user_tower",
        "item_embeddings",
        "faiss_index",
    }
