"""A multi-task model through evaluate → register → promote → evaluate against the champion: every task
gated on its own thresholds and against the champion's same task, re-evaluated through its pyfunc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recpipe import tracking
from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.stages import evaluate, export, register

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from recpipe.data.synthetic import generate

    root = tmp_path_factory.mktemp("mt_gate")
    generate("taobao", 4000, root / "train", seed=5, users=300, ads=200)
    generate("taobao", 1500, root / "eval", seed=6, users=300, ads=200)
    data = yaml.safe_load((ROOT / "configs" / "dbmtl_taobao_small.yaml").read_text())
    for f in data["features"]:  # small tables: a fast test
        for item in [f, *f.get("sub_features", [])]:
            if item.get("num_buckets", 0) > 1000:
                item["num_buckets"] = 1_000_000 if item["name"] == "user_id" else item["num_buckets"] // 100
    data["eval"]["gate"]["min_auc"] = 0.3  # a 30-step model: the mechanics are tested, not the quality
    config = root / "dbmtl.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    cfg = load_config(config, {"data.batch_size": 128, "train.max_steps": 30})
    train(cfg, build_feature_spec(cfg), str(root / "train"), str(root / "eval"), root / "out")
    exported = root / "export"
    export.run(str(root / "out"), "rtp", str(exported), data_uri=str(root / "eval"))
    return root, config, exported


def test_tasks_are_gated_registered_and_compared_with_the_champion_task_by_task(trained, tmp_path):
    root, config, exported = trained
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = evaluate.run(str(root / "out"), str(root / "eval"), str(tmp_path / "r1.json"), str(config))
    assert first.gate_passed and any(r.startswith("[buy] PASS min_auc") for r in first.gate_reasons)
    doc = json.loads((tmp_path / "r1.json").read_text())
    assert set(doc["candidate"]["tasks"]) == {"clk", "buy"} and set(doc["gate"]["tasks"]) == {"clk", "buy"}
    r = register.run(str(exported), str(tmp_path / "r1.json"), "mt", uri, experiment="mt")
    v = tracking.get_version(uri, "mt", r.version)
    assert {"auc", "buy.auc", "clk.auc", "buy.logloss"} <= set(v["metrics"])
    tracking.set_alias(uri, "mt", tracking.ALIAS_CHAMPION, r.version)
    # The same checkpoint against its own registered version: every task re-evaluated, equal, passed.
    again = evaluate.run(
        str(root / "out"), str(root / "eval"), str(tmp_path / "r2.json"), str(config), champion_model="mt",
        tracking_uri=uri,
    )  # fmt: skip
    assert again.gate_passed and "re-evaluated" in again.champion_source
    assert any(r.startswith("[buy] PASS auc_vs_champion") for r in again.gate_reasons)
    champion = json.loads((tmp_path / "r2.json").read_text())["champion"]["metrics"]
    assert champion["buy.auc"] == pytest.approx(doc["candidate"]["tasks"]["buy"]["auc"], abs=1e-6)
    # A buy floor the model does not reach: refused, and the reason names the buy task.
    strict = tmp_path / "strict.yaml"
    data = yaml.safe_load(config.read_text())
    data["eval"]["task_gates"] = {"buy": {"min_auc": 0.999}}
    strict.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    refused = evaluate.run(str(root / "out"), str(root / "eval"), str(tmp_path / "r3.json"), str(strict))
    assert not refused.gate_passed
    assert [r for r in refused.gate_reasons if "FAIL" in r] == [
        next(r for r in refused.gate_reasons if r.startswith("[buy] FAIL min_auc"))
    ]


def test_the_run_summary_shows_every_tasks_auc():
    from recpipe.pipeline.summary import RunSummary

    s = RunSummary(
        "r",
        "FINISHED",
        "sqlite:///x.db",
        auc=0.6073,
        oracle_auc=0.75,
        task_auc={"clk": 0.6073, "buy": 0.6417},
    )
    assert "  AUC per task  clk 0.6073, buy 0.6417" in s.format().splitlines()
    assert "AUC per task" not in RunSummary("r", "FINISHED", "sqlite:///x.db", auc=0.7).format()
