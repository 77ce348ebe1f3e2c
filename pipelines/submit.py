"""Submit the training pipeline to a Kubeflow Pipelines endpoint with ``kfp.Client``."""

import os
import tempfile
from pathlib import Path
from typing import Any

from pipelines.training_pipeline import PIPELINE_NAME, compile_pipeline, training_pipeline

ENV_TOKEN = "KFP_TOKEN"


def check_arguments(arguments: dict[str, Any]) -> None:
    """Refuse names the pipeline does not have before anything is sent (KFP would reject them later,
    with a less direct message)."""
    known = set(training_pipeline.component_spec.inputs or {})
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise ValueError(f"unknown pipeline parameter(s) {unknown}; the pipeline takes {sorted(known)}")


def run_url(host: str, run_id: str) -> str:
    """The KFP UI page of a run (the UI is served by the same endpoint as the API)."""
    return f"{host.rstrip('/')}/#/runs/details/{run_id}"


def submit(
    host: str,
    arguments: dict[str, Any] | None = None,
    experiment: str = "recpipe",
    run_name: str | None = None,
    namespace: str | None = None,
    token: str | None = None,
) -> dict[str, str]:
    """Compile and submit one run; returns ``{"run_id", "url"}``.

    Args:
        host (str): KFP API endpoint, e.g. ``http://localhost:8080`` (a port-forward of ml-pipeline-ui).
        arguments (dict | None): pipeline parameters (see ``training_pipeline``).
        experiment (str): KFP experiment, created if missing.
        run_name (str | None): display name of the run.
        namespace (str | None): Kubeflow profile namespace (multi-user installs).
        token (str | None): bearer token; default env ``KFP_TOKEN`` (e.g. ``kubectl create token …``).
    """
    import kfp

    arguments = dict(arguments or {})
    check_arguments(arguments)
    client = kfp.Client(
        host=host,
        existing_token=token or os.environ.get(ENV_TOKEN) or None,
        namespace=namespace or "kubeflow",
    )
    with tempfile.TemporaryDirectory() as tmp:
        package = compile_pipeline(Path(tmp) / f"{PIPELINE_NAME}.yaml")
        result = client.create_run_from_pipeline_package(
            str(package),
            arguments=arguments,
            run_name=run_name,
            experiment_name=experiment,
            namespace=namespace,
            enable_caching=False,
        )
    return {"run_id": result.run_id, "url": run_url(host, result.run_id)}
