"""What a predict wrote and how fast: the result shared by ``recpipe predict`` of a ranking export
(:mod:`recpipe.stages.predict`) and of a retrieval export (:mod:`recpipe.stages.predict_retrieval`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from recpipe.runlog import RunLog

if TYPE_CHECKING:
    from recpipe.features.fg import FGStats


@dataclass
class PredictResult:
    """What ``predict`` scored.

    Args:
        out (str): the Parquet file written.
        model (str): the export folder that scored.
        rows_read (int), rows_scored (int), rows_skipped (int): ``rows_read = rows_scored + rows_skipped``.
        skipped_by_column (dict[str, int]): skipped rows per column that failed first.
        seconds (float): wall time, loading the model included.
        load_seconds (float): verifying and loading the model.
        rows_per_second (float): ``rows_read`` per second of reading, scoring and writing (the model
            loaded).
    """

    out: str
    model: str
    rows_read: int
    rows_scored: int
    rows_skipped: int
    skipped_by_column: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    load_seconds: float = 0.0
    rows_per_second: float = 0.0


def finished(
    out: Path, model: str, rows_read: int, stats: FGStats, t0: float, t_loaded: float, log: RunLog
) -> PredictResult:
    """The result of a predict that read ``rows_read`` rows (FG's ``stats`` counted the skipped ones), started at
    ``t0`` and had its model loaded at ``t_loaded``; its counts and throughput logged."""
    t1 = time.perf_counter()
    result = PredictResult(
        out=str(out), model=model, rows_read=rows_read, rows_scored=rows_read - stats.rows_skipped,
        rows_skipped=stats.rows_skipped, skipped_by_column=dict(stats.skipped_by_column),
        seconds=round(t1 - t0, 3), load_seconds=round(t_loaded - t0, 3),
        rows_per_second=round(rows_read / (t1 - t_loaded), 1) if t1 > t_loaded else 0.0,
    )  # fmt: skip
    log.log_metrics(
        {
            "predict.rows_read": result.rows_read,
            "predict.rows_scored": result.rows_scored,
            "predict.rows_skipped": result.rows_skipped,
            "predict.rows_per_second": result.rows_per_second,
        }
    )
    return result


def check_keep(schema_names: list[str], keep: list[str], data: str) -> None:
    """The ``keep`` columns must be in the data.

    Raises:
        ValueError: naming the missing ones and the data's columns.
    """
    missing = [c for c in keep if c not in schema_names]
    if missing:
        raise ValueError(f"{data}: no column(s) {missing} to keep; the data has {schema_names}")
