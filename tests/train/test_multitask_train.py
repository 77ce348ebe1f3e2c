"""Multi-task training (MMoE, DBMTL, PLE; labels clk and buy): the trainer's loss, per-task evaluation
in training and of the checkpoint, a (B, 2) model for inference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from recpipe.config import load_config
from recpipe.eval.checkpoint import evaluate_checkpoint, predict_dataset
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.models.train_model import bce_loss
from recpipe.train.checkpoint import load_model_for_inference

OVERRIDES = {"data.batch_size": 64, "train.log_every_steps": 20, "train.max_steps": 60}
HEADS = {
    "mmoe": {"expert_mlp": {"hidden_units": [32]}, "num_experts": 3},
    "ple": {
        "extraction_networks": [
            {"network_name": f"l{i}", "expert_num_per_task": 2, "share_num": 2,
             "task_expert_net": {"hidden_units": [32]}, "share_expert_net": {"hidden_units": [32]}}
            for i in (1, 2)
        ]
    },
}  # fmt: skip


def _config(src: str, kind: str, tmp: Path) -> str:
    """The shrunk DBMTL config, or the same towers and task towers under an MMoE / PLE head."""
    if kind == "dbmtl":
        return src
    data = yaml.safe_load(Path(src).read_text())
    model = data["model"]
    towers = [{k: v for k, v in t.items() if not k.startswith("relation")} for t in model["task_towers"]]
    data["model"] = {"type": kind, "towers": model["towers"], "din_towers": model["din_towers"],
                     "task_towers": towers, **HEADS[kind]}  # fmt: skip
    out = tmp / f"{kind}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return str(out)


@pytest.mark.parametrize("kind", ["dbmtl", "mmoe", "ple"])
def test_multitask_model_trains_and_evaluates_per_task(kind, taobao_multitask, tmp_path):
    cfg = load_config(_config(taobao_multitask["config"], kind, tmp_path), OVERRIDES)
    spec = build_feature_spec(cfg)
    result = train(cfg, spec, taobao_multitask["train"], taobao_multitask["eval"], tmp_path / "out")
    assert result.steps == 60 and set(result.eval["tasks"]) == {"clk", "buy"}
    assert result.eval["auc"] == result.eval["tasks"]["clk"]["auc"]  # the top-level numbers: the primary task
    buy = result.eval["tasks"]["buy"]
    assert buy["rows"] == 1001 and buy["positive_rate"] < result.eval["positive_rate"]
    report = evaluate_checkpoint(tmp_path / "out", taobao_multitask["eval"])
    assert report.tasks["buy"]["auc"] == pytest.approx(buy["auc"], abs=1e-6)
    assert report.metrics()["buy.logloss"] == pytest.approx(buy["logloss"], rel=1e-5)
    model, spec2, _ = load_model_for_inference(tmp_path / "out")
    labels, logits, _ = predict_dataset(model, spec2, taobao_multitask["eval"], 256)
    assert labels.shape == logits.shape == (1001, 2)
    assert (labels[:, 1] <= labels[:, 0]).all()  # a buy only after a click


def test_multitask_loss_is_the_weighted_sum_of_the_tasks():
    """TorchEasyRec's task_towers[].weight: the loss is Σ_t weight_t · BCE_t (each a mean over rows)."""
    logits = torch.tensor([[0.5, -1.0], [-2.0, 0.3], [1.0, 1.0]])
    labels = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    each = [bce_loss(logits[:, t], labels[:, t]) for t in range(2)]
    assert bce_loss(logits, labels, task_weights=torch.tensor([1.0, 3.0])) == pytest.approx(
        float(each[0] + 3 * each[1])
    )
    weights = torch.tensor([1.0, 0.0, 1.0])  # a zero-weight row counts for no task
    kept = bce_loss(logits[[0, 2]], labels[[0, 2]])
    assert bce_loss(logits, labels, weights) == pytest.approx(float(kept))
    with pytest.raises(ValueError, match=r"labels \(3,\) do not match logits \(3, 2\)"):
        bce_loss(logits, labels[:, 0])


def test_a_single_task_model_refuses_several_labels(taobao):
    with pytest.raises(Exception, match=r"trains one label, data.label_fields is \['clk', 'buy'\]"):
        load_config(taobao["config"], {"data.label_fields": ["clk", "buy"]})
    # and a multi-task model's towers must name the data's labels in order
    data = yaml.safe_load(Path("configs/dbmtl_taobao_small.yaml").read_text())
    data["data"]["label_fields"] = ["buy", "clk"]
    from recpipe.config import parse_config

    with pytest.raises(Exception, match=r"task_towers predict labels \['clk', 'buy'\], data.label_fields is"):
        parse_config(data)
