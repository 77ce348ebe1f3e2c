"""Single-process training in this process (a 1-rank gloo group): loss falls, metrics, checkpoints,
resume, evaluation of the checkpoint, DLRM."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recpipe.config import load_config
from recpipe.eval.checkpoint import evaluate_checkpoint, predict_dataset
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.train.checkpoint import latest_checkpoint, list_checkpoints, load_model_for_inference

OVERRIDES = {"data.batch_size": 64, "train.log_every_steps": 10, "train.checkpoint_every_steps": 40}


def _cfg(path: str, **extra):
    return load_config(path, {**OVERRIDES, **extra})


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def single_run(taobao, tmp_path_factory):
    cfg = _cfg(taobao["config"], **{"train.epochs": 2, "train.eval_every_steps": 100})
    out = tmp_path_factory.mktemp("single")
    result = train(cfg, build_feature_spec(cfg), taobao["train"], taobao["eval"], out)
    return cfg, out, result


def test_single_process_training_learns_and_writes_everything(single_run):
    cfg, out, result = single_run
    assert result.steps == 2 * 101 and result.epochs_completed == 2 and result.world_size == 1
    assert result.rows_trained == 2 * 6401
    losses = [r["loss"] for r in _records(out) if "loss" in r]
    assert len(losses) == 21  # every 10 steps and the last
    assert np.mean(losses[-5:]) < 0.5 * losses[0]  # from ~0.6 to the ~0.2 of a 5% click rate
    evals = [r for r in _records(out) if "eval_auc" in r]
    assert [r["step"] for r in evals] == [100, 200, 202]
    assert evals[-1]["eval_rows"] == 1001
    assert result.eval is not None and result.eval["auc"] > 0.55
    saved = json.loads((out / "train_result.json").read_text())
    assert saved["steps"] == 202 and saved["eval"]["auc"] == result.eval["auc"]
    # every 40 steps and at the end; the newest two kept; `latest` names the last
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["ckpt-200", "ckpt-202"]
    assert (out / "checkpoints" / "latest").read_text().strip() == "ckpt-202"
    assert latest_checkpoint(out) == out / "checkpoints" / "ckpt-202"


def test_rows_per_second_counts_training_steps_only(single_run):
    """Evaluations (steps 100, 200, the end) and checkpoints (every 40 steps) are timed apart."""
    _, out, result = single_run
    saved = json.loads((out / "train_result.json").read_text())
    assert saved["eval_seconds"] > 0 and saved["checkpoint_seconds"] > 0 and saved["train_seconds"] > 0
    assert result.rows_per_second == pytest.approx(result.rows_trained / result.train_seconds, rel=1e-9)
    assert result.seconds == pytest.approx(
        result.train_seconds + result.eval_seconds + result.checkpoint_seconds, rel=1e-9
    )
    # Counting the evaluations and checkpoints as training time would give the lower rate.
    assert result.rows_per_second > result.rows_trained / result.seconds
    logged = [r["rows_per_s"] for r in _records(out) if "rows_per_s" in r]
    assert logged[-1] == pytest.approx(result.rows_per_second, rel=0.05)  # the last step's record


def test_the_train_result_has_the_oracle_auc_of_the_eval_split(single_run, taobao):
    import pyarrow.parquet as pq

    from recpipe.auc import binary_auc

    cfg, out, result = single_run
    rows = pq.read_table(taobao["eval"], columns=[cfg.data.label, cfg.data.oracle_column])
    want = binary_auc(rows.column(0).to_numpy(), rows.column(1).to_numpy())
    assert 0.55 < want < 1.0
    assert result.eval["oracle_auc"] == pytest.approx(want, abs=1e-12)
    assert (
        json.loads((out / "train_result.json").read_text())["eval"]["oracle_auc"] == result.eval["oracle_auc"]
    )
    evals = [r for r in _records(out) if "eval_auc" in r]
    assert all(r["eval_oracle_auc"] == pytest.approx(want, abs=1e-12) for r in evals)


def test_no_oracle_auc_without_the_column(taobao, tmp_path):
    cfg = _cfg(taobao["config"], **{"train.max_steps": 2, "data.oracle_column": "no_such_column"})
    result = train(cfg, build_feature_spec(cfg), taobao["train"], taobao["eval"], tmp_path)
    assert result.eval["oracle_auc"] is None and result.eval["rows"] == 1001


def test_evaluate_checkpoint_matches_the_final_training_eval(single_run, taobao):
    cfg, out, result = single_run
    metrics = evaluate_checkpoint(out, taobao["eval"])
    assert metrics.model["step"] == 202 and metrics.rows == 1001
    assert metrics.auc == pytest.approx(result.eval["auc"], abs=1e-6)
    assert metrics.logloss == pytest.approx(result.eval["logloss"], rel=1e-5)
    assert metrics.gauc == pytest.approx(result.eval["gauc"], abs=1e-6)


def test_load_model_for_inference_gives_a_plain_cpu_module(single_run, taobao):
    _, out, _ = single_run
    model, spec, cfg = load_model_for_inference(out / "checkpoints" / "ckpt-200")
    assert not model.training and cfg.data.batch_size == 64
    assert all(p.device.type == "cpu" and type(p) is torch.nn.Parameter for p in model.parameters())
    labels, logits, groups = predict_dataset(model, spec, taobao["eval"], 100)
    assert labels.shape == logits.shape == groups.shape == (1001,)
    assert np.isfinite(logits).all()


def test_resume_continues_where_the_checkpoint_left(taobao, tmp_path):
    # 60 steps, then resume to 101: the same as 101 steps in one go.
    spec = build_feature_spec(_cfg(taobao["config"]))
    train(_cfg(taobao["config"], **{"train.max_steps": 101}), spec, taobao["train"], None, tmp_path / "a")
    train(_cfg(taobao["config"], **{"train.max_steps": 60}), spec, taobao["train"], None, tmp_path / "b")
    resumed = train(
        _cfg(taobao["config"], **{"train.max_steps": 101}), spec, taobao["train"], None, tmp_path / "b"
    )
    assert resumed.resumed_from.endswith("ckpt-60") and resumed.steps == 101
    a, b = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert [r["step"] for r in b] == [r["step"] for r in a]
    assert [r["loss"] for r in b] == [r["loss"] for r in a]  # bit-identical
    ma, _, _ = load_model_for_inference(tmp_path / "a")
    mb, _, _ = load_model_for_inference(tmp_path / "b")
    for (k, va), vb in zip(ma.state_dict().items(), mb.state_dict().values()):
        assert torch.equal(va, vb), k


def test_dlrm_trains_on_criteo(criteo, tmp_path):
    # on_bad_row=skip: the synthetic Criteo I2 column holds -3, outside log(x+3)'s domain (a few rows).
    overrides = {
        "data.batch_size": 100,
        "train.max_steps": 20,
        "train.log_every_steps": 5,
        "data.on_bad_row": "skip",
    }
    cfg = load_config(criteo["config"], overrides)
    result = train(cfg, build_feature_spec(cfg), criteo["train"], criteo["eval"], tmp_path)
    assert result.steps == 20 and 450 < result.eval["rows"] <= 500  # minus the skipped rows
    losses = [r["loss"] for r in _records(tmp_path) if "loss" in r]
    assert losses[-1] < losses[0]
    model, _, _ = load_model_for_inference(tmp_path)
    assert type(model).__name__ == "DLRM"


def test_sparse_adam_on_cpu_fails_early_with_a_clear_message(taobao, tmp_path):
    cfg = _cfg(taobao["config"], **{"train.sparse_optimizer.type": "adam"})
    with pytest.raises(ValueError, match="fused Adam runs on GPU only"):
        train(cfg, build_feature_spec(cfg), taobao["train"], None, tmp_path)


@pytest.mark.parametrize("sparse", ["rowwise_adagrad", "sgd"])
def test_other_sparse_optimizers_train_and_resume(taobao, tmp_path, sparse):
    over = {
        "train.sparse_optimizer.type": sparse,
        "train.checkpoint_every_steps": 5,
        "train.log_every_steps": 1,
    }
    spec = build_feature_spec(_cfg(taobao["config"]))
    train(
        _cfg(taobao["config"], **over, **{"train.max_steps": 12}), spec, taobao["train"], None, tmp_path / "a"
    )
    train(
        _cfg(taobao["config"], **over, **{"train.max_steps": 7}), spec, taobao["train"], None, tmp_path / "b"
    )
    train(
        _cfg(taobao["config"], **over, **{"train.max_steps": 12}), spec, taobao["train"], None, tmp_path / "b"
    )
    assert [r["loss"] for r in _records(tmp_path / "b")] == [r["loss"] for r in _records(tmp_path / "a")]
    if sparse == "rowwise_adagrad":  # one accumulator per row
        import torch.distributed.checkpoint as dcp

        meta = dcp.FileSystemReader(str(tmp_path / "a" / "checkpoints" / "ckpt-12")).read_metadata()
        state = [k for k in meta.state_dict_metadata if k.endswith("user_id.momentum1")]
        assert len(state) == 1 and tuple(meta.state_dict_metadata[state[0]].size) == (11417,)


def test_dense_gradient_clipping_bounds_the_update(taobao, tmp_path):
    # Dense SGD with lr 1: one step moves the dense parameters by exactly the clipped gradient.
    over = {"train.dense_optimizer.type": "sgd", "train.dense_optimizer.lr": 1.0, "train.max_steps": 1}
    spec = build_feature_spec(_cfg(taobao["config"]))
    torch.manual_seed(0)
    from recpipe.models.registry import build_model

    initial = build_model(spec, _cfg(taobao["config"]).model).state_dict()
    moved = {}
    for clip in (None, 1e-3):
        out = tmp_path / str(clip)
        train(
            _cfg(taobao["config"], **over, **{"train.grad_clip_norm": clip}), spec, taobao["train"], None, out
        )
        model, _, _ = load_model_for_inference(out)
        dense = [k for k in initial if not k.startswith("embeddings.")]
        moved[clip] = float(
            torch.stack([(model.state_dict()[k] - initial[k]).norm() ** 2 for k in dense]).sum().sqrt()
        )
    assert moved[None] > 1e-2
    assert moved[1e-3] == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.parametrize(("steps", "moved"), [(1, 0.0), (2, 1e-3)])
def test_accumulated_scaled_steps_move_the_dense_part_once_per_window(taobao, tmp_path, steps, moved):
    # 2 micro-batches per dense step, fp16 with loss scaling, dense SGD lr 1 clipped to 1e-3: after one
    # micro-batch the dense part has not moved; after two it moved once, by the clipped (unscaled) gradient.
    over = {
        "train.dense_optimizer.type": "sgd",
        "train.dense_optimizer.lr": 1.0,
        "train.max_steps": steps,
        "train.grad_clip_norm": 1e-3,
        "train.gradient_accumulation_steps": 2,
        "train.mixed_precision": "fp16",
        "train.grad_scaler": {"init_scale": 1024.0},
    }
    cfg = _cfg(taobao["config"], **over)
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    from recpipe.models.registry import build_model

    initial = build_model(spec, cfg.model).state_dict()
    train(cfg, spec, taobao["train"], None, tmp_path)
    model, _, _ = load_model_for_inference(tmp_path)
    state = model.state_dict()
    dense = [k for k in initial if not k.startswith("embeddings.")]
    norm = float(torch.stack([(state[k] - initial[k]).norm() ** 2 for k in dense]).sum().sqrt())
    assert norm == pytest.approx(moved, rel=1e-3, abs=1e-9)
    assert any(not torch.equal(state[k], initial[k]) for k in initial if k.startswith("embeddings."))
    meta = json.loads(next(tmp_path.glob("checkpoints/ckpt-*/meta.json")).read_text())
    assert meta["grad_scaler"]["scale"] == 1024.0  # fewer than growth_interval clean steps: unchanged


def test_resume_refuses_a_checkpoint_of_another_feature_spec(taobao, tmp_path):
    import dataclasses

    cfg = _cfg(taobao["config"], **{"train.max_steps": 3})
    spec = build_feature_spec(cfg)
    train(cfg, spec, taobao["train"], None, tmp_path)
    other = dataclasses.replace(spec, group_column=None)
    with pytest.raises(ValueError, match="another FeatureSpec"):
        train(_cfg(taobao["config"], **{"train.max_steps": 6}), other, taobao["train"], None, tmp_path)


def test_no_final_checkpoint_when_the_caller_reads_only_metrics(taobao, tmp_path):
    """final_checkpoint=False (a benchmark's many short runs): the mid-run cadence still writes, the end does not."""
    cfg = _cfg(taobao["config"], **{"train.max_steps": 45})
    result = train(
        cfg, build_feature_spec(cfg), taobao["train"], taobao["eval"], tmp_path, final_checkpoint=False
    )
    assert result.steps == 45 and result.eval is not None and result.eval["rows"] == 1001
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["ckpt-40"]
    assert (
        result.checkpoint == str(tmp_path / "checkpoints" / "ckpt-40") and result.final_checkpoint_seconds < 1
    )
    none = _cfg(taobao["config"], **{"train.max_steps": 5, "train.checkpoint_every_steps": None})
    result = train(
        none, build_feature_spec(none), taobao["train"], None, tmp_path / "b", final_checkpoint=False
    )
    assert result.checkpoint is None and latest_checkpoint(tmp_path / "b") is None
