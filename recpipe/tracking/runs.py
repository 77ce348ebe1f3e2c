"""One MLflow run per pipeline run: created by the first stage, resumed by id in the others.

Every function takes the run id; the tracking URI is remembered per run id by
``start_or_resume_run`` (each stage process calls it first), or passed as ``uri=``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunStatus, RunTag

from recpipe.redact import redact
from recpipe.tracking.uri import client, get_or_create_experiment

# MLflow limits (mlflow.utils.validation); servers reject what the client would let through.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
PARAMS_TAGS_PER_BATCH = 100
METRICS_PER_BATCH = 1000

TAG_FAILURE_REASON = "failure_reason"
END_STATUSES = ("FINISHED", "FAILED", "KILLED")

_RUN_URIS: dict[str, str] = {}
_BAD_KEY_CHARS = re.compile(r"[^\w\-. /:]")


def _uri_for(run_id: str, uri: str | None) -> str:
    if uri is not None:
        _RUN_URIS[run_id] = uri
        return uri
    try:
        return _RUN_URIS[run_id]
    except KeyError:
        raise ValueError(
            f"run {run_id} was not started or resumed in this process: call "
            "start_or_resume_run(uri, experiment, run_id=...) first, or pass uri="
        ) from None


def truncate(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters, ending with a marker that holds the full value's
    length and sha256 prefix, so two long values that differ never look equal."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    marker = f"...[truncated {len(value)} chars, sha256 {digest}]"
    return value[: limit - len(marker)] + marker


def clean_key(key: str) -> str:
    """A valid MLflow param/metric/tag key: disallowed characters become ``_``; at most 250 chars."""
    key = _BAD_KEY_CHARS.sub("_", str(key)).lstrip("/")
    key = key.replace("..", "_.")
    return key[:MAX_KEY] or "_"


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def start_or_resume_run(
    uri: str,
    experiment: str,
    run_id: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, Any] | None = None,
) -> str:
    """Create a run in ``experiment`` (created if missing), or resume ``run_id``; returns the run id.

    A resumed run must belong to ``experiment``; one that had ended (a retried stage) is set back to
    RUNNING.
    """
    c = client(uri)
    exp = get_or_create_experiment(uri, experiment)
    if run_id is None:
        run = c.create_run(exp.experiment_id, run_name=run_name)
        run_id = run.info.run_id
    else:
        run = c.get_run(run_id)
        if run.info.experiment_id != exp.experiment_id:
            raise ValueError(
                f"run {run_id} belongs to experiment id {run.info.experiment_id}, not {experiment!r} "
                f"(id {exp.experiment_id})"
            )
        if run.info.lifecycle_stage == "deleted":
            raise ValueError(f"run {run_id} is deleted")
        if run.info.status != "RUNNING":
            c.update_run(run_id, status="RUNNING")
    _RUN_URIS[run_id] = uri
    if tags:
        set_tags(run_id, tags)
    return run_id


def log_params(run_id: str, params: Mapping[str, Any], *, uri: str | None = None) -> dict[str, str]:
    """Log a flat mapping (e.g. ``flatten(cfg.to_dict())``) as params, 100 per call.

    Values are stringified (lists and dicts as JSON), credentials in URIs redacted
    (:func:`recpipe.redact.redact`) and truncated to MLflow's 6000 characters.
    Params are immutable: re-logging an equal value (a resumed stage) is skipped; a different value
    raises ``ValueError`` naming the keys.

    Returns:
        dict[str, str]: the params as stored.
    """
    c = client(_uri_for(run_id, uri))
    wanted = {clean_key(k): truncate(redact(_to_str(v)), MAX_PARAM_VALUE) for k, v in params.items()}
    existing = c.get_run(run_id).data.params
    conflicts = sorted(k for k, v in wanted.items() if k in existing and existing[k] != v)
    if conflicts:
        raise ValueError(
            f"run {run_id} already has params {conflicts} with different values; params cannot change "
            "within a run"
        )
    new = [Param(k, v) for k, v in wanted.items() if k not in existing]
    for batch in _chunks(new, PARAMS_TAGS_PER_BATCH):
        c.log_batch(run_id, params=batch)
    return wanted


def log_metrics(
    run_id: str, metrics: Mapping[str, float | int | None], step: int = 0, *, uri: str | None = None
) -> None:
    """Log metrics at ``step``, 1000 per call; None values are skipped, NaN is kept."""
    c = client(_uri_for(run_id, uri))
    now = int(time.time() * 1000)
    items = [Metric(clean_key(k), float(v), now, int(step)) for k, v in metrics.items() if v is not None]
    for batch in _chunks(items, METRICS_PER_BATCH):
        c.log_batch(run_id, metrics=batch)


def set_tags(run_id: str, tags: Mapping[str, Any], *, uri: str | None = None) -> None:
    """Set run tags (values stringified, URI credentials redacted, truncated to 8000 characters), 100
    per call."""
    c = client(_uri_for(run_id, uri))
    items = [
        RunTag(clean_key(k), truncate(redact(_to_str(v)), MAX_TAG_VALUE))
        for k, v in tags.items()
        if v is not None
    ]
    for batch in _chunks(items, PARAMS_TAGS_PER_BATCH):
        c.log_batch(run_id, tags=batch)


def log_artifact(
    run_id: str, local_path: str | Path, artifact_path: str | None = None, *, uri: str | None = None
) -> str:
    """Upload one file; returns its artifact URI."""
    local_path = Path(local_path)
    if not local_path.is_file():
        raise FileNotFoundError(f"artifact {local_path} is not a file")
    c = client(_uri_for(run_id, uri))
    c.log_artifact(run_id, str(local_path), artifact_path)
    rel = f"{artifact_path.strip('/')}/{local_path.name}" if artifact_path else local_path.name
    return f"runs:/{run_id}/{rel}"


def log_artifacts(
    run_id: str, local_dir: str | Path, artifact_path: str | None = None, *, uri: str | None = None
) -> str:
    """Upload a folder's contents (recursively) under ``artifact_path``; returns its artifact URI."""
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise NotADirectoryError(f"artifact folder {local_dir} is not a directory")
    c = client(_uri_for(run_id, uri))
    c.log_artifacts(run_id, str(local_dir), artifact_path)
    return f"runs:/{run_id}/{artifact_path.strip('/')}" if artifact_path else f"runs:/{run_id}"


