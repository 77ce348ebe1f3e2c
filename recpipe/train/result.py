"""What a training run did: :class:`TrainResult`, written by the trainer to ``train_result.json`` and read
back by the train stage (torch-free, so reading it loads no trainer)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
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
        seconds (float): wall time of this process's run, ``train_seconds + eval_seconds +
            checkpoint_seconds`` (the final evaluation and checkpoint included).
        rows_per_second (float): global rows of this run per second of training steps (``train_seconds``).
        steady_rows_per_second (float): the same after the first step (which also traces the model and
            fills the pipeline).
        rows_per_cpu_second (float): global rows per CPU-second of this process's training steps after the
            first (rank 0's in the JSON file): the throughput if the process never waited.
        final_loss (float | None): mean training loss of the last logging window.
        eval (dict | None): final evaluation metrics (AUC, GAUC, logloss, ...).
        checkpoint (str | None): the last checkpoint written.
        world_size (int): ranks.
        resumed_from (str | None): the checkpoint this run started from.
        rows (dict): what the data passes of this run did, over all ranks: ``rows_read`` =
            ``rows_used`` + ``rows_skipped`` (bad rows under ``on_bad_row: skip``), ``truncated_histories``,
            ``skipped_by_column``.
        train_seconds (float): wall seconds of the training steps (evaluations and checkpoints apart).
        eval_seconds (float), checkpoint_seconds (float): wall seconds of this run's evaluations and of its
            checkpoint writes (the final ones included; for a checkpoint written in the background, the copy
            to host memory and any wait for the previous write).
        final_checkpoint_seconds (float): of ``checkpoint_seconds``, the end of training's: its write and the
            wait for the last background write.
        zch_evictions (dict | None): rows of each zero-collision table evicted during this run, over all
            ranks (ids that gave their row to a new one); None without zch tables.
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
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    final_checkpoint_seconds: float = 0.0
    zch_evictions: dict[str, int] | None = None

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


@dataclass
class PhaseClock:
    """Wall seconds spent apart from the training steps, by phase (``eval``, ``checkpoint``), and the CPU
    seconds of this process in them, so throughput is counted over training steps only.

    Example::

        clock = PhaseClock()
        with clock.apart("eval"):
            evaluate(...)
        rows / (elapsed - clock.total)      # rows per second of training
    """

    wall: dict[str, float] = field(default_factory=lambda: {"eval": 0.0, "checkpoint": 0.0})
    cpu: float = 0.0

    @contextmanager
    def apart(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase``."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - t0
            self.cpu += time.process_time() - c0

    @property
    def total(self) -> float:
        """Wall seconds of every phase."""
        return sum(self.wall.values())
