"""evaluate with the training split: the eval split's drift computed, gated on (max_psi), logged to MLflow
(``drift.*`` metrics, ``eval/drift.json``) and shown by the run summary."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from recpipe import tracking
from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.pipeline.summary import summarize
from recpipe.stages import evaluate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from recpipe.data.synthetic import generate

    root = tmp_path_factory.mktemp("drift_eval")
    generate("taobao", 3000, root / "all", seed=5, users=300, ads=200)
    rows = pq.read_table(root / "all")
    for name, part in (
        ("train", rows.slice(0, 2500)),
        ("eval", rows.slice(2500)),
        # the newest day's prices ten times higher: its price buckets shift
        (
            "shifted",
            rows.slice(2500).set_column(
                rows.schema.get_field_index("price"), "price", pc.multiply(rows.slice(2500)["price"], 10.0)
            ),
        ),  # fmt: skip
    ):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    data = yaml.safe_load((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    for f in data["features"]:  # small tables: a fast test
        for item in [f, *f.get("sub_features", [])]:
            if item.get("num_buckets", 0) > 1000:
                item["num_buckets"] = 10_000
    data["eval"]["gate"] = {"min_auc": 0.0, "max_psi": 0.2}  # a 20-step model: drift is tested, not quality
    config = root / "din.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    cfg = load_config(config, {"data.batch_size": 128, "train.max_steps": 20})
    train(cfg, build_feature_spec(cfg), str(root / "train"), str(root / "eval"), root / "out")
    return root, config


@pytest.mark.slow
def test_drift_is_gated_logged_and_summarized(trained, tmp_path):
    root, config = trained
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    same_day = evaluate.run(
        str(root / "out"),
        str(root / "eval"),
        str(tmp_path / "r0.json"),
        str(config),
        train_data=str(root / "train"),
    )
    assert same_day.gate_passed and same_day.psi_max is not None and same_day.psi_max < 0.2
    r = evaluate.run(
        str(root / "out"), str(root / "shifted"), str(tmp_path / "r1.json"), str(config),
        train_data=str(root / "train"), log=tracking.open_run_log(run_id, uri),
    )  # fmt: skip
    assert not r.gate_passed and r.drift_top[0][0] == "price" and r.psi_max == r.drift_top[0][1] > 1.0
    fail = next(line for line in r.gate_reasons if line.startswith("FAIL"))
    assert fail.startswith("FAIL max_psi: psi above max_psi 0.200000: price ")
    assert f"drift: psi max {r.psi_max:.4f} (price {r.psi_max:.4f}" in r.describe()
    doc = json.loads((tmp_path / "r1.json").read_text())
    assert doc["gate"]["max_psi"] == 0.2 and doc["drift"]["features"]["price"]["psi"] == pytest.approx(
        r.psi_max
    )
    metrics = tracking.run_summary(run_id, uri=uri)["metrics"]
    assert metrics["drift.psi.price"] == pytest.approx(r.psi_max) and metrics[
        "drift.psi_max"
    ] == pytest.approx(r.psi_max)
    assert "drift.new_id_rate.adgroup_id" in metrics and "drift.null_rate.brand" in metrics
    assert metrics["drift.history_mean.click_50_seq"] > 0
    artifacts = tracking.runs.client(uri).list_artifacts(run_id, "eval")
    assert "eval/drift.json" in [a.path for a in artifacts]
    lines = summarize(uri, run_id).format().splitlines()
    drift_line = next(line for line in lines if line.startswith("  drift "))
    assert drift_line.startswith(f"  drift         psi max {r.psi_max:.4f} (price {r.psi_max:.4f}")
    # the command line's max_psi replaces the config's: a limit above the shift passes
    loose = evaluate.run(
        str(root / "out"), str(root / "shifted"), str(tmp_path / "r2.json"), str(config),
        train_data=str(root / "train"), max_psi=100.0,
    )  # fmt: skip
    assert loose.gate_passed


@pytest.mark.slow
def test_a_limit_on_a_feature_without_psi_is_refused_before_scoring(trained, tmp_path):
    root, config = trained
    data = yaml.safe_load(config.read_text())
    data["eval"]["gate"]["max_psi_per_feature"] = {"user_id": 0.1}
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    with pytest.raises(ValueError, match=r"names \['user_id'\], which have no PSI.*'price'"):
        evaluate.run(str(root / "out"), str(root / "eval"), str(tmp_path / "r.json"), str(wrong), train_data=str(root / "train"))  # fmt: skip
    without = evaluate.run(str(root / "out"), str(root / "eval"), str(tmp_path / "r3.json"), str(config))
    assert not without.gate_passed and without.psi_max is None
    assert "FAIL max_psi: no drift statistics" in "\n".join(without.gate_reasons)
