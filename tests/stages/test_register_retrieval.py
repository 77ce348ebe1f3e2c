"""register and promote for a retrieval model in a real sqlite MLflow store: the sealed export folder as the
version's artifact, recall@K and the gate as its tags, alias challenger, promotion to champion when the gate
passed (refused when it failed), and the next evaluation gated against that champion's recorded recall."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recpipe import tracking
from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import retrieval_metrics
from recpipe.features.build import build_feature_spec
from recpipe.stages import evaluate, export, promote, register
from recpipe.stages.register_retrieval import check_retrieval_export
from recpipe.train.retrieval_job import train_retrieval_job

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"
NAME = "ret-reg"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("retreg")
    generate("retrieval", 5000, root / "all", seed=6, users=100, items=150)
    table = pq.read_table(root / "all" / "part-00000.parquet")
    for name, part in (("train", table.slice(0, 4200)), ("eval", table.slice(4200))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    items = str(root / "all" / "_items.parquet")
    config = root / "config.yaml"
    config.write_text(CONFIG.read_text().replace('"{ITEMS}"', items))
    cfg = load_config(config, {"train.max_steps": 80})
    train_retrieval_job(
        cfg, build_feature_spec(cfg), str(root / "train"), str(root / "eval"), root / "ckpt",
        lambda m, s, r, i: retrieval_metrics(m, s, r, i, (10, 50)),
    )  # fmt: skip
    export.run(str(root / "ckpt"), None, str(root / "export"), data_uri=str(root / "eval"))
    return {
        "root": root,
        "ckpt": str(root / "ckpt"),
        "eval": str(root / "eval"),
        "export": str(root / "export"),
    }


def test_registered_promoted_and_gated_against_as_champion(exported, tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    passed = evaluate.run(exported["ckpt"], exported["eval"], str(tmp_path / "pass.json"))
    assert passed.gate_passed
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    r = register.run(
        exported["export"],
        passed.report_path,
        NAME,
        uri,
        data_digest="d1",
        log=tracking.open_run_log(run_id, uri),
    )
    assert (r.version, r.serving_backend, r.aliases) == (1, "retrieval", ["challenger"])
    tags = tracking.get_version(uri, NAME, 1)["tags"]
    assert float(tags["recall_at_50"]) == passed.metrics["recall_at_50"]
    assert float(tags["hit_rate_at_10"]) == passed.metrics["hit_rate_at_10"]
    assert (tags["gate_passed"], tags["gate_k"], tags["data_digest"], tags["ann_index"]) == (
        "true",
        "50",
        "d1",
        "none",
    )
    assert tags["backends"] == "faiss_index,item_embeddings,user_tower"
    assert json.loads(tags["gate_reasons"]) == passed.gate_reasons
    # the version's artifact is the sealed export: every part there, as exported
    folder, pointer = check_retrieval_export(exported["export"])
    artifacts = {a.path for a in tracking.uri.client(uri).list_artifacts(run_id, "model")}
    assert artifacts == {
        "model/user_tower",
        "model/item_embeddings",
        "model/faiss_index",
        "model/export.json",
    }
    promote.run(NAME, 1, uri)
    assert tracking.get_version_by_alias(uri, NAME, tracking.ALIAS_CHAMPION)["version"] == 1

    # The next candidate is gated against v1: its run recorded no checkpoint, so its recorded recall counts.
    again = evaluate.run(
        exported["ckpt"], exported["eval"], str(tmp_path / "again.json"), champion_model=NAME, tracking_uri=uri,
        min_recall_at_k=0.99,
    )  # fmt: skip
    assert again.champion_version == 1 and "recorded at its registration" in again.champion_source
    assert again.champion_recall == passed.metrics["recall_at_50"]
    assert not again.gate_passed and json.loads(Path(again.report_path).read_text())["gate"]["failed"] == [
        "min_recall_at_k"
    ]
    run2 = tracking.start_or_resume_run(uri, "recpipe-tests")
    r2 = register.run(exported["export"], again.report_path, NAME, uri, log=tracking.open_run_log(run2, uri))
    assert r2.version == 2 and tracking.get_version(uri, NAME, 2)["tags"]["gate_passed"] == "false"
    with pytest.raises(tracking.PromotionRefused, match="gate"):
        promote.run(NAME, 2, uri)


def test_a_folder_that_is_no_retrieval_export_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="is not a retrieval export"):
        check_retrieval_export(tmp_path)
