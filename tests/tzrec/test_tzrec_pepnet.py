"""TorchEasyRec's PEPNet (``examples/pepnet_taobao.config``'s constructs: groups ``all``, ``domain`` and ``uia``,
``ppnet_hidden_units`` / ``ppnet_dropout_ratio``, task towers with a task space, ``domain_input_name`` with
``task_domain_num`` and a third label ``occupation``): mapped field by field, with and without the domain towers,
and both imported configs trained on generated Taobao rows (whose ``occupation`` is a user's, 0 or 1)."""

from __future__ import annotations

import re

import pytest
from test_tzrec_multitask import trains_on_generated_taobao
from tzrec_fixtures import DIN_CONFIG

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.tzrec import TzrecImportError, import_tzrec

UIA = ["user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level", "shopping_level",
       "new_user_class_level", "adgroup_id", "cate_id", "campaign_id", "brand", "price"]  # fmt: skip
TOWERS = """
        task_towers { tower_name: "ctr" label_name: "clk" mlp { hidden_units: [32, 16] }
            metrics { auc {} } losses { binary_cross_entropy {} } }
        task_towers { tower_name: "cvr" label_name: "buy" mlp { hidden_units: [32, 16] }
            metrics { auc { thresholds: 1000 } } losses { binary_cross_entropy {} }
            task_space_indicator_label: "clk" in_task_space_weight: 1 out_task_space_weight: 0 }"""


def pepnet_config(domains: bool) -> str:
    """The DIN fixture's features, labels clk and buy (and occupation with ``domains``), pepnet_taobao's groups."""
    text = DIN_CONFIG.read_text()
    labels = 'label_fields: "clk"\n    label_fields: "buy"' + (
        '\n    label_fields: "occupation"' if domains else ""
    )
    text = text.replace('label_fields: "clk"', labels)
    head = text[: text.index("model_config {")]
    deep = re.search(r'group_name: "deep"(.*?)group_type: DEEP', text, re.S).group(1)
    uia = " ".join(f'feature_names: "{f}"' for f in UIA)
    domain = "domain_input_name: 'occupation' task_domain_num: 3" if domains else ""
    return (
        head
        + f"""model_config {{
    feature_groups {{ group_name: "all"{deep}group_type: DEEP }}
    feature_groups {{ group_name: "domain" feature_names: "occupation" group_type: DEEP }}
    feature_groups {{ group_name: "uia" {uia} group_type: DEEP }}
    pepnet {{
        {domain}
        ppnet_hidden_units: [64, 32]
        ppnet_dropout_ratio: [0.1, 0.1]{TOWERS}
    }}
}}
"""
    )


def test_domain_towers_map_to_domain_label_and_task_domain_num():
    imported = import_tzrec(pepnet_config(domains=True), "pepnet_taobao.config")
    model, data = imported.data["model"], imported.data["data"]
    assert (model["domain_label"], model["task_domain_num"]) == ("occupation", 3)
    assert data["label_fields"] == ["clk", "buy", "occupation"]
    cfg = parse_config(imported.data)
    spec = build_feature_spec(cfg)
    assert (spec.task_labels, spec.domain_label, spec.domain_num) == (["clk", "buy"], "occupation", 3)
    assert spec.output_columns()[:4] == [
        "probability_clk_0",
        "probability_clk_1",
        "probability_clk_2",
        "probability_buy_0",
    ]
    # TorchEasyRec reads labels by name: a domain label listed first is moved last, with a note
    moved = pepnet_config(domains=True).replace(
        'label_fields: "clk"', 'label_fields: "occupation"\n    label_fields: "clk"', 1
    )
    moved = moved.replace('label_fields: "buy"\n    label_fields: "occupation"', 'label_fields: "buy"')
    imported = import_tzrec(moved)
    assert imported.data["data"]["label_fields"] == ["clk", "buy", "occupation"]
    assert any(n.path == "data_config.label_fields" and "moved last" in n.message for n in imported.notes)
    missing = pepnet_config(domains=True).replace(
        "domain_input_name: 'occupation'", "domain_input_name: 'pid'"
    )
    with pytest.raises(TzrecImportError, match="'pid' is not one of data_config.label_fields"):
        import_tzrec(missing)
    without = pepnet_config(domains=False).replace(
        "ppnet_hidden_units", "task_domain_num: 2 ppnet_hidden_units"
    )
    with pytest.raises(TzrecImportError, match="task_domain_num counts only with domain_input_name"):
        import_tzrec(without)


def test_pepnet_maps_its_groups_gates_and_towers():
    model = import_tzrec(pepnet_config(domains=False)).data["model"]
    assert model["type"] == "pepnet" and model["towers"] == [{"group": g} for g in ("all", "domain", "uia")]
    assert (model["domain_group"], model["uia_group"]) == ("domain", "uia")
    assert model["ppnet_hidden_units"] == [64, 32] and model["ppnet_dropout"] == 0.1
    assert model["task_towers"][1]["task_space_indicator_label"] == "clk"
    assert model["task_towers"][1]["out_task_space_weight"] == 0.0
    text = pepnet_config(domains=False).replace("[0.1, 0.1]", "[0.1, 0.2]")
    with pytest.raises(TzrecImportError, match="one dropout for all PPNet layers"):
        import_tzrec(text)


@pytest.mark.slow
@pytest.mark.parametrize("domains", [False, True])
def test_imported_pepnet_taobao_trains(domains, tmp_path):
    trains_on_generated_taobao(import_tzrec(pepnet_config(domains=domains)).data, tmp_path)
