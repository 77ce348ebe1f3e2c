"""Stores for tracking tests: a sqlite file per test, and one real ``mlflow server`` per session."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_http import free_port

from recpipe.tracking import tracking_uri


@pytest.fixture(autouse=True)
def _no_ambient_tracking_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="session")
def _empty_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty MLflow sqlite database: creating one takes seconds, copying it does not."""
    from recpipe.tracking.uri import client

    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    client(f"sqlite:///{db}").search_experiments()
    return db


def _fresh_sqlite(run_dir: Path, template: Path) -> str:
    uri = tracking_uri(None, run_dir, environ={})
    shutil.copy(template, run_dir / "mlflow.db")
    return uri


@pytest.fixture
def sqlite_uri(tmp_path: Path, _empty_db: Path) -> str:
    """The embedded default store of a pipeline run folder ``tmp_path/run``."""
    return _fresh_sqlite(tmp_path / "run", _empty_db)


@pytest.fixture(scope="session")
def server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real MLflow server on 127.0.0.1 (sqlite backend, proxied artifacts), killed at teardown."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # skips the job runner: ~7 s faster start
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server",
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"mlflow server exited with {proc.returncode}:\n{(root / 'server.log').read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy after 90 s:\n{(root / 'server.log').read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()


@pytest.fixture(params=["sqlite", pytest.param("server", marks=pytest.mark.slow)])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path, _empty_db: Path) -> str:
    """Each test that takes it runs against a sqlite file and (slow) against the shared server."""
    if request.param == "sqlite":
        return _fresh_sqlite(tmp_path / "run", _empty_db)
    return request.getfixturevalue("server_uri")


@pytest.fixture
def unique() -> str:
    """A short unique suffix: tests share the server, so names must not collide."""
    return uuid.uuid4().hex[:8]
