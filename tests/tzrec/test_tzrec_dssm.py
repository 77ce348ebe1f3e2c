"""TorchEasyRec's DSSM and DSSMv2 (``examples/dssm_taobao.config``, ``dssm_v2_taobao.config``'s constructs,
``configs/dssm_taobao.config``): the negative sampler → ``data.negative_sampler``, the user group's pooled
history → ``sequence_pooling``, ``recall_at_k`` → ``eval.recall_at_k``, what is refused; and the imported configs
train with sampled negatives from a graph-learn item table built from generated Taobao rows."""

from __future__ import annotations

import copy
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from tzrec_fixtures import DSSM_CONFIG, dssm_v2_text, small_din

from recpipe.config import parse_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import evaluate_retrieval_from_config
from recpipe.features.build import build_feature_spec
from recpipe.train.retrieval import train_retrieval
from recpipe.train.retrieval_check import check_retrieval_train_config
from recpipe.tzrec import import_tzrec, import_tzrec_file
from recpipe.tzrec.problems import TzrecImportError

ATTRS = ["adgroup_id", "cate_id", "campaign_id", "customer", "brand", "price"]


def _problems(text: str) -> str:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text, "x.config")
    return str(err.value)


def test_dssm_imports_with_sampler_pooling_and_recall() -> None:
    imported = import_tzrec_file(DSSM_CONFIG)
    cfg = imported.config
    assert cfg.model.type == "dssm" and cfg.model.output_dim == 32 and cfg.model.similarity == "inner_product"
    assert cfg.model.user_tower.group == "user" and cfg.model.user_tower.mlp.hidden_units == [256, 128]
    assert [(p.group, p.pooling) for p in cfg.model.user_tower.sequence_pooling] == [("click_50_seq", "mean")]
    assert cfg.model.item_tower.sequence_pooling == []
    ns = cfg.data.negative_sampler
    assert ns is not None and ns.input_path == "odps://{PROJECT}/tables/taobao_ad_feature_gl"
    assert (ns.item_id_field, ns.num_sample, ns.attr_fields, ns.attr_delimiter) == (
        "adgroup_id",
        512,
        ATTRS,
        "\x02",
    )
    assert cfg.data.params == {"PROJECT": None} and cfg.eval.recall_at_k == [1, 5]
    groups = {g.name: (g.type, g.features) for g in cfg.feature_groups}
    assert groups["click_50_seq"] == (
        "sequence",
        [f"click_50_seq__{n}" for n in ("adgroup_id", "cate_id", "brand")],
    )
    assert [n.path for n in imported.notes] == ["model_dir", "train_config.save_checkpoints_steps"]
    # the proto's default interval is not applied to the retrieval trainer, which checkpoints once, at the end
    assert cfg.train.checkpoint_every_steps is None
    check_retrieval_train_config(cfg)  # `recpipe train` takes the imported config as it is


def test_dssm_imports_its_variational_dropout() -> None:
    """tzrec/tests/configs/dssm_variational_dropout_mock.config's construct: ``variational_dropout`` in the DSSM's
    model_config (each tower group's features dropped in training, its penalty in the loss)."""
    text = DSSM_CONFIG.read_text()
    vd = text.replace(
        "model_config {",
        "model_config {\n    variational_dropout {\n        regularization_lambda: 0.02\n    }",
        1,
    )
    for config in (
        vd,
        dssm_v2_text().replace("model_config {", "model_config {\n    variational_dropout {}", 1),
    ):
        cfg = import_tzrec(config, "x.config").config
        assert cfg.model.variational_dropout is not None
    assert import_tzrec(vd, "x.config").config.model.variational_dropout.regularization_lambda == 0.02


def test_a_retrieval_models_checkpoint_interval_is_refused_at_its_line() -> None:
    text = DSSM_CONFIG.read_text()
    assert "save_checkpoints_steps" not in text
    explicit = text.replace("train_config {", "train_config {\n    save_checkpoints_steps: 500", 1)
    assert "train_config.save_checkpoints_steps" in _problems(explicit)
    assert "retrieval trainer writes one checkpoint, at the end" in _problems(explicit)
    none = import_tzrec(
        text.replace("train_config {", "train_config {\n    save_checkpoints_steps: 0", 1), "x"
    )
    assert none.config.train.checkpoint_every_steps is None
    assert "train_config.save_checkpoints_steps" not in [n.path for n in none.notes]


def test_dssm_v2_imports_and_notes_force_base_data_group() -> None:
    imported = import_tzrec(dssm_v2_text(), "dssm_v2.config")
    assert imported.config.model.type == "dssm_v2"
    assert imported.config.model.user_tower.sequence_pooling[0].group == "click_50_seq"
    assert "data_config.force_base_data_group" in [n.path for n in imported.notes]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("recall_at_k { top_k: 1 }", "auc {}", "dssm is evaluated by recall_at_k only"),
        ("softmax_cross_entropy {}", "binary_cross_entropy {}", "dssm trains softmax_cross_entropy"),
        ("output_dim: 32", "output_dim: 32 similarity: EUCLID", "similarity EUCLID is not supported"),
        ('pooling_type: "mean"', 'pooling_type: "max"', "pooling_type 'max' is not 'mean' or 'sum'"),
        ('pooling_type: "mean"', "max_seq_length: 20", "set sequence_length to 20 instead"),
        (
            'pooling_encoder { input: "click_50_seq" pooling_type: "mean" }',
            'din_encoder { input: "click_50_seq" attn_mlp { hidden_units: [8] } }',
            "recpipe's dssm reads a sequence group through a pooling_encoder, not a din_encoder",
        ),
        (
            'input: "click_50_seq" pooling_type',
            'input: "clicks" pooling_type',
            "input 'clicks' is not one of",
        ),
    ],
    ids=["auc", "bce", "euclid", "max_pooling", "max_seq_length", "din_encoder", "unknown_input"],
)
def test_dssm_refusals(old: str, new: str, expected: str) -> None:
    text = DSSM_CONFIG.read_text()
    assert old in text
    assert expected in _problems(text.replace(old, new, 1))


