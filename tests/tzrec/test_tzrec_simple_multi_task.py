"""TorchEasyRec's ``simple_multi_task`` (multi_task_rank.proto: only ``task_towers``; the model EasyRec's
converter maps to it) imports over group ``all`` and trains on generated Taobao rows."""

from __future__ import annotations

import pytest
from test_tzrec_multitask import HEADS, TOWER, multitask_config, trains_on_generated_taobao

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
    trains_on_generated_taobao(import_tzrec(simple_config()).data, tmp_path)
