"""How a training job fails: :class:`TrainingFailed` for any launcher, :class:`LaunchError` for the
processes this machine started (with their exit code and the failing rank's report)."""

from __future__ import annotations


class TrainingFailed(RuntimeError):
    """Training ended without a checkpoint; the message carries the job's error and log tail."""


class LaunchError(TrainingFailed):
    """A local training job's processes failed.

    Args:
        what (str): what was started, e.g. ``"torchrun (2 processes)"``.
        returncode (int): its exit code (124: killed at the timeout).
        root_cause (str): the failing rank's report (traceback), else the output's tail.
    """

    def __init__(self, what: str, returncode: int, root_cause: str) -> None:
        self.what, self.returncode, self.root_cause = what, returncode, root_cause
        super().__init__(f"{what} exit code {returncode}: {root_cause}")
