"""Tracking URI precedence and where a local store keeps its artifacts."""

from __future__ import annotations

import os
from pathlib import Path

from recpipe.tracking import artifact_root, log_artifact, run_summary, start_or_resume_run, tracking_uri
from recpipe.tracking.uri import local_store_path


def test_precedence_env_over_config_over_default(tmp_path):
    env = {"MLFLOW_TRACKING_URI": "http://mlflow:5000"}
    assert tracking_uri("sqlite:///cfg.db", tmp_path, environ=env) == "http://mlflow:5000"
    assert tracking_uri("sqlite:///cfg.db", tmp_path, environ={}) == "sqlite:///cfg.db"
    default = tracking_uri(None, tmp_path / "run", environ={})
    assert default == f"sqlite:///{(tmp_path / 'run').resolve()}/mlflow.db"
    assert artifact_root(default) == (tmp_path / "run" / "mlartifacts").resolve()


def test_process_environment_is_read_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://from-env:5000")
    assert tracking_uri(None, tmp_path) == "http://from-env:5000"


def test_local_store_paths():
    assert local_store_path("sqlite:////abs/x.db") == Path("/abs/x.db")
    assert local_store_path("sqlite:////abs/x.db?timeout=5") == Path("/abs/x.db")
    assert local_store_path("file:///abs/mlruns") == Path("/abs/mlruns")
    for remote in ("http://h:5000", "https://h", "postgresql://u@h/db", "databricks"):
        assert local_store_path(remote) is None and artifact_root(remote) is None


def test_artifacts_land_under_run_dir(tmp_path, sqlite_uri):
    run_dir = tmp_path / "run"
    run_id = start_or_resume_run(sqlite_uri, "exp/with odd:name")
    f = tmp_path / "note.txt"
    f.write_text("hello")
    log_artifact(run_id, f, "notes")
    art = run_summary(run_id)["artifact_uri"]
    assert art.startswith((run_dir / "mlartifacts").resolve().as_uri())
    found = list((run_dir / "mlartifacts").rglob("note.txt"))
    assert len(found) == 1 and found[0].read_text() == "hello"
    assert not Path("mlruns").exists() or not any(Path("mlruns").rglob("note.txt"))


def test_fluent_uri_restores_global_state(monkeypatch):
    import mlflow

    from recpipe.tracking.uri import fluent_uri

    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    before = mlflow.get_tracking_uri()
    with fluent_uri("sqlite:////tmp/elsewhere.db"):
        assert mlflow.get_tracking_uri() == mlflow.get_registry_uri() == "sqlite:////tmp/elsewhere.db"
    # MLflow's setter writes the environment; nothing may leak into tracking_uri() or child processes.
    assert "MLFLOW_TRACKING_URI" not in os.environ and "MLFLOW_REGISTRY_URI" not in os.environ
    assert mlflow.get_tracking_uri() == before
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://ambient:5000")
    with fluent_uri("sqlite:////tmp/elsewhere.db"):
        pass
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://ambient:5000"
    assert mlflow.get_tracking_uri() == "http://ambient:5000"
