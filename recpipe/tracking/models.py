"""Logging and loading MLflow pyfunc models; the wrapper class itself belongs to the model code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mlflow
import mlflow.pyfunc

from recpipe.tracking.runs import _uri_for
from recpipe.tracking.uri import client, fluent_uri


def log_pyfunc_model(
    run_id: str,
    python_model: Any,
    artifacts: Mapping[str, str],
    artifact_path: str,
    pip_requirements: list[str] | None = None,
    *,
    uri: str | None = None,
) -> str:
    """Log ``python_model`` (an ``mlflow.pyfunc.PythonModel``) with its ``artifacts`` as a logged
    model of ``run_id``; returns its model URI (``models:/<model_id>``) for ``register_version``.

    ``pip_requirements=None`` lets MLflow infer them (a few seconds); pass the exact pins for a
    serving image (torch, torchrec, recpipe).

    The pyfunc API only logs to the active run, so the run is made active for the call and then
    left RUNNING as it was (MLflow sets its end time, which ``end_run`` overwrites later).
    """
    run_uri = _uri_for(run_id, uri)
    status = client(run_uri).get_run(run_id).info.status
    with fluent_uri(run_uri):
        active = mlflow.active_run()
        if active is not None and active.info.run_id != run_id:
            raise RuntimeError(f"another MLflow run ({active.info.run_id}) is active in this process")
        started = active is None
        if started:
            mlflow.start_run(run_id=run_id)
        try:
            info = mlflow.pyfunc.log_model(
                name=artifact_path,
                python_model=python_model,
                artifacts=dict(artifacts),
                pip_requirements=pip_requirements,
            )
        finally:
            if started:
                mlflow.end_run(status=status)
    return info.model_uri


def load_pyfunc_model(uri: str, model_uri: str) -> Any:
    """Load a pyfunc model, e.g. ``models:/<name>@champion``, from the registry at ``uri``."""
    with fluent_uri(uri):
        return mlflow.pyfunc.load_model(model_uri)
