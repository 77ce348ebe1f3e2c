"""TorchEasyRec's multi-task configs (dbmtl_taobao, mmoe_taobao, ple_taobao) import and train.

The fixtures reproduce their constructs on this folder's Taobao features: ``label_fields`` clk and buy, one DEEP
group ``all`` that the model reads as it is (TorchEasyRec's multi-task models take
``embedding_group.group_names()[0]``), task towers with ``tower_name``/``label_name``/``mlp``/``metrics``/
``losses``, DBMTL's ``bottom_mlp`` and ``relation_tower_names``/``relation_mlp`` (tzrec/models/dbmtl.py), MMoE's
``expert_mlp``/``num_expert`` (tzrec/modules/mmoe.py) and PLE's ``extraction_networks`` (tzrec/modules/extraction_net.py).
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
from test_train_imported import _splits
from tzrec_fixtures import DIN_CONFIG

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError

TOWER = """
        task_towers {{
            tower_name: "{name}"
            label_name: "{label}"
            mlp {{ hidden_units: [32, 16] }}
            metrics {{ auc {{ thresholds: 1000 }} }}
            losses {{ binary_cross_entropy {{}} }}
            {extra}
        }}"""
HEADS = {
    "dbmtl": "bottom_mlp { hidden_units: [64] }"
    + TOWER.format(name="ctr", label="clk", extra="")
    + TOWER.format(
        name="cvr", label="buy", extra='relation_tower_names: "ctr" relation_mlp { hidden_units: [16] }'
    ),
    "mmoe": "expert_mlp { hidden_units: [64, 32] } num_expert: 3"
    + TOWER.format(name="ctr", label="clk", extra="")
    + TOWER.format(name="cvr", label="buy", extra=""),
    "ple": """
        extraction_networks { network_name: "layer1" expert_num_per_task: 2 share_num: 2
            task_expert_net { hidden_units: [64, 32] } share_expert_net { hidden_units: [64, 32] } }
        extraction_networks { network_name: "layer2" expert_num_per_task: 3 share_num: 3
            task_expert_net { hidden_units: [32, 16] } share_expert_net { hidden_units: [32, 16] } }"""
    + TOWER.format(name="ctr", label="clk", extra="")
    + TOWER.format(name="cvr", label="buy", extra=""),
}


def multitask_config(kind: str) -> str:
    """The DIN fixture's data and features with two labels and a ``kind`` model over group ``all``."""
    text = DIN_CONFIG.read_text()
    text = text.replace('label_fields: "clk"', 'label_fields: "clk"\n    label_fields: "buy"')
    head = text[: text.index("model_config {")]
    deep = re.search(r'group_name: "deep"(.*?)group_type: DEEP', text, re.S).group(1)
    return (
        head
        + f"""model_config {{
    feature_groups {{
        group_name: "all"{deep}group_type: DEEP
    }}
    {kind} {{{HEADS[kind]}
    }}
}}
"""
    )


@pytest.mark.parametrize("kind", ["dbmtl", "mmoe", "ple"])
def test_multitask_config_imports_as_shipped_and_trains(kind, tmp_path):
    imported = import_tzrec(multitask_config(kind), f"{kind}_taobao.config")
    assert "0 refused" in imported.summary
    data = imported.data
    assert data["data"]["label_fields"] == ["clk", "buy"] and "label" not in data["data"]
    model = data["model"]
    assert model["type"] == kind and model["towers"] == [{"group": "all"}]
    assert [(t["name"], t["label"]) for t in model["task_towers"]] == [("ctr", "clk"), ("cvr", "buy")]
    if kind == "dbmtl":
        assert model["bottom_mlp"] == {"hidden_units": [64]} and "expert_mlp" not in model
        assert model["task_towers"][1]["relation_tower_names"] == ["ctr"]
    if kind == "mmoe":
        assert model["num_experts"] == 3
    if kind == "ple":
        assert [n["share_num"] for n in model["extraction_networks"]] == [2, 3]
    # It trains on generated Taobao rows (which have clk and buy), tables shrunk as in test_train_imported.
    trains_on_generated_taobao(data, tmp_path)


