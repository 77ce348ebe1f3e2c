"""Each unsupported thing is reported once, a summary line counts mapped / ignored / refused fields, and
train_config fields with a recpipe counterpart are mapped."""

import re

import pytest
from tzrec_fixtures import small_din

from recpipe.tzrec import TzrecImportError, import_tzrec


def _problems(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    return [(p.line, p.path, p.message) for p in err.value.problems]


def test_an_unsupported_model_is_one_problem():
    """TorchEasyRec's ModelConfig holds one model of its ``model`` oneof (tzrec/protos/model.proto)."""
    problems = _problems(small_din().replace("multi_tower_din {", "dat {"))
    assert problems == [
        (
            40,
            "model_config.dat",
            "model 'dat' is not supported; supported: multi_tower_din, multi_tower, dlrm, deepfm, "
            "wide_and_deep, mmoe, dbmtl, ple, dcn_v2, dcn_v1, mask_net, xdeepfm, wukong, pepnet, simple_multi_task, "
            "rocket_launching, dssm, dssm_v2, mind",
        )
    ]


def test_pre_encoded_input_needs_no_expressions_and_refuses_only_what_it_cannot_hold():
    """TorchEasyRec's FG_NONE configs read each feature by name and write no ``expression``: no "missing
    expression" problems (a pre-encoded history reads one column per sub-feature), and FG_BUCKETIZE (generated
    but not bucketized) is one problem at fg_mode."""
    text = re.sub(r'\s*expression: "[^"]*"', "", small_din().replace("FG_DAG", "FG_NONE"))
    assert "expression" not in text
    assert import_tzrec(text).config.data.fg_encoded
    problems = _problems(small_din().replace("FG_DAG", "FG_BUCKETIZE"))
    assert [p[1] for p in problems] == ["data_config.fg_mode"]


def test_an_unsupported_feature_type_is_one_problem_not_one_per_group_that_names_it():
    text = small_din().replace(
        "model_config {",
        'feature_configs { sequence_combo_feature { feature_name: "hist" expression: "user:hist" } }\nmodel_config {',
    )
    text = text.replace('feature_names: "click_50_seq__adgroup_id"', 'feature_names: "hist"')
    problems = _problems(text)
    assert len(problems) == 1 and problems[0][1] == "feature_configs[3].sequence_combo_feature"


def _train(extra: str):
    text = small_din().replace("    dense_optimizer {", f"    {extra}\n    dense_optimizer {{", 1)
    return import_tzrec(text)


def test_save_checkpoints_epochs_at_the_end_maps_to_recpipes_final_checkpoint():
    """TorchEasyRec saves every save_checkpoints_epochs epochs and then ignores save_checkpoints_steps
    (tzrec/main.py); one epoch of one is the checkpoint at the end that recpipe always writes."""
    train = _train("num_epochs: 1 save_checkpoints_epochs: 1 keep_checkpoint_max: 5").config.train
    assert (train.checkpoint_every_steps, train.keep_last_checkpoints, train.epochs) == (None, 5, 1)
    default = _train("").config.train
    assert default.checkpoint_every_steps == 1000  # TorchEasyRec's save_checkpoints_steps default
    # 0: no periodic checkpoint (tzrec/main.py saves by steps only when > 0), the final one only; its
    # benchmark's criteo/dlrm.config says so, and once failed to import with a config error.
    assert _train("save_checkpoints_steps: 0").config.train.checkpoint_every_steps is None
    with pytest.raises(
        TzrecImportError, match=r"a checkpoint every 1 of 3 epochs has no recpipe counterpart"
    ):
        _train("num_epochs: 3 save_checkpoints_epochs: 1")


def test_tensorboard_and_tf32_switches_are_notes_and_the_summary_counts_them():
    imported = _train("use_tensorboard: false cudnn_allow_tf32: false")
    assert [n.path for n in imported.notes] == [
        "model_dir",
        "train_config.use_tensorboard",
        "train_config.cudnn_allow_tf32",
    ]
    mapped = int(imported.summary.split(": ")[1].split()[0])
    assert imported.summary == f"TorchEasyRec fields: {mapped} mapped, 3 ignored (notes say why), 0 refused"
    assert _train("").summary == f"TorchEasyRec fields: {mapped} mapped, 1 ignored (notes say why), 0 refused"
    assert f"# {imported.summary}" in imported.to_yaml()
