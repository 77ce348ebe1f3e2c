"""train / evaluate / export / register called through their Python functions on a tiny real model:
KFP Metrics and ClassificationMetrics, the gate with and without a champion, parity, the pyfunc."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Metrics, Model

from components import evaluate, export, register, start, train
from recpipe import tracking
from recpipe.cli.main import main as cli
from recpipe.pipeline.params import resolve_config, write_config


@pytest.fixture(scope="module")
def flow(tmp_path_factory, tiny_config, tiny_data, _empty_db):
    """start → train (2 CPU processes) on the tiny data, one sqlite store for the module."""
    import shutil

    root = tmp_path_factory.mktemp("flow")
    shutil.copy(_empty_db, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = Artifact(uri=str(root / "config.yaml"))
    out = start.python_func(
        config_path=tiny_config, data_source=tiny_data["train"], backends="onnx,rtp", min_auc="0.5",
        max_auc_drop="0.02", max_logloss_rise="0.02", workers=1, gpus_per_worker=2, mlflow_uri=uri, model_name="",
        node_selector={}, tolerations=[], config_overrides={}, kfp_run_id="kfp-1", launcher="local", config=cfg,
    )  # fmt: skip
    state = {
        "root": root,
        "uri": uri,
        "run_id": out[0],
        "config": cfg,
        "eval": Dataset(uri=tiny_data["eval"]),
        "train": Dataset(uri=tiny_data["train"]),
    }
    ckpt = Model(uri=str(root / "checkpoint"))
    where = train.python_func(
        config=cfg, train_data=Dataset(uri=tiny_data["train"]), eval_data=state["eval"],
        feature_spec=Artifact(uri=tiny_data["fg"]), run_id=out[0], tracking_uri=uri, workers=1, gpus_per_worker=2,
        accelerator_type="", node_selector={}, tolerations=[], image="unused", workspace_pvc="", launcher="local", checkpoint=ckpt,
    )  # fmt: skip
    state.update(checkpoint=ckpt, where=where)
    return state


def _evaluate(flow, tmp_path, config=None):
    m, cm, rep = (
        Metrics(uri=str(tmp_path / "m")),
        ClassificationMetrics(uri=str(tmp_path / "cm")),
        Artifact(uri=str(tmp_path / "report.json")),
    )
    passed, reasons = evaluate.python_func(
        config=config or flow["config"], checkpoint=flow["checkpoint"], eval_data=flow["eval"],
        train_data=flow["train"], run_id=flow["run_id"], tracking_uri=flow["uri"], model_name="tiny-din", metrics=m,
        classification=cm, report=rep,
    )  # fmt: skip
    return passed, reasons, m, cm, rep


def test_train_writes_a_checkpoint_and_logs_the_curves(flow):
    assert flow["where"] == "local" and flow["checkpoint"].metadata["world_size"] == 2
    ckpt = Path(flow["checkpoint"].path)
    assert (ckpt / "checkpoints" / "latest").is_file() and (ckpt / "train_result.json").is_file()
    run = tracking.run_summary(flow["run_id"], uri=flow["uri"])
    assert run["tags"]["train.where"] == "local" and run["tags"]["train.world_size"] == "2"
    assert run["metrics"]["train.steps"] == json.loads((ckpt / "train_result.json").read_text())["steps"]
    assert "train.loss" in run["metrics"]


def test_evaluate_emits_kfp_metrics_and_gates_without_champion(flow, tmp_path):
    passed, reasons, m, cm, rep = _evaluate(flow, tmp_path)
    doc = json.loads(Path(rep.path).read_text())
    auc = doc["candidate"]["auc"]
    assert set(m.metadata) == {"auc", "gauc", "logloss", "oracle_auc", "psi_max"}
    assert m.metadata["auc"] == pytest.approx(auc)
    # the eval split's drift from the training split: both halves of the same tiny data, so small
    assert m.metadata["psi_max"] == pytest.approx(doc["drift"]["psi_max"])
    assert 0.0 <= m.metadata["psi_max"] < 0.5
    assert 0.5 < auc < m.metadata["oracle_auc"] < 1.0
    roc = cm.metadata["confidenceMetrics"]
    assert len(roc) > 10 and all(0.0 <= p["confidenceThreshold"] <= 1.0 for p in roc)
    assert {p["falsePositiveRate"] for p in roc} >= {0.0, 1.0}
    rows = [r["row"] for r in cm.metadata["confusionMatrix"]["rows"]]
    assert sum(map(sum, rows)) == doc["candidate"]["rows"]
    assert cm.metadata["confusionMatrix"]["annotationSpecs"] == [
        {"displayName": "no click"},
        {"displayName": "click"},
    ]
    assert passed is True and doc["gate"]["champion_source"] == "none"
    assert reasons.splitlines()[0].startswith("PASS min_auc") and "no_champion" in reasons
    run = tracking.run_summary(flow["run_id"], uri=flow["uri"])
    assert run["metrics"]["eval.auc"] == pytest.approx(auc) and run["tags"]["gate.passed"] == "true"
    assert run["metrics"]["drift.psi_max"] == pytest.approx(m.metadata["psi_max"])


def test_evaluate_fails_the_gate_as_a_normal_outcome(flow, tmp_path):
    strict = write_config(resolve_config(flow["config"].path, min_auc=0.99), tmp_path / "strict.yaml")
    passed, reasons, *_ = _evaluate(flow, tmp_path, config=Artifact(uri=str(strict)))
    assert passed is False and reasons.startswith("FAIL min_auc:") and "min_auc 0.990000" in reasons
    assert tracking.run_summary(flow["run_id"], uri=flow["uri"])["status"] == "RUNNING"


def test_export_register_and_champion_reevaluation(flow, tmp_path):
    exported = Model(uri=str(tmp_path / "exported"))
    text = export.python_func(
        checkpoint=flow["checkpoint"], eval_data=flow["eval"], backends="onnx,rtp", run_id=flow["run_id"],
        tracking_uri=flow["uri"], exported=exported,
    )  # fmt: skip
    assert text.startswith("onnx=parity ok: max|dlogit| ") and ", rtp=parity ok" in text
    assert exported.metadata["onnx"] == "ok" and exported.metadata["onnx_max_abs_logit_diff"] < 1e-4
    _, _, _, _, rep = _evaluate(flow, tmp_path)
    version, outcome = register.python_func(
        exported=exported, report=rep, eval_data=flow["eval"], run_id=flow["run_id"], tracking_uri=flow["uri"],
        model_name="tiny-din", data_digest="d" * 64,
    )  # fmt: skip
    assert version == 1 and outcome == "registered: tiny-din v1 (rtp) as challenger"
    v = tracking.get_version(flow["uri"], "tiny-din", 1)
    assert (
        v["aliases"] == ["challenger"] and v["gate_passed"] is True and v["tags"]["data_digest"] == "d" * 64
    )
    assert v["metrics"]["auc"] == pytest.approx(json.loads(Path(rep.path).read_text())["candidate"]["auc"])
    assert json.loads(v["tags"]["gate_reasons"])[0].startswith("PASS min_auc")
    assert v["tags"]["serving_backend"] == "rtp" and v["tags"]["parity.onnx"].startswith("parity ok")
    # The registered pyfunc scores raw rows (FG inside): pandas turns nullable int ids into floats, too.
    model = tracking.load_pyfunc_model(flow["uri"], "models:/tiny-din@challenger")
    # Its input columns are the FeatureSpec's (metadata: the raw-value contract, every one optional);
    # the signature declares the output and the `output` parameter only (no per-call input enforcement).
    columns = model.metadata.metadata["raw_columns"]
    assert set(columns) == {"user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level",
                            "pvalue_level", "shopping_level", "occupation", "new_user_class_level", "adgroup_id",
                            "cate_id", "campaign_id", "customer", "brand", "pid", "price", "click_50_seq"}  # fmt: skip
    assert columns["click_50_seq"] == "sequence" and columns["user_id"] == "id"
    assert model.metadata.get_input_schema() is None
    assert [p.name for p in model.metadata.get_params_schema().params] == [
        "output",
        "context",
    ]  # context: one user x N candidates
    assert model.metadata.saved_input_example_info["type"] == "dataframe"
    rows = pq.read_table(flow["eval"].path).slice(0, 64).to_pandas()
    p = np.asarray(model.predict(rows))
    assert p.shape == (64,) and ((p > 0) & (p < 1)).all()
    # With v1 as champion, the same model is re-evaluated through that pyfunc: identical numbers.
    assert cli(["promote", "--model", "tiny-din", "--version", "1", "--tracking-uri", flow["uri"]]) == 0
    passed, reasons, m, *_ = _evaluate(flow, tmp_path)
    champion = json.loads((tmp_path / "report.json").read_text())["champion"]
    assert passed and champion["version"] == 1 and "re-evaluated on the same eval data" in champion["source"]
    assert champion["metrics"]["auc"] == pytest.approx(m.metadata["auc"], abs=1e-6)
    assert "PASS auc_vs_champion" in reasons and "PASS logloss_vs_champion" in reasons
    # models:/<name>@champion scores raw rows exactly as the trainer's own evaluation of the checkpoint.
    from recpipe.eval.checkpoint import predict_dataset
    from recpipe.train.checkpoint import load_model_for_inference

    champion_model = tracking.load_pyfunc_model(flow["uri"], "models:/tiny-din@champion")
    table = pq.read_table(flow["eval"].path)
    served = np.asarray(champion_model.predict(table.to_pandas()), dtype=np.float64)
    eager, spec, _ = load_model_for_inference(flow["checkpoint"].path)
    _, logits, _ = predict_dataset(eager, spec, flow["eval"].path, global_batch_size=256)
    assert served.shape == logits.shape == (table.num_rows,)
    np.testing.assert_allclose(served, 1.0 / (1.0 + np.exp(-logits.astype(np.float64))), rtol=0, atol=1e-5)


def test_cli_evaluate_exits_non_zero_on_a_failed_gate(flow, tmp_path, capsys):
    args = [
        "evaluate",
        "--checkpoint",
        flow["checkpoint"].path,
        "--data",
        flow["eval"].path,
        "--out",
        str(tmp_path / "r.json"),
    ]
    assert cli(args + ["--min-auc", "0.99"]) == 3  # issue 17: a rejected gate is exit 3, not 1 (an error)
    err = capsys.readouterr().err
    assert "gate FAILED" in err and "FAIL min_auc" in err
    assert cli(args + ["--min-auc", "0.5"]) == 0
    assert cli(["models", "list", "tiny-din", "--tracking-uri", flow["uri"]]) == 0


def test_failed_training_marks_the_run_failed_with_the_reason(flow, tiny_data, tmp_path):
    # Issue 17: data without the label now fails before any process starts, naming every missing column.
    broken = tmp_path / "broken"
    broken.mkdir()
    pq.write_table(
        pq.read_table(tiny_data["train"]).drop_columns(["clk"]).slice(0, 500), broken / "part-0.parquet"
    )
    with pytest.raises(Exception, match="does not fit the config"):
        train.python_func(
            config=flow["config"], train_data=Dataset(uri=str(broken)), eval_data=flow["eval"],
            feature_spec=Artifact(uri=tiny_data["fg"]), run_id=flow["run_id"], tracking_uri=flow["uri"], workers=1,
            gpus_per_worker=1, accelerator_type="", node_selector={}, tolerations=[], image="unused", workspace_pvc="",
            launcher="local", checkpoint=Model(uri=str(tmp_path / "ckpt")),
        )  # fmt: skip
    run = tracking.run_summary(flow["run_id"], uri=flow["uri"])
    assert run["status"] == "FAILED"
    assert run["tags"]["failure_reason"].startswith("train: SchemaMismatch: data ")
    assert "missing columns ['clk'] (read by the label)" in run["tags"]["failure_reason"]