def test_unsupported_multitask_parts_are_reported_once_each():
    """A task tower's loss other than binary cross-entropy is refused, once, at its line."""
    text = multitask_config("dbmtl").replace(
        "losses { binary_cross_entropy {} }", "losses { binary_cross_entropy {} } losses { l2_loss {} }", 1
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text, "x.config")
    found = err.value.problems
    assert len(found) == 1 and "l2_loss" in found[0].message and found[0].line is not None, found


SPACE = 'task_space_indicator_label: "clk" in_task_space_weight: 1 out_task_space_weight: 0'


@pytest.mark.parametrize("kind", ["mmoe", "dbmtl"])
def test_task_space_weights_import(kind):
    """tzrec/benchmark/configs/taobao/mmoe.config's cvr tower: ``task_space_indicator_label: "clk"
    in_task_space_weight: 1 out_task_space_weight: 0`` (TaskTower fields 9-11, BayesTaskTower's 11-13)."""
    text = multitask_config(kind)
    cvr = text.rindex('tower_name: "cvr"')
    text = text[:cvr] + SPACE + " " + text[cvr:]
    towers = import_tzrec(text, f"{kind}.config").data["model"]["task_towers"]
    assert "task_space_indicator_label" not in towers[0]
    assert {k: v for k, v in towers[1].items() if "task_space" in k} == {
        "task_space_indicator_label": "clk",
        "out_task_space_weight": 0.0,
    }


def test_an_mmoe_with_a_task_space_trains(tmp_path):
    text = multitask_config("mmoe")
    cvr = text.rindex('tower_name: "cvr"')
    text = (
        text[:cvr]
        + 'task_space_indicator_label: "clk" in_task_space_weight: 2 out_task_space_weight: 0.5 '
        + text[cvr:]
    )
    data = import_tzrec(text, "mmoe.config").data
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            for key in ("num_buckets", "hash_bucket_size"):
                if item.get(key, 0) > 1000:
                    item[key] //= 100
    data["data"].update(batch_size=64, num_workers=0)
    data["train"].update(max_steps=8, log_every_steps=4, checkpoint_every_steps=1000)
    cfg = parse_config(data)
    assert cfg.model.task_spaces() == [None, (0, 2.0, 0.5)]
    train_uri, eval_uri = _splits("taobao", tmp_path / "data", 1000, 300)
    result = train(cfg, build_feature_spec(cfg), train_uri, eval_uri, tmp_path / "run")
    assert result.steps == 8 and all(math.isfinite(t["logloss"]) for t in result.eval["tasks"].values())


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            'task_space_indicator_label: "cart"',
            "task_space_indicator_label 'cart' is not one of data.label_fields",
        ),
        ("out_task_space_weight: 0", "task_space_indicator_label is not"),
    ],
)
def test_a_task_space_needs_a_label_of_the_data(space, message):
    text = multitask_config("mmoe")
    cvr = text.rindex('tower_name: "cvr"')
    text = text[:cvr] + space + " " + text[cvr:]
    with pytest.raises(Exception, match=message):
        import_tzrec(text, "mmoe.config")


def trains_on_generated_taobao(data: dict, tmp_path: Path) -> None:
    """An imported multi-task config's dict trains 12 steps on generated Taobao rows (which have clk and buy),
    its tables shrunk as in test_train_imported, and evaluates both tasks to finite loglosses."""
    small = copy.deepcopy(data)
    for f in small["features"]:
        for item in (f, *f.get("sub_features", [])):
            for key in ("num_buckets", "hash_bucket_size"):
                if item.get(key, 0) > 1000:
                    item[key] //= 100
    small["data"].update(batch_size=64, num_workers=0)
    small["train"].update(max_steps=12, log_every_steps=4, checkpoint_every_steps=1000)
    cfg = parse_config(small)
    train_uri, eval_uri = _splits("taobao", tmp_path / "data", 1000, 300)
    result = train(cfg, build_feature_spec(cfg), train_uri, eval_uri, tmp_path / "run")
    assert result.steps == 12 and set(result.eval["tasks"]) == {"clk", "buy"}
    assert all(math.isfinite(t["logloss"]) for t in result.eval["tasks"].values())
