"""TorchEasyRec's step options the importer maps (written as tzrec/tests/configs'
multi_tower_din_fg_mock_gradient_clipping / _fp16_ga / _adagrad_init_acc use them): the fused optimizers'
``gradient_clipping`` / ``max_gradient``, ``grad_clipping``, ``grad_scaler``, ``gradient_accumulation_steps``,
``initial_accumulator_value`` and ``global_embedding_constraints``; and what stays refused."""

from __future__ import annotations

import pytest
from tzrec_fixtures import small_din

from recpipe.config import ConfigError
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError


def _with(sparse: str = "", train: str = "") -> str:
    text = small_din()
    text = text.replace("adagrad_optimizer { lr: 0.01 }", f"adagrad_optimizer {{ lr: 0.01 {sparse} }}")
    return text.replace("train_config {\n", f"train_config {{\n    {train}\n")


def test_gradient_clipping_config_maps():
    text = _with(
        "gradient_clipping: true max_gradient: 0.5",
        'grad_clipping { clipping_type: "norm" max_gradient: 1.0 norm_type: 2.0 }',
    )
    train = import_tzrec(text).config.train
    assert train.sparse_optimizer.gradient_clipping and train.sparse_optimizer.max_gradient == 0.5
    assert (train.grad_clip_norm, train.grad_clip_norm_type, train.grad_clip_value) == (1.0, 2.0, None)


def test_value_clipping_and_global_clip_note():
    text = _with(
        train='grad_clipping { clipping_type: "VALUE" max_gradient: 0.25 enable_global_grad_clip: true }'
    )
    imported = import_tzrec(text)
    assert (imported.config.train.grad_clip_value, imported.config.train.grad_clip_norm) == (0.25, None)
    (note,) = [n for n in imported.notes if n.path == "train_config.grad_clipping.enable_global_grad_clip"]
    assert "clips locally" in note.message


def test_clipping_type_none_clips_nothing_and_an_unknown_one_is_refused():
    train = import_tzrec(_with(train='grad_clipping { clipping_type: "none" }')).config.train
    assert train.grad_clip_norm is None and train.grad_clip_value is None
    with pytest.raises(TzrecImportError, match="clipping_type 'l1' is not norm, value or none"):
        import_tzrec(_with(train='grad_clipping { clipping_type: "l1" }'))


def test_fp16_gradient_accumulation_config_maps_with_torchs_scaler_defaults():
    text = _with(train="mixed_precision: 'FP16'\n    grad_scaler {}\n    gradient_accumulation_steps: 4")
    train = import_tzrec(text).config.train
    assert train.mixed_precision == "fp16" and train.gradient_accumulation_steps == 4
    assert train.grad_scaler.model_dump() == {
        "init_scale": 65536.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    assert train.checkpoint_every_steps == 1000  # TorchEasyRec's default, a multiple of 4


def test_a_grad_scaler_without_fp16_or_with_sparse_sgd_is_refused():
    # refused by the config's validation (recpipe.config.root.TrainConfig), which names train.grad_scaler's why
    with pytest.raises(ConfigError, match="grad_scaler scales the loss for fp16"):
        import_tzrec(_with(train="grad_scaler { init_scale: 8 }"))
    text = _with(train="mixed_precision: 'FP16'\n    grad_scaler {}").replace(
        "adagrad_optimizer { lr: 0.01  }", "sgd_optimizer { lr: 0.01 }"
    )
    with pytest.raises(ConfigError, match="sparse sgd would take steps init_scale times too large"):
        import_tzrec(text)


def test_adagrad_initial_accumulator_and_global_constraints_map():
    text = _with(
        "initial_accumulator_value: 0.1",
        "global_embedding_constraints { sharding_types: ['table_wise', 'row_wise'] }",
    )
    train = import_tzrec(text).config.train
    assert train.sparse_optimizer.initial_accumulator_value == pytest.approx(0.1)
    assert train.sharding_types == ["table_wise", "row_wise"]


def test_compute_kernels_and_an_unknown_sharding_type_are_refused_at_their_lines():
    text = _with(
        train="global_embedding_constraints { sharding_types: 'grid_shard' compute_kernels: 'fused' }"
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    paths = {p.path: p for p in err.value.problems}
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "global_embedding_constraints" in x)
    kernels = paths["train_config.global_embedding_constraints.compute_kernels"]
    assert "unsupported field 'compute_kernels'" in kernels.message and kernels.line == line
    assert (
        "'grid_shard' is not one of"
        in paths["train_config.global_embedding_constraints.sharding_types[0]"].message
    )
