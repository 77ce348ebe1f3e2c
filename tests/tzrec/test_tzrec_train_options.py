"""TorchEasyRec train and data options the importer reads (written as TorchEasyRec's tzrec/tests/configs use
them): ``train_metrics`` (dssm_mock.config, dbmtl_has_sequence_mock.config), ``odps_data_compression``
(benchmark/configs/criteo/dlrm.config), Adam's ``beta1`` / ``beta2`` (hstu_kuairand_1k.config),
``mixed_precision`` (multi_tower_din_fg_mock_bf16_emb_fp16.config) and the refusal of ``custom_feature``."""

from __future__ import annotations

import pytest
from tzrec_fixtures import HEAD, small_din

from recpipe.config import OptimizerConfig
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.custom import CUSTOM_FEATURE_REFUSED
from recpipe.tzrec.models import TRAIN_METRICS_NOTE
from recpipe.tzrec.problems import TzrecImportError


def _notes(imported, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.message for n in imported.notes if n.path == path]


def test_train_metrics_are_read_as_recpipes_training_auc() -> None:
    extra = "train_metrics { auc { thresholds: 10000 } decay_step: 1 }\n    train_metrics { auc {} }"
    imported = import_tzrec(small_din(model_extra=extra))
    assert _notes(imported, "model_config.train_metrics") == [TRAIN_METRICS_NOTE]
    note = next(n for n in imported.notes if n.path == "model_config.train_metrics")
    assert note.line == small_din(model_extra=extra).splitlines().index("    " + extra.splitlines()[0]) + 1


def test_a_train_metric_recpipe_has_no_counterpart_for_is_refused_at_its_line() -> None:
    text = small_din(model_extra="train_metrics { recall_at_k { top_k: 5 } }")
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == "model_config.train_metrics[0].recall_at_k"
    assert "unsupported field 'recall_at_k'" in problem.message
    assert problem.line == next(i for i, line in enumerate(text.splitlines(), 1) if "recall_at_k" in line)


def test_a_task_towers_train_metrics_are_a_note() -> None:
    text = (
        HEAD.replace('label_fields: "clk"', 'label_fields: ["clk", "buy"]')
        + """\
feature_configs { id_feature { feature_name: "user_id" expression: "user:user_id" num_buckets: 100 embedding_dim: 8 } }
model_config {
    feature_groups { group_name: "all" feature_names: "user_id" group_type: DEEP }
    mmoe {
        expert_mlp { hidden_units: [8] }
        num_expert: 2
        task_towers {
            tower_name: "clk"
            label_name: "clk"
            train_metrics { auc {} decay_rate: 0.5 }
            losses { binary_cross_entropy {} }
        }
        task_towers { tower_name: "buy" label_name: "buy" losses { binary_cross_entropy {} } }
    }
}
"""
    )
    imported = import_tzrec(text)
    assert _notes(imported, "model_config.mmoe.task_towers[0].train_metrics") == [TRAIN_METRICS_NOTE]


def test_odps_data_compression_is_a_note() -> None:
    text = small_din().replace(
        "    fg_mode: FG_DAG\n", '    fg_mode: FG_DAG\n    odps_data_compression: "ZSTD"\n'
    )
    imported = import_tzrec(text)
    (message,) = _notes(imported, "data_config.odps_data_compression")
    assert message.startswith("ignored: a transfer setting of MaxCompute's storage API")


@pytest.mark.parametrize(
    ("block", "betas"),
    [
        ("adam_optimizer { lr: 0.001 beta1: 0.8 beta2: 0.99 }", [0.8, 0.99]),
        ("adam_optimizer { lr: 0.001 beta1: 0.5 }", [0.5, 0.999]),  # beta2 keeps TorchEasyRec's default
        ("adam_optimizer { lr: 0.001 }", None),
    ],
)
def test_dense_adam_betas_map_to_the_optimizer(block: str, betas: list[float] | None) -> None:
    text = small_din().replace("adam_optimizer { lr: 0.001 }", block)
    imported = import_tzrec(text)
    dense = imported.data["train"]["dense_optimizer"]
    assert dense.get("betas") == betas
    assert tuple(imported.config.train.dense_optimizer.betas) == tuple(betas or (0.9, 0.999))


