"""The MLflow :class:`~recpipe.runlog.RunLog`: one pipeline run, resumed by id in every step's process."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recpipe.runlog import NULL_LOG, RunLog
from recpipe.tracking.lineage import log_dataset_input
from recpipe.tracking.runs import end_run, log_artifact, log_metrics, log_params, run_summary, set_tags
from recpipe.tracking.uri import client


class MlflowRunLog:
    """Records into the MLflow run ``run_id`` of the store at ``tracking_uri``.

    Args:
        run_id (str): an existing run (created by the pipeline's first step).
        tracking_uri (str): MLflow tracking URI.
    """

    def __init__(self, run_id: str, tracking_uri: str) -> None:
        self._run_id = run_id
        self.tracking_uri = tracking_uri

    @property
    def run_id(self) -> str:
        return self._run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        log_params(self._run_id, params, uri=self.tracking_uri)

    def log_metrics(self, metrics: Mapping[str, float | int | None], step: int = 0) -> None:
        log_metrics(self._run_id, metrics, step=step, uri=self.tracking_uri)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        set_tags(self._run_id, tags, uri=self.tracking_uri)

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        log_artifact(self._run_id, path, folder, uri=self.tracking_uri)

    def log_dataset(
        self, path: str, rows: int, columns: Mapping[str, str], digest: str, context: str, name: str
    ) -> None:
        log_dataset_input(
            self._run_id, path, rows, columns, digest, context, name=name, uri=self.tracking_uri
        )

    def tags(self) -> dict[str, str]:
        return dict(run_summary(self._run_id, uri=self.tracking_uri)["tags"])

    def end(self, status: str = "FINISHED", reason: str | None = None) -> None:
        end_run(self._run_id, status, reason=reason, uri=self.tracking_uri)


def open_run_log(run_id: str | None, tracking_uri: str | None) -> RunLog:
    """The run ``run_id`` set back to RUNNING in this process (each pipeline step is its own process), or
    :data:`~recpipe.runlog.NULL_LOG` when either argument is empty."""
    if not run_id or not tracking_uri:
        return NULL_LOG
    from recpipe.tracking.runs import start_or_resume_run

    c = client(tracking_uri)
    experiment = c.get_experiment(c.get_run(run_id).info.experiment_id).name
    start_or_resume_run(tracking_uri, experiment, run_id=run_id)
    return MlflowRunLog(run_id, tracking_uri)
