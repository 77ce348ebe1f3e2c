"""The train stage on one local process: a checkpoint, and what it records in a real (sqlite) MLflow run
through its ``log``; nothing read from the environment."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recpipe import tracking
from recpipe.data.synthetic import generate
from recpipe.features.schema_check import SchemaMismatch
from recpipe.launch.errors import TrainingFailed
from recpipe.stages import train
from recpipe.tracking.uri import client

CONFIG = Path(__file__).resolve().parents[1] / "pipelines" / "data" / "tiny_din.yaml"
ROWS, EVAL_ROWS = 1600, 400


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny")
    generate("taobao", ROWS + EVAL_ROWS, root / "all", seed=5)
    table = pq.read_table(root / "all")
    for name, part in (("train", table.slice(0, ROWS)), ("eval", table.slice(ROWS))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    return {"train": str(root / "train"), "eval": str(root / "eval")}


def test_one_local_process_trains_and_records_into_the_log(data, tmp_path, monkeypatch):
    # A Kubernetes API in sight changes nothing: the launcher is the caller's choice.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    out = tmp_path / "checkpoint"
    r = train.run(
        str(CONFIG), data["train"], data["eval"], str(out), workers=4, nproc_per_node=1,
        overrides={"data.batch_size": 200, "train.log_every_steps": 2}, log=tracking.open_run_log(run_id, uri),
    )  # fmt: skip
    assert (r.where, r.world_size, r.checkpoint_dir) == ("local", 1, str(out))
    result = json.loads((out / "train_result.json").read_text())
    assert (
        result["world_size"] == 1
        and result["steps"] == ROWS // 200
        and (out / "checkpoints" / "latest").is_file()
    )

    run = tracking.run_summary(run_id, uri=uri)
    assert run["status"] == "RUNNING"  # the pipeline's finish step ends it
    assert run["tags"]["train.where"] == "local" and run["tags"]["train.world_size"] == "1"
    assert run["metrics"]["train.steps"] == result["steps"] and "train.seconds" in run["metrics"]
    losses = client(uri).get_metric_history(run_id, "train.loss")
    assert sorted(m.step for m in losses) == [2, 4, 6, 8]
    artifacts = {a.path for a in client(uri).list_artifacts(run_id, "train")}
    assert artifacts == {"train/train_result.json", "train/training_curves.png"}


def test_without_a_run_nothing_is_drawn(data, tmp_path):
    out = tmp_path / "checkpoint"
    train.run(str(CONFIG), data["train"], data["eval"], str(out), overrides={"train.max_steps": 2})
    assert (out / "checkpoints" / "latest").is_file() and not (out / ".plots").exists()


def test_a_failing_rank_marks_the_run_failed_with_its_traceback(data, tmp_path):
    # Labels of 2: the schema fits, so the rank fails inside the training loop, its process group up.
    broken = tmp_path / "broken"
    broken.mkdir()
    table = pq.read_table(data["train"])
    table = table.set_column(table.schema.get_field_index("clk"), "clk", pa.array([2] * table.num_rows))
    pq.write_table(table, broken / "part-00000.parquet")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "recpipe-tests")
    with pytest.raises(TrainingFailed, match="1 process exit code 1"):
        train.run(
            str(CONFIG),
            str(broken),
            data["eval"],
            str(tmp_path / "out"),
            log=tracking.open_run_log(run_id, uri),
        )
    run = tracking.run_summary(run_id, uri=uri)
    reason = run["tags"]["failure_reason"]
    assert run["status"] == "FAILED"
    assert reason.startswith(
        "train: TrainingFailed: 1 process exit code 1: Traceback (most recent call last):"
    )
    assert "column 'clk': expected a label of 0 or 1" in reason.splitlines()[-1] and "[rank0]" not in reason


def test_data_without_the_configs_columns_fails_before_any_process_starts(data, tmp_path):
    # Issue 17: missing columns surfaced ~35 s later in a rank, listing only the projected columns.
    broken = tmp_path / "broken"
    broken.mkdir()
    table = pq.read_table(data["train"])
    pq.write_table(table.drop_columns(["clk", "pid"]), broken / "part-00000.parquet")
    t0 = time.perf_counter()
    with pytest.raises(SchemaMismatch) as err:
        train.run(str(CONFIG), str(broken), data["eval"], str(tmp_path / "out"))
    assert time.perf_counter() - t0 < 10
    message = str(err.value)
    assert "missing columns ['pid', 'clk']" in message
    assert f"the data has {table.num_columns - 2} columns: ['user_id'" in message
    assert not (tmp_path / "out").exists()


def test_resume_auto_never_and_must(data, tmp_path):
    # Issue 17: any checkpoint in --out was resumed, with no way to start fresh.
    from recpipe.config import ParameterError

    out = tmp_path / "out"
    with pytest.raises(
        ParameterError, match="parameter resume: is 'must' but .* holds no complete checkpoint"
    ):
        train.run(str(CONFIG), data["train"], data["eval"], str(out), resume="must")
    steps = {"train.max_steps": 2}
    train.run(str(CONFIG), data["train"], data["eval"], str(out), overrides=steps)

    def resumed_from(mode: str) -> str | None:
        train.run(
            str(CONFIG), data["train"], data["eval"], str(out), overrides={"train.max_steps": 3}, resume=mode
        )
        return json.loads((out / "train_result.json").read_text())["resumed_from"]

    assert resumed_from("never") is None
    assert resumed_from("must").endswith("ckpt-3")  # "never" wrote ckpt-3 from scratch
    with pytest.raises(ParameterError, match="must be one of \\['auto', 'never', 'must'\\]"):
        train.run(str(CONFIG), data["train"], data["eval"], str(out), resume="sometimes")
