"""One run per pipeline run: create, resume (also from another process), log, end."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from recpipe.config import flatten
from recpipe.tracking import (
    end_run,
    log_artifacts,
    log_metrics,
    log_model_dir,
    log_params,
    run_summary,
    set_tags,
    start_or_resume_run,
)
from recpipe.tracking.runs import MAX_PARAM_VALUE, truncate


def test_params_batched_truncated_and_immutable(store_uri, unique):
    run_id = start_or_resume_run(store_uri, f"exp-{unique}", run_name="params", tags={"stage": "train"})
    cfg = {
        "train": {"lr": 0.01, "sharding": {"t": "row_wise"}},
        "features": [{"name": f"f{i}"} for i in range(400)],
    }
    params = flatten(cfg) | {f"p{i}": i for i in range(250)} | {"bad[key]": "x"}
    stored = log_params(run_id, params)
    got = run_summary(run_id)["params"]
    assert len(got) == 254 and got == stored
    assert got["train.lr"] == "0.01" and got["train.sharding.t"] == "row_wise" and got["bad_key_"] == "x"
    long = got["features"]
    assert len(long) == MAX_PARAM_VALUE and "truncated" in long and long.startswith('[{"name": "f0"}')
    log_params(run_id, {"train.lr": 0.01})  # same value again: a resumed stage
    with pytest.raises(ValueError, match=r"\['train.lr'\]"):
        log_params(run_id, {"train.lr": 0.02})


def test_truncate_keeps_distinct_values_distinct():
    a, b = "x" * 7000 + "a", "x" * 7000 + "b"
    assert truncate(a, 6000) != truncate(b, 6000) and len(truncate(a, 6000)) == 6000
    assert truncate("short", 6000) == "short"


def test_metrics_tags_artifacts_and_failed_end(store_uri, unique, tmp_path):
    run_id = start_or_resume_run(store_uri, f"exp-{unique}")
    for step in range(3):
        log_metrics(run_id, {"loss": 1.0 / (step + 1), "auc": None}, step=step)
    log_metrics(run_id, {f"m{i}": i for i in range(1200)}, step=0)
    set_tags(run_id, {"long": "y" * 9000, "n": 3})
    d = tmp_path / "export"
    (d / "sub").mkdir(parents=True)
    (d / "manifest.json").write_text("{}")
    (d / "sub" / "w.bin").write_bytes(b"\0" * 10)
    assert log_model_dir(run_id, d, "model/jit") == f"runs:/{run_id}/model/jit"
    log_artifacts(run_id, d)
    end_run(run_id, "failed", reason="OOM in train step 1200")
    s = run_summary(run_id)
    assert s["status"] == "FAILED" and s["tags"]["failure_reason"] == "OOM in train step 1200"
    assert (
        s["metrics"]["loss"] == pytest.approx(1 / 3)
        and "auc" not in s["metrics"]
        and s["metrics"]["m1199"] == 1199
    )
    assert len(s["tags"]["long"]) == 8000 and s["tags"]["n"] == "3"
    with pytest.raises(ValueError, match="status"):
        end_run(run_id, "DONE")


def test_unknown_run_needs_uri():
    with pytest.raises(ValueError, match="start_or_resume_run"):
        log_metrics("0123456789abcdef", {"x": 1.0})


def test_resume_in_another_process(sqlite_uri):
    """Stages are separate processes: the next one resumes the run by id and logs into it."""
    run_id = start_or_resume_run(sqlite_uri, "pipeline", run_name="kfp-run")
    log_metrics(run_id, {"train_loss": 0.5})
    end_run(run_id)  # e.g. a previous attempt that ended; resuming sets it RUNNING again
    code = textwrap.dedent(f"""
        from recpipe.tracking import start_or_resume_run, log_metrics
        rid = start_or_resume_run({sqlite_uri!r}, "pipeline", run_id={run_id!r})
        log_metrics(rid, {{"eval_auc": 0.71}})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    s = run_summary(run_id)
    assert s["status"] == "RUNNING"
    assert s["metrics"] == {"train_loss": 0.5, "eval_auc": 0.71}
    with pytest.raises(ValueError, match="belongs to experiment"):
        start_or_resume_run(sqlite_uri, "another-experiment", run_id=run_id)


def test_mlflow_params_and_tags_are_redacted(sqlite_uri):
    URI_WITH_SECRET = "s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/data/part-0.parquet"
    from recpipe.tracking import log_params, run_summary, set_tags, start_or_resume_run

    run_id = start_or_resume_run(sqlite_uri, "redact", tags={"data_source": URI_WITH_SECRET})
    log_params(run_id, {"pipeline.data_source": URI_WITH_SECRET})
    set_tags(run_id, {"failure_reason": f"OSError: {URI_WITH_SECRET}"})
    info = run_summary(run_id, uri=sqlite_uri)
    stored = [*info["tags"].values(), *info.get("params", {}).values()]
    assert not any("wJalrXUtnFEMI" in str(v) for v in stored)
    assert info["tags"]["data_source"] == "s3://***@bucket/data/part-0.parquet"
