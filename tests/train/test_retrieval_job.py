"""The train stage on a retrieval config: one local worker process trains DSSM through the retrieval trainer
and writes the ranking run's artifacts (a sealed DCP checkpoint, ``train_result.json`` with recall@K,
``metrics.jsonl``); more ranks and options the retrieval trainer ignores are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import ParameterError, load_config
from recpipe.data.synthetic import generate
from recpipe.launch.errors import TrainingFailed
from recpipe.stages import train
from recpipe.train.checkpoint import load_model_for_inference
from recpipe.train.retrieval_check import check_retrieval_train_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"
ROWS, EVAL_ROWS = 9000, 1000


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ret")
    report = generate("retrieval", ROWS + EVAL_ROWS, root / "all", seed=3, users=150, items=200)
    table = pq.read_table(root / "all" / "part-00000.parquet")
    for name, part in (("train", table.slice(0, ROWS)), ("eval", table.slice(ROWS))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    return {
        "train": str(root / "train"),
        "eval": str(root / "eval"),
        "items": str(root / "all" / "_items.parquet"),
        "oracle": report.oracle_recall,
    }


def test_train_stage_trains_a_retrieval_model_in_one_process(data, tmp_path) -> None:
    out = tmp_path / "train"
    overrides = {"data.params.ITEMS": data["items"], "train.max_steps": 150, "train.log_every_steps": 50}
    r = train.run(str(CONFIG), data["train"], data["eval"], str(out), overrides=overrides)
    assert (r.where, r.world_size) == ("local", 1)
    result = json.loads((out / "train_result.json").read_text())
    assert result["steps"] == 150 and result["rows_trained"] == 150 * 256 and result["world_size"] == 1
    ev = result["eval"]
    assert ev["queries"] == EVAL_ROWS and ev["recall_at_50"] == ev["hit_rate_at_50"]  # one target a row
    # random: 50 / 200 = 0.25; the oracle's recall over the generated rows bounds what a model finds
    assert 0.75 * data["oracle"][50] < ev["recall_at_50"] <= data["oracle"][50] + 0.05, (ev, data["oracle"])
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [50, 100, 150] and lines[-1]["loss"] < lines[0]["loss"]
    # The later stages read it as a ranking checkpoint: the model back from DCP, the user tower equal.
    model, spec, cfg = load_model_for_inference(out)
    assert cfg.model.type == "dssm" and model.embedding_dim == 16
    assert Path(result["checkpoint"]).name == "ckpt-150"
    state = model.state_dict()
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_more_than_one_rank_is_refused_before_any_process_starts(data, tmp_path) -> None:
    with pytest.raises(ParameterError, match="nproc_per_node.*one process.*world of 2"):
        train.run(
            str(CONFIG), data["train"], data["eval"], str(tmp_path / "t"), nproc_per_node=2,
            overrides={"data.params.ITEMS": data["items"]},
        )  # fmt: skip
    with pytest.raises(ParameterError, match="workers.*world of 3"):
        train.run(
            str(CONFIG), data["train"], data["eval"], str(tmp_path / "t"), workers=3,
            overrides={"data.params.ITEMS": data["items"]},
        )  # fmt: skip


def test_options_the_retrieval_trainer_ignores_are_refused(data, tmp_path) -> None:
    cfg = load_config(CONFIG, {"train.mixed_precision": "bf16", "train.eval_every_steps": 10})
    with pytest.raises(
        ValueError, match=r"train.mixed_precision \(mixed precision\).*train.eval_every_steps"
    ):
        check_retrieval_train_config(cfg)
    check_retrieval_train_config(load_config(CONFIG, {"train.max_steps": 3}))  # its own options pass
    # ... by the stage before a process starts (a warm start would otherwise be resolved first)
    with pytest.raises(ValueError, match="warm start"):
        train.run(
            str(CONFIG), data["train"], data["eval"], str(tmp_path / "t"),
            overrides={"data.params.ITEMS": data["items"], "train.init_from": str(tmp_path)},
        )  # fmt: skip


def test_a_worker_without_the_catalogue_fails_the_run(data, tmp_path) -> None:
    with pytest.raises(TrainingFailed, match="RECPIPE_PARAM_ITEMS|ITEMS"):
        train.run(
            str(CONFIG), data["train"], data["eval"], str(tmp_path / "t"), overrides={"train.max_steps": 2}
        )
