"""One store: --runs / RECPIPE_RUNS and --tracking-uri / MLFLOW_TRACKING_URI mean the same in every command,
and a command that reads the registry never creates an empty store (issue 17)."""

from __future__ import annotations

import pytest

from recpipe import tracking
from recpipe.cli.main import main
from recpipe.pipeline.params import StoreNotFound, resolve_tracking_uri


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("MLFLOW_TRACKING_URI", "RECPIPE_RUNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_every_way_of_naming_a_store_resolves_the_same(clean_env, tmp_path):
    db = f"sqlite:///{tmp_path / 'x' / 'mlflow.db'}"
    assert resolve_tracking_uri(None, None, runs=tmp_path / "x") == db
    assert resolve_tracking_uri(db, None) == db
    clean_env.setenv("RECPIPE_RUNS", str(tmp_path / "x"))
    assert resolve_tracking_uri(None, None) == db
    clean_env.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert (
        resolve_tracking_uri(None, None) == "http://mlflow:5000"
    )  # the environment's URI beats RECPIPE_RUNS
    assert resolve_tracking_uri(None, None, runs=tmp_path / "x") == db  # an option beats the environment
    assert resolve_tracking_uri("sqlite:///y.db", None, runs=tmp_path / "x") == "sqlite:///y.db"


def test_models_list_elsewhere_says_where_it_looked_and_creates_nothing(clean_env, tmp_path, capsys):
    # Issue 17: run elsewhere, `models list` silently created runs/mlflow.db and said "no registered versions".
    assert main(["models", "list", "ctr"]) == 2
    err = capsys.readouterr().err
    assert f"no MLflow store at {tmp_path / 'runs' / 'mlflow.db'} (from the default runs folder runs)" in err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(StoreNotFound, match="from RECPIPE_RUNS"):
        clean_env.setenv("RECPIPE_RUNS", str(tmp_path / "elsewhere"))
        resolve_tracking_uri(None, None, must_exist=True)
    assert main(["promote", "--model", "ctr", "--rollback", "--runs", str(tmp_path / "nope")]) == 2
    assert "(from --runs)" in capsys.readouterr().err and not (tmp_path / "nope").exists()


@pytest.mark.parametrize("how", ["--runs", "RECPIPE_RUNS", "--tracking-uri", "MLFLOW_TRACKING_URI"])
def test_models_list_reads_the_store_named_either_way(clean_env, tmp_path, capsys, how):
    store = tmp_path / "store"
    uri = f"sqlite:///{store / 'mlflow.db'}"
    store.mkdir()
    tracking.start_or_resume_run(uri, "recpipe-tests")  # the store `recpipe run --runs store` would leave
    argv = ["models", "list", "ctr"]
    if how.startswith("--"):
        argv += [how, str(store) if how == "--runs" else uri]
    else:
        clean_env.setenv(how, str(store) if how == "RECPIPE_RUNS" else uri)
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"no registered versions of 'ctr' in {uri}"