def test_adam_eps_maps() -> None:
    text = small_din().replace("adam_optimizer { lr: 0.001 }", "adam_optimizer { lr: 0.001 eps: 1e-6 }")
    assert import_tzrec(text).config.train.dense_optimizer.eps == pytest.approx(1e-6)


def test_sparse_adam_betas_import_and_the_fused_optimizer_refuses_them() -> None:
    from recpipe.train.optim import check_sparse_optimizer

    text = small_din().replace(
        "adagrad_optimizer { lr: 0.01 }", "adam_optimizer { lr: 0.01 beta1: 0.9 beta2: 0.98 }"
    )
    sparse = import_tzrec(text).config.train.sparse_optimizer
    assert tuple(sparse.betas) == (0.9, 0.98)
    with pytest.raises(ValueError, match="fused embedding Adam keeps FBGEMM's"):
        check_sparse_optimizer(sparse, "cuda")


def test_betas_are_an_adam_setting() -> None:
    with pytest.raises(ValueError, match="betas is a setting of adam"):
        OptimizerConfig(type="adagrad", lr=0.1, betas=(0.5, 0.9))
    with pytest.raises(ValueError, match=r"must each be in \[0, 1\)"):
        OptimizerConfig(type="adam", lr=0.1, betas=(0.9, 1.0))


def test_dense_adam_gets_the_betas() -> None:
    import torch

    from recpipe.train.optim import _kwargs

    assert _kwargs(OptimizerConfig(type="adam", lr=0.1, betas=(0.8, 0.9)))["betas"] == (0.8, 0.9)
    assert "betas" not in _kwargs(OptimizerConfig(type="adam", lr=0.1))
    opt = torch.optim.Adam(
        [torch.nn.Parameter(torch.zeros(1))],
        **_kwargs(OptimizerConfig(type="adam", lr=0.1, betas=(0.8, 0.9))),
    )
    assert opt.param_groups[0]["betas"] == (0.8, 0.9)


@pytest.mark.parametrize(("value", "mapped"), [("BF16", "bf16"), ("FP16", "fp16")])
def test_mixed_precision_maps(value: str, mapped: str) -> None:
    text = small_din().replace("train_config {\n", f'train_config {{\n    mixed_precision: "{value}"\n')
    assert import_tzrec(text).config.train.mixed_precision == mapped


def test_an_unknown_mixed_precision_is_refused() -> None:
    text = small_din().replace("train_config {\n", 'train_config {\n    mixed_precision: "bf16"\n')
    with pytest.raises(TzrecImportError, match="mixed_precision 'bf16' is not 'BF16' or 'FP16'"):
        import_tzrec(text)


CUSTOM = """\
feature_configs {
    custom_feature {
        feature_name: "edit_distance"
        operator_name: "EditDistance"
        operator_lib_file: "pyfg/lib/libedit_distance.so"
        expression: ["user:query", "item:title"]
        operator_params { fields { key: "encoding" value { string_value: "utf-8" } } }
    }
}
"""


def _with_custom() -> str:
    text = small_din().replace("model_config {", CUSTOM + "model_config {", 1)
    return text.replace(
        'feature_names: ["user_id", "adgroup_id"]',
        'feature_names: ["user_id", "adgroup_id", "edit_distance"]',
    )


def test_custom_feature_is_refused_saying_why() -> None:
    text = _with_custom()
    assert text.count('"edit_distance"') == 2  # defined and used in a group
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.message == CUSTOM_FEATURE_REFUSED
    assert "compiled FG operator" in problem.message and "--drop-custom-features" in problem.message
    assert problem.line == text.splitlines().index("    custom_feature {") + 1


def test_drop_custom_features_leaves_them_out_and_names_each() -> None:
    """The opt-in: the custom feature and its uses in feature groups are left out, each named in a note at
    its line and in ``dropped``; everything else imports as without it."""
    text = _with_custom()
    imported = import_tzrec(text, drop_custom_features=True)
    assert imported.dropped == ["edit_distance"]
    assert "edit_distance" not in {f.name for f in imported.config.features}
    assert all("edit_distance" not in g.features for g in imported.config.feature_groups)
    (note,) = [n for n in imported.notes if "edit_distance" in n.message]
    assert note.line == text.splitlines().index("    custom_feature {") + 1
    assert "dropped (--drop-custom-features)" in note.message and "EditDistance" in note.message
    assert imported.data == import_tzrec(small_din()).data
