"""TorchEasyRec's cross models (``dcn_v2``, ``dcn_v1``, ``mask_net``, ``xdeepfm``: rank_model.proto, module.proto)
import to recpipe's, field by field, with TorchEasyRec's defaults; what recpipe does not honour is refused at
its line; ``masknet_criteo``'s constructs (:func:`tzrec_fixtures.tzrec_criteo_dag`) import as shipped and
train on generated hashed Criteo rows."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
from tzrec_fixtures import MASKNET_MODEL, tzrec_criteo_dag, tzrec_deepfm

from recpipe.config import RecpipeConfig, parse_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.pipeline.params import synthetic_source_for
from recpipe.tzrec import TzrecImportError, import_tzrec

WIDE_DEEP_GROUPS = (
    'feature_groups { group_name: "wide" '
    + " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    + " group_type: WIDE }\n"
    + 'feature_groups { group_name: "deep" '
    + " ".join(f'feature_names: "int_{i}"' for i in range(13))
    + " "
    + " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    + " group_type: DEEP }"
)


def _refused(text: str) -> list:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    return err.value.problems


def test_masknet_criteo_imports_as_shipped():
    imported = import_tzrec(tzrec_criteo_dag(MASKNET_MODEL))
    model = imported.config.model
    assert model.type == "mask_net" and model.group == "all_features" and model.parallel
    assert model.num_blocks == 3 and model.mask_block.hidden_dim == 512
    assert model.mask_block.reduction_ratio == 3.0 and model.mask_block.aggregation_dim is None
    assert model.top_mlp.hidden_units == [256, 128, 64]
    groups = imported.config.feature_groups
    assert [(g.name, g.type, len(g.features)) for g in groups] == [("all_features", "deep", 39)]
    # The raw features' embedding_dim (no boundaries, no mlp/autodis) has no effect in TorchEasyRec either.
    notes = [n.path for n in imported.notes if n.path.endswith("raw_feature.embedding_dim")]
    assert len(notes) == 13


def test_dcn_v2_maps_backbone_cross_deep_final_and_its_defaults():
    model = "dcn_v2 { backbone { hidden_units: [64] } cross { low_rank: 8 } deep { hidden_units: [32] } final { hidden_units: [16] } }"
    imported = import_tzrec(tzrec_criteo_dag(model))
    m = imported.config.model
    assert m.type == "dcn_v2" and m.group == "all_features"
    assert (m.cross.num_layers, m.cross.low_rank) == (3, 8)  # cross_num's default 3
    assert m.backbone.hidden_units == [64] and m.deep.hidden_units == [32] and m.final.hidden_units == [16]
    bare = import_tzrec(tzrec_criteo_dag("dcn_v2 { cross { } final { hidden_units: [16] } }")).config.model
    assert (bare.cross.num_layers, bare.cross.low_rank, bare.backbone, bare.deep) == (3, 32, None, None)


def test_dcn_v1_maps_cross_num_deep_and_final():
    model = "dcn_v1 { cross { cross_num: 2 } deep { hidden_units: [32] use_bn: true } final { hidden_units: [16] } }"
    imported = import_tzrec(tzrec_criteo_dag(model))
    m = imported.config.model
    assert (
        m.type == "dcn_v1" and m.cross.num_layers == 2 and m.deep.batch_norm and m.final.hidden_units == [16]
    )


def test_xdeepfm_reads_wide_and_deep_with_16_wide_dims_by_default():
    model = (
        "xdeepfm { cin { cin_layer_size: [8, 8] } deep { hidden_units: [32] } final { hidden_units: [16] } }"
    )
    imported = import_tzrec(tzrec_deepfm(max_buckets=1000, model=model, groups=WIDE_DEEP_GROUPS))
    m = imported.config.model
    assert (
        m.type == "xdeepfm"
        and m.cin_layer_sizes == [8, 8]
        and (m.wide_group, m.deep_group) == ("wide", "deep")
    )
    wide = next(g for g in imported.config.feature_groups if g.name == "wide")
    assert wide.embedding_dim == 16  # xDeepFM's wide_embedding_dim default, not DeepFM's 4
    spec = build_feature_spec(imported.config)
    assert {t.embedding_dim for t in spec.tables() if t.name.endswith("_wide")} == {16}
    eight = model.replace("final {", "wide_embedding_dim: 8 final {")
    imported = import_tzrec(tzrec_deepfm(max_buckets=1000, model=eight, groups=WIDE_DEEP_GROUPS))
    assert next(g for g in imported.config.feature_groups if g.name == "wide").embedding_dim == 8


def test_what_recpipe_does_not_honour_is_refused_at_its_line():
    no_top = "mask_net { mask_net_module { n_mask_blocks: 1 mask_block { hidden_dim: 8 } } }"
    assert any(
        p.path.endswith("mask_net_module.top_mlp") and p.line for p in _refused(tzrec_criteo_dag(no_top))
    )
    init = (
        "xdeepfm { cin { cin_layer_size: [8] } deep { hidden_units: [8] } final { hidden_units: [8] } "
        'wide_init_fn: "nn.init.zeros_" }'
    )
    problems = _refused(tzrec_deepfm(max_buckets=1000, model=init, groups=WIDE_DEEP_GROUPS))
    assert any("unsupported field 'wide_init_fn'" in p.message for p in problems)
    ln = "dcn_v2 { cross { } final { hidden_units: [16] use_ln: true } }"
    assert any("use_ln" in p.message and p.line for p in _refused(tzrec_criteo_dag(ln)))
    not_wide = WIDE_DEEP_GROUPS.replace("group_type: WIDE", "group_type: DEEP")
    model = "xdeepfm { cin { cin_layer_size: [8] } deep { hidden_units: [8] } final { hidden_units: [8] } }"
    problems = _refused(tzrec_deepfm(max_buckets=1000, model=model, groups=not_wide))
    assert "xdeepfm reads a feature group 'wide' of group_type WIDE; it is DEEP" in [
        p.message for p in problems
    ]
    zero = "mask_net { mask_net_module { n_mask_blocks: 1 mask_block { hidden_dim: 8 reduction_ratio: 0 } top_mlp { hidden_units: [4] } } }"
    assert any("reduction_ratio 0" in p.message for p in _refused(tzrec_criteo_dag(zero)))


def test_masknet_criteo_as_shipped_trains_on_generated_hashed_criteo(tmp_path):
    cfg = trains_on_generated_hashed_criteo(
        import_tzrec(tzrec_criteo_dag(MASKNET_MODEL, max_buckets=1000)).data, tmp_path
    )
    assert synthetic_source_for(cfg, 1300) == "synthetic:criteo?rows=1300&hashed=1"


def trains_on_generated_hashed_criteo(data: dict, tmp_path) -> RecpipeConfig:
    """An imported Criteo config's dict (its tables capped at import) trains 8 steps of 64 rows on 1,000
    generated hashed Criteo rows, logs two finite losses and evaluates the next 300; returns its config."""
    data["data"].update(batch_size=64, num_workers=0)
    data["train"].update(max_steps=8, log_every_steps=4, checkpoint_every_steps=1000)
    cfg = parse_config(data)
    generate("criteo", 1300, tmp_path / "all", seed=5, hashed=True)
    table = pq.read_table(tmp_path / "all")
    for name, part in (("train", table.slice(0, 1000)), ("eval", table.slice(1000))):
        (tmp_path / name).mkdir()
        pq.write_table(part, tmp_path / name / "part-00000.parquet")
    result = train(
        cfg, build_feature_spec(cfg), str(tmp_path / "train"), str(tmp_path / "eval"), tmp_path / "run"
    )
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert result.steps == 8 and len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert result.eval is not None and result.eval["rows"] == 300 and 0.0 <= result.eval["auc"] <= 1.0
    return cfg
