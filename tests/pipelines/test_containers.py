"""``recpipe run --runner containers`` without an engine: what the runner refuses, what it gives the
containers, and the runs folder it shares with them. The run itself, in the built images:
tests/images/test_built_images.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pipelines import containers
from pipelines.local_run import _check_inside_runs, run_local
from recpipe.config import ParameterError
from recpipe.pipeline import RunSummary


def test_a_local_source_or_store_outside_the_runs_folder_is_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "data.parquet"
    outside.write_bytes(b"")
    store = f"sqlite:///{runs / 'mlflow.db'}"
    with pytest.raises(ParameterError, match="data_source.*outside the runs folder"):
        _check_inside_runs(runs, str(outside), store)
    with pytest.raises(ParameterError, match="tracking_uri.*outside the runs folder"):
        _check_inside_runs(runs, "synthetic:criteo?rows=10", f"sqlite:///{tmp_path / 'mlflow.db'}")
    inside = runs / "raw"
    inside.mkdir()
    for source, uri in [
        ("synthetic:taobao?rows=10", store),
        (str(inside), store),
        ("s3://bucket/data/", "http://127.0.0.1:5000"),
    ]:
        _check_inside_runs(runs, source, uri)


def test_an_unknown_runner_is_a_parameter_error(tmp_path):
    with pytest.raises(ParameterError, match="runner.*subprocess, containers.*'kubernetes'"):
        run_local(tmp_path, runner="kubernetes")


def test_no_engine_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(containers, "DOCKER_SOCKET", str(tmp_path / "docker.sock"))
    with pytest.raises(
        containers.ContainerEngineError, match="no Docker daemon answers.*podman is not installed"
    ):
        containers.engine_name()


def test_containers_run_read_only_with_the_runs_folder_at_its_own_path(tmp_path):
    args = containers.runner_args(tmp_path, "run-1")
    assert args["read_only"] is True and set(args["tmpfs"]) == {"/tmp"}
    [mount] = args["mounts"]
    assert mount["Source"] == mount["Target"] == str(tmp_path) and mount["ReadOnly"] is False
    assert args["labels"] == {containers.RUN_LABEL: "run-1"}
    assert "user" not in args  # the image's own user (10001)


@pytest.mark.skipif(os.geteuid() != 0, reason="sharing the folder with uid 10001 needs root (chown)")
def test_the_runs_folder_is_shared_with_the_image_group_and_nobody_else(tmp_path):
    runs = tmp_path / "runs"
    (runs / "old").mkdir(parents=True)
    (runs / "old" / "mlflow.db").write_bytes(b"x")
    before = os.umask(0o022)
    try:
        with containers.shared_runs_folder(runs):
            (runs / "old" / "kfp" / "task").mkdir(parents=True)
            (runs / "old" / "kfp" / "task" / "out").write_text("1")
        assert os.umask(0o022) == 0o022  # restored
    finally:
        os.umask(before)
    for path in [runs, *runs.rglob("*")]:
        st = path.stat()
        assert st.st_gid == containers.IMAGE_UID, path
        assert st.st_mode & stat.S_IWGRP and not st.st_mode & stat.S_IWOTH, (path, oct(st.st_mode))
        if path.is_dir():
            assert st.st_mode & stat.S_ISGID, path


def test_the_summary_says_how_many_steps_ran_in_containers():
    s = RunSummary(None, "FINISHED", "sqlite:///x.db", containers=(9, 9, "podman", "a:1 = b:1"))
    assert "  containers    9/9 steps, each in its image (podman; train in a:1 = b:1)" in s.format()
    assert "containers" not in RunSummary(None, "FINISHED", "sqlite:///x.db").format()


def test_no_runs_folder_outside_is_touched(tmp_path):
    # Only the runs folder and what is in it change hands.
    runs = tmp_path / "runs"
    runs.mkdir()
    gid = tmp_path.stat().st_gid
    with containers.shared_runs_folder(runs):
        pass
    assert tmp_path.stat().st_gid == gid and Path(runs).is_dir()
