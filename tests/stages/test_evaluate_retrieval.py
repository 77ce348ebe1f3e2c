"""The evaluate stage on a retrieval checkpoint: recall@K over the whole catalogue (the trainer's own number
again), the champion re-scored from its registered run's checkpoint in a real sqlite MLflow store, the recall
gate both ways, the CLI's exit codes (3 gate failed, 2 a threshold of the other kind)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recpipe import tracking
from recpipe.cli.main import main
from recpipe.config import ParameterError
from recpipe.data.synthetic import generate
from recpipe.stages import evaluate, train
from recpipe.stages.train import checkpoint_tags

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"
ROWS, EVAL_ROWS = 9000, 1000
NAME = "ret-small"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ret")
    report = generate("retrieval", ROWS + EVAL_ROWS, root / "all", seed=4, users=150, items=200)
    table = pq.read_table(root / "all" / "part-00000.parquet")
    for name, part in (("train", table.slice(0, ROWS)), ("eval", table.slice(ROWS))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    items = str(root / "all" / "_items.parquet")
    config = root / "config.yaml"  # the catalogue in the config itself: the checkpoint carries it
    config.write_text(CONFIG.read_text().replace('"{ITEMS}"', items))
    trained = {}
    for which, steps in (("good", 150), ("weak", 4)):
        out = root / which
        train.run(
            str(config),
            str(root / "train"),
            str(root / "eval"),
            str(out),
            overrides={"train.max_steps": steps},
        )
        trained[which] = out
    uri = f"sqlite:///{root / 'mlflow.db'}"
    return {"root": root, "eval": str(root / "eval"), "train": str(root / "train"), "uri": uri,
            "config": str(config), "oracle": report.oracle_recall, **trained}  # fmt: skip


def _register_champion(world: dict, which: str) -> int:
    """``which``'s checkpoint registered as the champion, as a tracked pipeline run records it."""
    uri = world["uri"]
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    tracking.set_tags(run_id, checkpoint_tags(world[which]), uri=uri)
    tracking.log_model_dir(run_id, world[which] / "checkpoints", "model", uri=uri)
    v = tracking.register_version(uri, NAME, run_id, "model", tags={"recall_at_50": "0.01"})
    tracking.set_alias(uri, NAME, tracking.ALIAS_CHAMPION, v)
    return v


def test_candidate_recall_is_the_trainers_and_passes_its_floor(world, tmp_path) -> None:
    r = evaluate.run(
        str(world["good"]),
        world["eval"],
        str(tmp_path / "report.json"),
        train_data=world["train"],
        max_psi=0.25,
    )
    trained = json.loads((world["good"] / "train_result.json").read_text())["eval"]
    assert r.k == 50 and r.metrics["queries"] == EVAL_ROWS and r.metrics["rows"] == EVAL_ROWS
    assert r.recall == pytest.approx(trained["recall_at_50"], abs=1e-9)
    assert r.metrics["recall_at_10"] == pytest.approx(trained["recall_at_10"], abs=1e-9)
    assert 0.75 * world["oracle"][50] < r.recall  # random is 50 / 200 = 0.25
    assert r.gate_passed and r.gate_reasons[0].startswith("PASS min_recall_at_k: recall@50")
    # drift measured against the training split; ids only, so no PSI, and the limit says so
    assert (
        r.psi_max is None
        and r.gate_reasons[-1] == "PASS max_psi: no numeric feature, no PSI; max_psi 0.250000"
    )
    doc = json.loads(Path(r.report_path).read_text())
    assert (
        doc["kind"] == "retrieval" and doc["gate"]["candidate_recall"] == r.recall and doc["champion"] is None
    )


def test_gated_against_the_champion_rescored_from_its_checkpoint(world, tmp_path) -> None:
    weak = evaluate.run(str(world["weak"]), world["eval"], str(tmp_path / "w.json"))
    v = _register_champion(world, "weak")
    r = evaluate.run(
        str(world["good"]),
        world["eval"],
        str(tmp_path / "g.json"),
        champion_model=NAME,
        tracking_uri=world["uri"],
    )
    # re-scored on the same rows and catalogue, not the 0.01 recorded on the version
    assert r.champion_version == v and r.champion_recall == pytest.approx(weak.recall, abs=1e-9)
    assert "re-evaluated on the same eval data and catalogue" in r.champion_source
    assert r.champion_recall < r.recall and r.gate_passed
    # the weak model against the good champion: the drop fails the gate, exit 3 on the command line
    _register_champion(world, "good")
    code = main([
        "evaluate", "--checkpoint", str(world["weak"]), "--data", world["eval"], "--out", str(tmp_path / "x.json"),
        "--champion-model", NAME, "--tracking-uri", world["uri"], "--min-recall-at-k", "0",
    ])  # fmt: skip
    assert code == 3
    doc = json.loads((tmp_path / "x.json").read_text())
    assert doc["gate"]["failed"] == ["max_recall_drop"] and doc["gate"]["min_recall_at_k"] == 0.0
    assert doc["champion"]["metrics"]["recall_at_50"] == pytest.approx(r.recall, abs=1e-9)


def test_a_ranking_threshold_is_refused_for_a_retrieval_model(world, tmp_path) -> None:
    with pytest.raises(ParameterError, match="min_auc.*'dssm' is a retrieval model.*min_recall_at_k"):
        evaluate.run(str(world["good"]), world["eval"], str(tmp_path / "r.json"), min_auc=0.6)
    argv = [
        "evaluate",
        "--checkpoint",
        str(world["good"]),
        "--data",
        world["eval"],
        "--out",
        str(tmp_path / "r.json"),
    ]
    assert main([*argv, "--max-auc-drop", "0.01"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(world["config"]).read_text().replace("min_recall_at_k: 0.2", "min_auc: 0.6"))
    assert main([*argv, "--config", str(bad)]) == 2