def test_sampler_needed_and_only_for_retrieval() -> None:
    text = DSSM_CONFIG.read_text()
    start, end = text.index("    negative_sampler {"), text.index("feature_configs")
    without = text[:start] + "}\n" + text[end:]
    assert (
        "dssm without in_batch_negative trains on sampled negatives: it needs a negative_sampler"
        in _problems(without)
    )
    in_batch = without.replace("output_dim: 32", "output_dim: 32 in_batch_negative: true")
    assert import_tzrec(in_batch).config.model.in_batch_negative is True
    din = small_din(model_extra="metrics { recall_at_k { top_k: 5 } }")
    assert "recall_at_k is a retrieval model's metric" in _problems(din)
    sampler = 'negative_sampler { input_path: "items" num_sample: 4 attr_fields: "adgroup_id" item_id_field: "adgroup_id" }'
    din = small_din().replace('label_fields: "clk"', f'label_fields: "clk"\n    {sampler}')
    assert "a negative sampler feeds a retrieval model" in _problems(din)


def _gl_item_table(rows: pa.Table, path) -> None:
    """graph-learn's ``id | weight | attrs`` of the rows' distinct ads, attrs joined by ``\\x02`` (a missing brand
    an empty part), as TorchEasyRec's taobao_ad_feature_gl table. Uniform weights: the negatives are then less
    popular than the positives (Zipf), a signal 40 steps learn; weights ∝ the rows would leave only the
    user-ad match."""
    ids, first = np.unique(rows.column("adgroup_id").to_numpy(), return_index=True)
    firsts = rows.take(pa.array(first))
    parts = [pc.fill_null(pc.cast(firsts.column(a), pa.string()), "") for a in ATTRS]
    attrs = pc.binary_join_element_wise(*parts, "\x02")
    table = pa.table({"id": ids, "weight": np.ones(len(ids)), "attrs": attrs})
    pq.write_table(table, path)


def _tiny(data: dict, items: str) -> dict:
    data = copy.deepcopy(data)
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            if "num_buckets" in item and item["num_buckets"] > 1000:
                item["num_buckets"] //= 100
    data["data"].update(batch_size=64, num_workers=0, params={"PROJECT": "unused"})
    data["data"]["negative_sampler"].update(input_path=items, num_sample=32)
    for side in ("user_tower", "item_tower"):
        data["model"][side]["mlp"]["hidden_units"] = [32, 16]
    data["model"]["output_dim"] = 16
    data["train"]["sparse_optimizer"]["lr"] = 0.1
    data["train"]["dense_optimizer"]["lr"] = 0.01
    data["train"]["max_steps"] = 40
    return data


@pytest.fixture(scope="module")
def taobao(tmp_path_factory):
    root = tmp_path_factory.mktemp("dssm_taobao")
    generate("taobao", 2000, root / "rows", seed=3)
    rows = pq.read_table(root / "rows")
    _gl_item_table(rows, root / "items.parquet")
    return rows.slice(0, 1700), rows.slice(1700), str(root / "items.parquet")


@pytest.mark.parametrize("kind", ["dssm", "dssm_v2"])
def test_imported_dssm_trains_with_sampled_negatives(taobao, kind) -> None:
    train_rows, eval_rows, items = taobao
    imported = import_tzrec_file(DSSM_CONFIG) if kind == "dssm" else import_tzrec(dssm_v2_text())
    cfg = parse_config(_tiny(imported.data, items))
    spec = build_feature_spec(cfg)
    torch.set_num_threads(1)
    run = train_retrieval(cfg, spec, train_rows)  # items, num_sample and steps from the config
    assert len(run.losses) == 40 and all(math.isfinite(x) for x in run.losses)
    # 1 positive among 1 + 32 negatives: log(33) = 3.50 at chance
    assert abs(run.losses[0] - math.log(33)) < 1.0 and np.mean(run.losses[-10:]) < run.losses[0] - 0.15
    tables = [n for n, _ in run.model.named_parameters() if "embeddings." in n]
    owners = {n.split(".")[0] for n in tables}
    assert owners == ({"shared_embeddings"} if kind == "dssm_v2" else {"user_embeddings", "item_embeddings"})
    assert any("click_50_seq__adgroup_id" in n for n in tables)  # the pooled history has its tables
    scores = evaluate_retrieval_from_config(cfg, run.model, spec, eval_rows)
    assert sorted(scores) == [1, 5] and scores[1].queries == 300
    assert 0.0 <= scores[1].recall <= scores[5].recall <= 1.0
