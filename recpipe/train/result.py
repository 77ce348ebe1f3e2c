"""What a training run did: :class:`TrainResult`, written by the trainer to ``train_result.json`` and read
back by the train stage (torch-free, so reading it loads no trainer)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

RESULT_FILE = "train_result.json"


@dataclass
class TrainResult:
    """What a training run did (the same on every rank; also written to ``train_result.json``).

    Args:
        steps (int): optimizer steps in total (including those before a resume).
        epochs_completed (int): full passes over the training data.
        rows_trained (int): rows of all steps in total.
        seconds (float), rows_per_second (float): wall time and global throughput of this process's run.
        steady_rows_per_second (float): global throughput after the first step (which also traces the
            model and fills the pipeline).
        rows_per_cpu_second (float): global rows per CPU-second of this process after the first step
            (rank 0's in the JSON file): the throughput if the process never waited.
        final_loss (float | None): mean training loss of the last logging window.
        eval (dict | None): final evaluation metrics (AUC, GAUC, logloss, ...).
        checkpoint (str | None): the last checkpoint written.
        world_size (int): ranks.
        resumed_from (str | None): the checkpoint this run started from.
        rows (dict): what the data passes of this run did, over all ranks: ``rows_read`` =
            ``rows_used`` + ``rows_skipped`` (bad rows under ``on_bad_row: skip``), ``truncated_histories``,
            ``skipped_by_column``.
    """

    steps: int
    epochs_completed: int
    rows_trained: int
    seconds: float
    rows_per_second: float
    steady_rows_per_second: float
    rows_per_cpu_second: float
    final_loss: float | None
    eval: dict[str, Any] | None
    checkpoint: str | None
    world_size: int
    resumed_from: str | None = None
    rows: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, out_dir: str | Path) -> Path:
        """``out_dir/train_result.json``."""
        path = Path(out_dir) / RESULT_FILE
        path.write_text(json.dumps(self.to_dict(), indent=1, default=float))
        return path

    @classmethod
    def read(cls, out_dir: str | Path) -> TrainResult | None:
        """The result a run wrote in ``out_dir``; None when there is none (or it lacks a field)."""
        path = Path(out_dir) / RESULT_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None
