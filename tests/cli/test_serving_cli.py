"""``recpipe serve``'s environment: the store, this environment's scripts first on ``PATH``, and each worker's
torch threads (``--threads``, else the exported ``OMP_NUM_THREADS``, else the cores split among the workers).
The real server with two workers is in ``tests/tracking/test_scoring_server.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from recpipe.cli.main import build_parser
from recpipe.cli.serving_cli import SERVER_MALLOC, serve_environment

URI = "sqlite:///runs/mlflow.db"


def test_threads_per_worker_setting_then_exported_then_cores_split(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert serve_environment(URI, 2, None, {})["OMP_NUM_THREADS"] == "8"
    assert serve_environment(URI, 3, None, {})["OMP_NUM_THREADS"] == "5"
    assert serve_environment(URI, 32, None, {})["OMP_NUM_THREADS"] == "1"  # never 0
    assert serve_environment(URI, 2, None, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
    assert serve_environment(URI, 2, 1, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "1"


def test_malloc_keeps_freed_buffers_unless_exported():
    env = serve_environment(URI, 1, 1, {})
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(1 << 30) and env["MALLOC_TRIM_THRESHOLD_"] == str(1 << 32)
    mine = serve_environment(URI, 1, 1, {"MALLOC_TRIM_THRESHOLD_": "1048576"})
    assert mine["MALLOC_TRIM_THRESHOLD_"] == "1048576" and mine["MALLOC_MMAP_THRESHOLD_"] == str(1 << 30)


def test_the_workers_freeze_their_loaded_model_unless_exported_otherwise():
    from recpipe.export.server import GC_FREEZE_ENV

    assert serve_environment(URI, 1, 1, {})[GC_FREEZE_ENV] == "1"
    assert serve_environment(URI, 1, 1, {GC_FREEZE_ENV: "0"})[GC_FREEZE_ENV] == "0"


def test_the_server_writes_no_bytecode_into_the_store_whatever_is_exported():
    """MLflow's server imports served_model.py inside a local store's model folder: a ``__pycache__`` written there
    is an unlisted file that every later verified load refuses (tests/tracking/test_scoring_server.py, run without
    ``PYTHONDONTWRITEBYTECODE``, failed so)."""
    assert serve_environment(URI, 1, 1, {})["PYTHONDONTWRITEBYTECODE"] == "1"
    assert serve_environment(URI, 1, 1, {"PYTHONDONTWRITEBYTECODE": ""})["PYTHONDONTWRITEBYTECODE"] == "1"


def test_mlflows_uvicorn_waits_as_long_as_recpipes_for_a_starting_worker(monkeypatch):
    """``mlflow models serve`` runs uvicorn's command line: the variable must be one its options read (a
    misspelt one would be ignored and uvicorn's 5 s would kill workers still importing torch)."""
    from uvicorn.main import main as uvicorn_main

    from recpipe.export.server import WORKER_HEALTHCHECK_S

    env = serve_environment(URI, 2, 1, {})
    for name, value in env.items():
        if name.startswith("UVICORN_"):
            monkeypatch.setenv(name, value)
    params = uvicorn_main.make_context("uvicorn", ["mlflow.pyfunc.scoring_server.app:app"]).params
    assert params["timeout_worker_healthcheck"] == WORKER_HEALTHCHECK_S > 5
    assert (
        serve_environment(URI, 2, 1, {"UVICORN_TIMEOUT_WORKER_HEALTHCHECK": "9"})[
            "UVICORN_TIMEOUT_WORKER_HEALTHCHECK"
        ]
        == "9"
    )


def test_the_cluster_deployment_sets_the_same_malloc_settings():
    text = (Path(__file__).resolve().parents[2] / "manifests/base/serving/scoring.yaml").read_text()
    for name, value in SERVER_MALLOC.items():
        assert f'- name: {name}\n              value: "{value}"' in text


def test_store_and_path_and_the_rest_of_the_environment_kept():
    env = serve_environment(URI, 1, 2, {"PATH": "/usr/bin", "HOME": "/home/u"})
    assert env["MLFLOW_TRACKING_URI"] == URI and env["HOME"] == "/home/u"
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin"  # uvicorn is found by name


@pytest.mark.parametrize(
    ("workers", "threads", "environ", "match"),
    [
        (0, None, {}, "--workers and --threads must be positive, got 0"),
        (2, 0, {}, "must be positive, got 2 and 0"),
        (2, None, {"OMP_NUM_THREADS": "two"}, "OMP_NUM_THREADS='two' in the environment is not a positive"),
    ],
)
def test_a_setting_that_cannot_be_meant_is_refused(workers, threads, environ, match):
    with pytest.raises(ValueError, match=match):
        serve_environment(URI, workers, threads, environ)


def test_serve_takes_threads():
    a = build_parser().parse_args(
        ["serve", "--model", "models:/m@champion", "--workers", "2", "--threads", "1"]
    )
    assert (a.workers, a.threads) == (2, 1)
    assert build_parser().parse_args(["serve", "--model", "models:/m@champion"]).threads is None
