"""images/mlflow/recpipe_mlflow_server.py: the auth configuration it writes, the pipeline user it keeps in
step with the Secret, the bucket it creates, and (slow) a real ``mlflow server --app-name basic-auth`` on
127.0.0.1 that takes the pipeline's bearer token and refuses everything else.

The MLflow auth app needs Flask-WTF (mlflow[auth]); where it is not installed those tests skip."""

from __future__ import annotations

import configparser
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from local_http import free_port, http_status

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "images" / "mlflow"))

import recpipe_mlflow_server as server  # noqa: E402

TOKEN = "pipeline-token-0123456789abcdef"


def test_auth_config_is_written_private_and_names_the_token_function(tmp_path):
    path = server.write_auth_config(tmp_path / "conf" / "basic_auth.ini", "postgresql://u:pw@db/mlflow_auth")
    config = configparser.ConfigParser(interpolation=None)
    config.read(path)
    assert dict(config["mlflow"]) == {
        "default_permission": "READ",
        "database_uri": "postgresql://u:pw@db/mlflow_auth",
        "authorization_function": "recpipe_mlflow_server:authenticate_basic_or_token",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the URI holds the database password
    with pytest.raises(ValueError, match="MLFLOW_AUTH_DATABASE_URI is empty"):
        server.write_auth_config(tmp_path / "x.ini", "")
    with pytest.raises(ValueError, match="default permission"):
        server.write_auth_config(tmp_path / "x.ini", "sqlite:///a.db", "ADMIN")


def test_serve_fails_clearly_without_a_user_store(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MLFLOW_AUTH_DATABASE_URI", raising=False)
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(tmp_path / "auth.ini"))
    assert server.main(["serve"]) == 1
    assert "MLFLOW_AUTH_DATABASE_URI is empty" in capsys.readouterr().err
    assert server.main([]) == 2


def test_s3_destination_is_split_into_bucket_and_prefix():
    assert server.split_s3_uri("s3://mlflow-artifacts") == ("mlflow-artifacts", "")
    assert server.split_s3_uri("s3://b/some/prefix/") == ("b", "some/prefix")
    with pytest.raises(ValueError, match="s3://bucket"):
        server.split_s3_uri("/local/folder")


class ObjectStore:
    """The two S3 calls ensure_bucket makes, on an object store that answers after ``down`` failures."""

    def __init__(self, buckets=(), down=0):
        self.buckets, self.down, self.calls = list(buckets), down, 0

    def list_buckets(self):
        self.calls += 1
        if self.calls <= self.down:
            raise ConnectionError("connection refused")
        return {"Buckets": [{"Name": b} for b in self.buckets]}

    def create_bucket(self, Bucket):  # noqa: N803 - boto3's keyword
        self.buckets.append(Bucket)


def test_bucket_is_created_once_the_store_answers():
    store, log = ObjectStore(down=2), []
    assert server.ensure_bucket(store, "mlflow-artifacts", wait_s=0, log=log.append) == "created"
    assert store.buckets == ["mlflow-artifacts"] and len(log) == 2
    assert server.ensure_bucket(store, "mlflow-artifacts", wait_s=0) == "exists"
    with pytest.raises(RuntimeError, match="after 3 attempts: connection refused"):
        server.ensure_bucket(ObjectStore(down=10), "b", attempts=3, wait_s=0, log=lambda _: None)


def test_pipeline_user_follows_the_secret(tmp_path):
    pytest.importorskip("flask_wtf", reason="the MLflow auth app needs Flask-WTF (mlflow[auth])")
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

    uri = f"sqlite:///{tmp_path / 'auth.db'}"
    assert server.ensure_user(uri, "recpipe-pipeline", TOKEN) == "created"
    assert server.ensure_user(uri, "recpipe-pipeline", TOKEN) == "unchanged"
    assert server.ensure_user(uri, "recpipe-pipeline", TOKEN + "-rotated") == "updated"
    store = SqlAlchemyStore()
    store.init_db(uri)
    assert store.authenticate_user("recpipe-pipeline", TOKEN + "-rotated")
    assert not store.authenticate_user("recpipe-pipeline", TOKEN)
    assert not store.get_user("recpipe-pipeline").is_admin
    with pytest.raises(ValueError, match="token of MLflow user"):
        server.ensure_user(uri, "recpipe-pipeline", "")


# ---- a real server -------------------------------------------------------------------------------------


@pytest.fixture
def mlflow_server(tmp_path):
    pytest.importorskip("flask_wtf", reason="the MLflow auth app needs Flask-WTF (mlflow[auth])")
    port = free_port()
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT / "images" / "mlflow"), os.environ.get("PYTHONPATH")])
        ),
        MLFLOW_AUTH_DATABASE_URI=f"sqlite:///{tmp_path / 'auth.db'}",
        MLFLOW_AUTH_CONFIG_PATH=str(tmp_path / "auth" / "basic_auth.ini"),
        MLFLOW_AUTH_ADMIN_USERNAME="admin",
        MLFLOW_AUTH_ADMIN_PASSWORD="admin-password-0123456789",
        MLFLOW_FLASK_SERVER_SECRET_KEY="flask-secret-0123456789",
        RECPIPE_PIPELINE_TOKEN=TOKEN,
    )
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "recpipe_mlflow_server", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    cmd += ["--artifacts-destination", str(tmp_path / "artifacts")]
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if http_status(url + "/health") == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(1)
        yield url, tmp_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


@pytest.mark.slow
def test_the_pipeline_token_logs_runs_and_artifacts_and_nothing_else_gets_in(mlflow_server, monkeypatch):
    url, tmp_path = mlflow_server
    search = f"{url}/api/2.0/mlflow/experiments/search?max_results=1"
    assert http_status(search) == 401
    assert http_status(search, {"Authorization": "Bearer not-the-token"}) == 401
    assert http_status(search, {"Authorization": f"Bearer {TOKEN}"}) == 200

    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)  # what the pipeline's pods get from recpipe-mlflow
    client = MlflowClient(tracking_uri=url)
    experiment = client.create_experiment("recpipe-auth-check")
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "auc", 0.71)
    (tmp_path / "report.txt").write_text("gate passed")
    client.log_artifact(run.info.run_id, str(tmp_path / "report.txt"))  # through the artifact proxy
    client.create_registered_model("recpipe-auth-check")
    assert client.get_run(run.info.run_id).data.metrics == {"auc": 0.71}
    assert any((tmp_path / "artifacts").rglob("report.txt"))
    # The pipeline user is an ordinary user: it cannot administer the server.
    create_user = urllib.request.Request(
        f"{url}/api/2.0/mlflow/users/create",
        data=b'{"username": "intruder", "password": "intruder-password-123"}',
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(create_user, timeout=30)
    assert denied.value.code == 403
    # People still log in with HTTP Basic.
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "admin-password-0123456789")
    assert MlflowClient(tracking_uri=url).get_experiment(experiment).name == "recpipe-auth-check"
