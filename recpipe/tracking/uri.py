"""Where MLflow data lives: the tracking URI, the artifact root of local stores, experiments."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Experiment
from mlflow.exceptions import MlflowException

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_REGISTRY_URI = "MLFLOW_REGISTRY_URI"
DB_FILE = "mlflow.db"
ARTIFACT_DIR = "mlartifacts"

_ALREADY_EXISTS = {"RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"}
_NOT_FOUND = {"RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"}


def tracking_uri(cfg_uri: str | None, run_dir: str | Path, environ: dict[str, str] | None = None) -> str:
    """The tracking URI: env ``MLFLOW_TRACKING_URI`` > ``cfg_uri`` > ``sqlite:///<run_dir>/mlflow.db``.

    With the embedded default, experiments created through ``start_or_resume_run`` keep their
    artifacts in ``<run_dir>/mlartifacts``.

    Args:
        cfg_uri (str | None): ``tracking.uri`` from the config.
        run_dir (str | Path): the pipeline run folder, for the embedded default.
        environ (dict[str, str], optional): the environment to read (default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_TRACKING_URI):
        return env[ENV_TRACKING_URI]
    if cfg_uri:
        return cfg_uri
    db = Path(run_dir).resolve() / DB_FILE
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def local_store_path(uri: str) -> Path | None:
    """The file behind a local store URI (``sqlite:///path`` or ``file:``/plain path), else None."""
    if not uri or uri.startswith("databricks") or uri == "uc":
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        # sqlite:////abs/path, or sqlite:///rel/path (relative to the working directory).
        path = unquote(uri[len("sqlite:///") :].split("?")[0]) if uri.startswith("sqlite:///") else ""
        if not path or path == ":memory:":
            return None
        return Path(path).resolve()
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).resolve()
    if parsed.scheme == "":
        return Path(uri).resolve()
    return None


def is_local(uri: str) -> bool:
    return local_store_path(uri) is not None


def artifact_root(uri: str) -> Path | None:
    """``<folder of the db>/mlartifacts`` for a sqlite store; None when the store decides
    (a tracking server, a file store, a remote database)."""
    path = local_store_path(uri)
    if path is None or not uri.startswith("sqlite:"):
        return None
    return path.parent / ARTIFACT_DIR


def client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` bound to ``uri`` for tracking and registry alike."""
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@contextmanager
def fluent_uri(uri: str) -> Iterator[None]:
    """Point MLflow's global (fluent) tracking and registry URI at ``uri`` for the duration.

    Needed where MLflow itself reads the global URI: the pyfunc API, and a local registry store
    resolving a ``models:/<model_id>`` source through the default tracking store. Afterwards the
    previous state is restored exactly, including "not set": ``mlflow.set_tracking_uri`` also
    writes ``MLFLOW_TRACKING_URI`` into the environment, which would otherwise leak into
    ``tracking_uri()`` and into child processes. Not thread-safe (MLflow's globals are not).
    """
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils as tracking_utils

    env_keys = (ENV_TRACKING_URI, ENV_REGISTRY_URI)
    saved_env = {k: os.environ.get(k) for k in env_keys}
    saved_tracking = getattr(tracking_utils, "_tracking_uri", None)
    saved_registry = getattr(registry_utils, "_registry_uri", None)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(saved_tracking)
        mlflow.set_registry_uri(saved_registry)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def error_code(err: MlflowException) -> str:
    return str(getattr(err, "error_code", ""))


def get_or_create_experiment(uri: str, name: str) -> Experiment:
    """The experiment named ``name``, created if missing (artifacts under ``artifact_root(uri)``).

    Two processes may race to create it; the loser reads the winner's experiment.
    """
    c = client(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        root = artifact_root(uri)
        location = None
        if root is not None:
            location = (root / re.sub(r"[^\w.-]+", "_", name)).as_uri()
        try:
            c.create_experiment(name, artifact_location=location)
        except MlflowException as err:
            if error_code(err) not in _ALREADY_EXISTS:
                raise
        exp = c.get_experiment_by_name(name)
    if exp is None:
        raise RuntimeError(f"experiment {name!r} could not be created in {uri}")
    if exp.lifecycle_stage == "deleted":
        raise ValueError(f"experiment {name!r} in {uri} is deleted; restore it or use another name")
    return exp
