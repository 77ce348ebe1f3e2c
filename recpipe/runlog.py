"""The run log a stage writes to: params, metrics, artifacts, tags, inputs and the run's status.

Stages take a ``log: RunLog`` argument (default :data:`NULL_LOG`, which records nothing) instead of an
MLflow run id and tracking URI; :func:`recpipe.tracking.open_run_log` gives the MLflow implementation.
This module imports nothing but the standard library, so every layer may depend on it.

Example::

    log = recpipe.tracking.open_run_log(run_id, "sqlite:///runs/mlflow.db")
    with failing(log, "fit"):          # the run ends FAILED with "fit: <error>" if the block raises
        log.log_metrics({"fit.features": 12})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol


class RunLog(Protocol):
    """Where a stage records what it did (one MLflow run per pipeline run, or nothing)."""

    @property
    def run_id(self) -> str | None:
        """The run's id (``None``: nothing is recorded)."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float | int | None], step: int = 0) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None: ...

    def log_dataset(
        self, path: str, rows: int, columns: Mapping[str, str], digest: str, context: str, name: str
    ) -> None:
        """A dataset the run read (``context``: ``"training"`` or ``"evaluation"``)."""
        ...

    def tags(self) -> dict[str, str]:
        """The tags recorded so far (empty when nothing is recorded)."""
        ...

    def end(self, status: str = "FINISHED", reason: str | None = None) -> None:
        """End the run as ``FINISHED`` or ``FAILED`` (with the reason)."""
        ...


class NullLog:
    """A :class:`RunLog` that records nothing: stages called without a tracked run."""

    run_id = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float | int | None], step: int = 0) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        pass

    def log_dataset(
        self, path: str, rows: int, columns: Mapping[str, str], digest: str, context: str, name: str
    ) -> None:
        pass

    def tags(self) -> dict[str, str]:
        return {}

    def end(self, status: str = "FINISHED", reason: str | None = None) -> None:
        pass


NULL_LOG: RunLog = NullLog()


@contextmanager
def failing(log: RunLog, step: str) -> Iterator[None]:
    """Run a stage's body; if it raises, end the run as FAILED with ``"<step>: <error>"`` and re-raise.

    A tracking error while marking the run never hides the stage's own error.
    """
    try:
        yield
    except BaseException as err:
        try:
            log.end("FAILED", reason=f"{step}: {type(err).__name__}: {err}")
        except Exception as track_err:  # noqa: BLE001 - the stage's error is the one to raise
            print(f"recpipe: could not mark run {log.run_id} FAILED: {track_err}")
        raise
