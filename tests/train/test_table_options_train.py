"""Embedding-table options in training (TorchEasyRec's ``data_type`` and ``trainable``): an FP16 table trains
and is saved as FP16 (a pooled table, and the sequence table shared by the candidate and its history); a
frozen table (``trainable: false``) never moves while the others do, across a resume too.

The config is the shrunken small DIN config with ``user_id`` and ``adgroup_id`` (candidate and history) as
FP16 tables and ``cms_segid`` frozen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.models.registry import build_model
from recpipe.train.checkpoint import load_model_for_inference

OVERRIDES = {"data.batch_size": 64, "train.log_every_steps": 1, "train.checkpoint_every_steps": 100}


@pytest.fixture(scope="module")
def options_config(taobao, tmp_path_factory) -> str:
    data = yaml.safe_load(Path(taobao["config"]).read_text())
    for f in data["features"]:
        if f["name"] in ("user_id", "adgroup_id"):
            f["data_type"] = "fp16"
        if f["name"] == "cms_segid":
            f["trainable"] = False
        for sub in f.get("sub_features", []):
            if sub["name"] == "adgroup_id":
                sub["data_type"] = "fp16"
    path = tmp_path_factory.mktemp("options_config") / "din_options.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return str(path)


def _tables(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        k.rsplit(".", 2)[-2]: v.clone()
        for k, v in model.state_dict().items()
        if k.endswith(".weight") and (".embedding_bags." in k or ".embeddings." in k)
    }


def test_the_model_builds_fp16_and_frozen_tables(options_config):
    cfg = load_config(options_config)
    spec = build_feature_spec(cfg)
    tables = {t.name: t for t in spec.tables()}
    assert tables["user_id"].data_type == tables["adgroup_id"].data_type == "fp16"
    assert not tables["cms_segid"].trainable and tables["user_id"].trainable
    model = build_model(spec, cfg.model)
    weights = _tables(model)
    assert weights["user_id"].dtype == weights["adgroup_id"].dtype == torch.float16
    assert weights["cms_segid"].dtype == torch.float32
    assert model.embeddings.frozen_tables == ["cms_segid"]


@pytest.mark.slow
def test_fp16_tables_train_and_a_frozen_table_stays(options_config, taobao, tmp_path):
    out = tmp_path / "run"
    first = load_config(options_config, {**OVERRIDES, "train.max_steps": 8})
    spec = build_feature_spec(first)
    train(first, spec, taobao["train"], None, out)
    before = _tables(load_model_for_inference(out)[0])
    second = load_config(options_config, {**OVERRIDES, "train.max_steps": 16})
    result = train(second, spec, taobao["train"], taobao["eval"], out)
    assert result.resumed_from is not None and result.steps == 16
    after = _tables(load_model_for_inference(out)[0])
    assert after["user_id"].dtype == after["adgroup_id"].dtype == torch.float16  # saved and loaded as FP16
    assert torch.equal(after["cms_segid"], before["cms_segid"])  # frozen
    for name in ("user_id", "adgroup_id", "cms_group_id"):
        assert not torch.equal(after[name], before[name]), name
    losses = [
        json.loads(x)["loss"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x
    ]
    assert all(map(torch.isfinite, torch.tensor(losses)))
    assert result.eval is not None and 0.0 < result.eval["auc"] < 1.0


def test_the_memory_report_counts_fp16_weights_at_two_bytes(options_config):
    from recpipe.train.memory import embedding_memory_report

    spec = build_feature_spec(load_config(options_config))
    by_name = {t.name: t for t in embedding_memory_report(spec, "adagrad").tables}
    assert by_name["user_id"].weight_bytes == by_name["user_id"].rows * by_name["user_id"].dim * 2
    assert by_name["cms_segid"].weight_bytes == by_name["cms_segid"].rows * by_name["cms_segid"].dim * 4
