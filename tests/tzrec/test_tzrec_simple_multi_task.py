"""TorchEasyRec's ``simple_multi_task`` (multi_task_rank.proto: only ``task_towers``; the model EasyRec's
converter maps to it) imports over group ``all`` and trains on generated Taobao rows."""

from __future__ import annotations

import copy
import math

import pytest
from test_train_imported import _splits
from test_tzrec_multitask import HEADS, TOWER, multitask_config

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.tzrec import import_tzrec


def simple_config() -> str:
    towers = TOWER.format(name="ctr", label="clk", extra="") + TOWER.format(name="cvr", label="buy", extra="")
    return multitask_config("mmoe").replace("mmoe {" + HEADS["mmoe"], "simple_multi_task {" + towers)


def test_simple_multi_task_imports_its_task_towers_over_group_all():
    imported = import_tzrec(simple_config())
    assert "0 refused" in imported.summary
    model = imported.data["model"]
    assert model["type"] == "simple_multi_task" and model["towers"] == [{"group": "all"}]
    assert [(t["name"], t["label"], t["mlp"]) for t in model["task_towers"]] == [
        ("ctr", "clk", {"hidden_units": [32, 16]}),
        ("cvr", "buy", {"hidden_units": [32, 16]}),
    ]


@pytest.mark.slow
def test_imported_simple_multi_task_trains(tmp_path):
    data = copy.deepcopy(import_tzrec(simple_config()).data)
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            for key in ("num_buckets", "hash_bucket_size"):
                if item.get(key, 0) > 1000:
                    item[key] //= 100
    data["data"].update(batch_size=64, num_workers=0)
    data["train"].update(max_steps=12, log_every_steps=4, checkpoint_every_steps=1000)
    cfg = parse_config(data)
    train_uri, eval_uri = _splits("taobao", tmp_path / "data", 1000, 300)
    result = train(cfg, build_feature_spec(cfg), train_uri, eval_uri, tmp_path / "run")
    assert result.steps == 12 and set(result.eval["tasks"]) == {"clk", "buy"}
    assert all(math.isfinite(t["logloss"]) for t in result.eval["tasks"].values())
