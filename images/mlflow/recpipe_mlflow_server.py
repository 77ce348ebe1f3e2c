"""The MLflow tracking server of a recpipe cluster: ``mlflow server --app-name basic-auth``, configured from
the environment, plus a bearer-token login for the pipeline.

The pipeline's pods authenticate with ``MLFLOW_TRACKING_TOKEN`` (the Secret ``recpipe-mlflow``), which the
MLflow client sends as ``Authorization: Bearer <token>``; MLflow's basic-auth app only understands
``Basic``. ``authenticate_basic_or_token`` (set as the auth app's ``authorization_function``) accepts both:
Basic as MLflow does, and a bearer token as the password of one MLflow user, ``RECPIPE_PIPELINE_USER``
(default ``recpipe-pipeline``), an ordinary non-admin user whose permissions MLflow checks as for anyone.

Commands (the image's entrypoint, ``python -m recpipe_mlflow_server``):

    serve [mlflow server options]   write the auth config, create or re-key the pipeline user, exec mlflow
    ensure-bucket                   create the artifact bucket of MLFLOW_ARTIFACTS_DESTINATION if missing

Environment (read here, at process entry only):
    MLFLOW_AUTH_DATABASE_URI        the auth app's user store (required by ``serve``)
    MLFLOW_AUTH_DEFAULT_PERMISSION  permission of users on what they did not create (default READ)
    MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD, MLFLOW_FLASK_SERVER_SECRET_KEY: read by MLflow
    RECPIPE_PIPELINE_USER, RECPIPE_PIPELINE_TOKEN   the pipeline's user and its token (= password)
    MLFLOW_ARTIFACTS_DESTINATION, MLFLOW_S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
"""

from __future__ import annotations

import configparser
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

AUTHORIZATION_FUNCTION = "recpipe_mlflow_server:authenticate_basic_or_token"
DEFAULT_PIPELINE_USER = "recpipe-pipeline"
DEFAULT_CONFIG_PATH = "/tmp/recpipe-mlflow/basic_auth.ini"
PERMISSIONS = ("READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS")
# The server process reads this once, when MLflow imports the authorization function.
PIPELINE_USER = os.environ.get("RECPIPE_PIPELINE_USER") or DEFAULT_PIPELINE_USER


def write_auth_config(
    path: str | Path,
    database_uri: str,
    default_permission: str = "READ",
    authorization_function: str = AUTHORIZATION_FUNCTION,
) -> Path:
    """Write the basic-auth app's INI file. The admin's name and password are left to MLflow's own
    ``MLFLOW_AUTH_ADMIN_USERNAME`` / ``MLFLOW_AUTH_ADMIN_PASSWORD`` so that no password lands on disk."""
    if not database_uri:
        raise ValueError("MLFLOW_AUTH_DATABASE_URI is empty: the auth app needs a user store")
    if default_permission not in PERMISSIONS:
        raise ValueError(f"default permission must be one of {PERMISSIONS}, got {default_permission!r}")
    config = configparser.ConfigParser(interpolation=None)
    config["mlflow"] = {
        "default_permission": default_permission,
        "database_uri": database_uri,
        "authorization_function": authorization_function,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the URI may hold a password
    with os.fdopen(fd, "w") as f:
        config.write(f)
    return path


def ensure_user(database_uri: str, username: str, password: str) -> str:
    """Create ``username`` (not an admin) with ``password`` in the auth store, or set its password when it
    exists: the Secret is the source of truth, so rotating the token is a restart. Returns what was done."""
    if not password:
        raise ValueError(f"the token of MLflow user {username!r} is empty")
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore()
    store.init_db(database_uri)
    if not store.has_user(username):
        try:
            store.create_user(username, password, is_admin=False)
            return "created"
        except Exception:
            if not store.has_user(username):  # not another replica creating it at the same moment
                raise
    if store.authenticate_user(username, password):
        return "unchanged"
    store.update_user(username, password=password)
    return "updated"


def authenticate_basic_or_token() -> Any:
    """MLflow ``authorization_function``: ``Basic`` as MLflow's own, ``Bearer <token>`` as the pipeline user
    whose password is the token. Returns a werkzeug ``Authorization`` or MLflow's 401 response."""
    from flask import request
    from mlflow.server.auth import authenticate_request_basic_auth, make_basic_auth_response, store
    from werkzeug.datastructures import Authorization

    auth = request.authorization
    if auth is not None and auth.type == "bearer":
        if auth.token and store.authenticate_user(PIPELINE_USER, auth.token):
            return Authorization("basic", {"username": PIPELINE_USER, "password": auth.token})
        return make_basic_auth_response()
    return authenticate_request_basic_auth()


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` → ``("bucket", "prefix")``."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"expected an s3://bucket[/prefix] URI, got {uri!r}")
    return parsed.netloc, parsed.path.strip("/")


def ensure_bucket(
    client: Any, bucket: str, attempts: int = 30, wait_s: float = 2.0, log: Callable[[str], None] = print
) -> str:
    """Create ``bucket`` unless it exists, retrying while the object store starts. Returns what was done."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            if bucket in names:
                return "exists"
            client.create_bucket(Bucket=bucket)
            return "created"
        except Exception as e:  # noqa: BLE001 - connection refused, DNS not ready, 503 while MinIO starts
            last = e
            log(f"object store not ready ({type(e).__name__}: {e}); retrying in {wait_s:.0f}s")
            time.sleep(wait_s)
    raise RuntimeError(f"could not create bucket {bucket!r} after {attempts} attempts: {last}")


def _serve(args: Sequence[str], env: dict[str, str]) -> int:
    config_path = env.get("MLFLOW_AUTH_CONFIG_PATH") or DEFAULT_CONFIG_PATH
    database_uri = env.get("MLFLOW_AUTH_DATABASE_URI", "")
    write_auth_config(config_path, database_uri, env.get("MLFLOW_AUTH_DEFAULT_PERMISSION") or "READ")
    env["MLFLOW_AUTH_CONFIG_PATH"] = str(config_path)
    token = env.get("RECPIPE_PIPELINE_TOKEN", "")
    user = env.get("RECPIPE_PIPELINE_USER") or DEFAULT_PIPELINE_USER
    if token:
        print(f"MLflow user {user!r}: {ensure_user(database_uri, user, token)}", flush=True)
    else:
        print("RECPIPE_PIPELINE_TOKEN is not set: bearer tokens will be refused", flush=True)
    cmd = ["mlflow", "server", "--app-name", "basic-auth", *args]
    os.execvpe(cmd[0], cmd, env)
    return 1  # not reached


def _ensure_bucket(env: dict[str, str]) -> int:
    import boto3

    bucket, _ = split_s3_uri(env.get("MLFLOW_ARTIFACTS_DESTINATION", ""))
    client = boto3.client("s3", endpoint_url=env.get("MLFLOW_S3_ENDPOINT_URL") or None)
    print(f"bucket {bucket!r}: {ensure_bucket(client, bucket)}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("serve", "ensure-bucket"):
        print(__doc__, file=sys.stderr)
        return 2
    env = dict(os.environ)
    try:
        if argv[0] == "serve":
            return _serve(argv[1:], env)
        return _ensure_bucket(env)
    except (ValueError, RuntimeError) as e:
        print(f"recpipe_mlflow_server {argv[0]}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