def log_model_dir(run_id: str, local_dir: str | Path, artifact_path: str, *, uri: str | None = None) -> str:
    """Upload an exported model folder (any format, e.g. with a manifest) so it can be registered
    with ``register_version(uri, name, run_id, artifact_path, ...)``; returns ``runs:/<id>/<path>``."""
    if not artifact_path.strip("/"):
        raise ValueError("artifact_path must name a folder, e.g. 'model'")
    return log_artifacts(run_id, local_dir, artifact_path, uri=uri)


def end_run(
    run_id: str, status: str = "FINISHED", reason: str | None = None, *, uri: str | None = None
) -> None:
    """End the run as FINISHED, FAILED or KILLED; ``reason`` is kept as tag ``failure_reason``."""
    status = status.upper()
    if status not in END_STATUSES:
        raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
    c = client(_uri_for(run_id, uri))
    if reason:
        set_tags(run_id, {TAG_FAILURE_REASON: reason})
    c.set_terminated(run_id, status=RunStatus.to_string(RunStatus.from_string(status)))


def run_summary(run_id: str, *, uri: str | None = None) -> dict[str, Any]:
    """Status, params, latest metrics, tags (without MLflow's own ``mlflow.*``) and artifact URI."""
    run = client(_uri_for(run_id, uri)).get_run(run_id)
    return {
        "run_id": run_id,
        "experiment_id": run.info.experiment_id,
        "status": run.info.status,
        "artifact_uri": run.info.artifact_uri,
        "params": dict(run.data.params),
        "metrics": dict(run.data.metrics),
        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
        "dataset_inputs": [
            {
                "name": d.dataset.name,
                "digest": d.dataset.digest,
                "source_type": d.dataset.source_type,
                "source": d.dataset.source,
                "schema": d.dataset.schema,
                "tags": {t.key: t.value for t in d.tags},
            }
            for d in (run.inputs.dataset_inputs if run.inputs else [])
        ],
    }
