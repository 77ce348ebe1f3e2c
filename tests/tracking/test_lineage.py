"""Dataset inputs and lineage tags on the pipeline's run."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from recpipe.tracking import head_commit, lineage_tags, log_dataset_input, run_summary, start_or_resume_run

SCHEMA = {
    "clk": "int64",
    "user_id": "string",
    "price": "double",
    "click_50_seq__adgroup_id": "list<item: int64>",
}


def test_dataset_inputs_and_tags(store_uri, unique, tmp_path):
    run_id = start_or_resume_run(store_uri, f"lineage-{unique}")
    digest = "ab" * 32
    log_dataset_input(run_id, tmp_path / "data" / "train", 1000, SCHEMA, digest, context="training")
    log_dataset_input(run_id, "odps://proj/tables/taobao_eval", 200, SCHEMA, "cd" * 32, context="evaluation")
    s = run_summary(run_id)
    inputs = {d["tags"]["mlflow.data.context"]: d for d in s["dataset_inputs"]}
    train, ev = inputs["training"], inputs["evaluation"]
    assert train["name"] == "train" and train["digest"] == digest[:36] and train["source_type"] == "local"
    assert json.loads(train["source"])["uri"] == str((tmp_path / "data" / "train").resolve())
    cols = json.loads(train["schema"])["mlflow_colspec"]
    assert [(c["name"], c["type"]) for c in cols[:3]] == [
        ("clk", "long"),
        ("user_id", "string"),
        ("price", "double"),
    ]
    assert cols[3]["type"] == "array" and cols[3]["items"]["type"] == "long"
    assert ev["source_type"] == "uri" and json.loads(ev["source"]) == {
        "uri": "odps://proj/tables/taobao_eval"
    }
    tags = s["tags"]
    assert tags["data.training.rows"] == "1000" and tags["data.training.digest"] == digest
    assert tags["data.evaluation.path"] == "odps://proj/tables/taobao_eval"
    with pytest.raises(ValueError, match="context"):
        log_dataset_input(run_id, "x", 1, SCHEMA, "d", context="testing")


def test_lineage_tags_arguments_then_environment():
    env = {"RECPIPE_IMAGE": "ghcr.io/x/recpipe:0.1.0", "KFP_RUN_ID": "run-123", "KFP_POD_NAME": "pod-7"}
    tags = lineage_tags("cfg", git_commit="a" * 40, environ=env)
    assert tags == {
        "config_digest": "cfg",
        "git_commit": "a" * 40,
        "mlflow.source.git.commit": "a" * 40,
        "image": "ghcr.io/x/recpipe:0.1.0",
        "kfp_run_id": "run-123",
        "kfp_pod_name": "pod-7",
    }
    explicit = lineage_tags("cfg", git_commit="b" * 40, image="img:1", kfp_run_id="run-9", environ=env)
    assert (explicit["image"], explicit["kfp_run_id"]) == ("img:1", "run-9")
    bare = lineage_tags("cfg", git_commit="c" * 40, environ={})
    assert set(bare) == {"config_digest", "git_commit", "mlflow.source.git.commit"}


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_head_commit(tmp_path):
    assert head_commit(tmp_path) is None  # not a repository
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=tmp_path, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    assert head_commit(tmp_path) == sha and len(sha) == 40
