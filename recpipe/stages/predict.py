"""predict: score any source the trainer reads with an exported model, streamed, into a Parquet file.

Rows go through the same raw-value contract and FG as training and serving (``fg.json`` of the export),
one source batch at a time, so memory stays bounded whatever the source's size. The output keeps the
input's order: ``row`` (0-based position in the source), the ``keep`` columns, then ``probability``
(or ``logit``; a multi-task model's ``probability_<label>`` for each of its labels). Under ``on_bad_row="skip"`` bad rows are left out and counted
(``rows_read = rows_scored + rows_skipped``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recpipe.runlog import NULL_LOG, RunLog, failing


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


def run(
    model: str,
    data: str,
    out: str,
    keep: list[str] | None = None,
    on_bad_row: Literal["error", "skip"] = "error",
    output: Literal["probability", "logit"] = "probability",
    batch_rows: int = 65_536,
    progress: bool = False,
    log: RunLog = NULL_LOG,
) -> PredictResult:
    """Score ``data`` with the exported model ``model``; write ``out`` (Parquet).

    Args:
        model (str): an export folder (the served backend is picked as at registration: rtp, onnx, jit,
            aoti) or one backend's folder (``export/rtp``).
        data (str): any source ``ingest`` reads: a Parquet/CSV file, folder or URI, ``odps://…``.
        out (str): the output Parquet file.
        keep (list[str] | None): input columns copied to the output (ids to join on).
        on_bad_row (str): ``"error"`` stops at the first bad row, naming file, row and column;
            ``"skip"`` leaves it out and counts it.
        output (str): ``"probability"`` (click probability, re-calibrated for negative sampling) or
            ``"logit"``.
        batch_rows (int): rows read and scored at a time (memory is bounded by it).
        progress (bool): a progress bar on stderr.
        log (RunLog): records the row counts and the throughput.

    Example::

        run("runs/x/export", "data/today/", "scores.parquet", keep=["user_id", "adgroup_id"])
    """
    from tqdm import tqdm

    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.export.loaders import load_backend, served_folder
    from recpipe.export.scorer import check_known_columns
    from recpipe.features.fg import FeatureGenerator

    keep = list(keep or [])
    with failing(log, "predict"):
        t0 = time.perf_counter()
        folder = served_folder(model)
        scorer = load_backend(folder)
        source = open_source(data)
        missing = [c for c in keep if source.schema().get_field_index(c) < 0]
        if missing:
            raise ValueError(f"{data}: no column(s) {missing} to keep; the data has {source.schema().names}")
        check_known_columns(scorer.spec, source.schema().names, where=data)
        fg = FeatureGenerator(scorer.spec, on_bad_row=on_bad_row, with_labels=False)
        t_loaded = time.perf_counter()
        out_path = Path(out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        writer: pq.ParquetWriter | None = None
        position = 0
        bar = tqdm(total=_total_rows(source), unit="row", disable=not progress, desc="predict")
        try:
            for sb in source.iter_batches(Shard(0, 1), batch_rows=batch_rows):
                features = fg(sb.batch, file=sb.file, first_row=sb.first_row)
                kept = np.arange(sb.num_rows) if fg.last_kept is None else np.flatnonzero(fg.last_kept)
                values = np.concatenate(features.values) if features.values else np.zeros(0, np.int64)
                lengths = np.concatenate(features.lengths) if features.lengths else np.zeros(0, np.int32)
                scores = scorer.to_output(scorer.predict_batch(features.dense, values, lengths), output)
                columns = {"row": pa.array(position + kept, pa.int64())}
                for c in keep:
                    columns[c] = sb.batch.column(c).take(pa.array(kept))
                for name, column in scorer.output_by_column(scores, output).items():
                    columns[name] = pa.array(column, pa.float64())
                table = pa.table(columns)
                if writer is None:
                    writer = pq.ParquetWriter(out_path, table.schema)
                writer.write_table(table)
                position += sb.num_rows
                bar.update(sb.num_rows)
        finally:
            bar.close()
            if writer is not None:
                writer.close()
        if writer is None:  # an empty source still gets its (empty) output file
            empty = {name: pa.array([], pa.float64()) for name in scorer.output_columns(output)}
            pq.write_table(pa.table({"row": pa.array([], pa.int64()), **empty}), out_path)
        t1 = time.perf_counter()
        st = fg.stats
        result = PredictResult(
            out=str(out_path), model=str(folder), rows_read=st.rows_read, rows_scored=st.rows_emitted,
            rows_skipped=st.rows_skipped, skipped_by_column=dict(st.skipped_by_column),
            seconds=round(t1 - t0, 3), load_seconds=round(t_loaded - t0, 3),
            rows_per_second=round(st.rows_read / (t1 - t_loaded), 1) if t1 > t_loaded else 0.0,
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


def _total_rows(source: object) -> int | None:
    try:
        return int(source.num_rows())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a source that cannot count cheaply shows a bar without a total
        return None
