"""predict with a retrieval export: every user row of any source the trainer reads → its top-K items, streamed into
Parquet (offline candidate generation, e.g. a nightly candidate table for the ranking model).

Rows go through the user tower's ``fg.json`` (the raw-value contract, as at training), the exported tower and the
export's FAISS index (:class:`~recpipe.export.retriever.Retriever`), one source batch at a time. The output keeps
the input's order: ``row`` (0-based position in the source), the ``keep`` columns, ``item_ids`` (the K best
items, best first) and ``scores`` (their inner products with the user's embedding). Under ``on_bad_row="skip"`` bad
rows are left out and counted (``rows_read = rows_scored + rows_skipped``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recpipe.runlog import NULL_LOG, RunLog, failing
from recpipe.stages.predict_result import PredictResult, check_keep, finished


def run_retrieval(
    model: str,
    data: str,
    out: str,
    k: int,
    keep: list[str] | None = None,
    on_bad_row: Literal["error", "skip"] = "error",
    batch_rows: int = 65_536,
    log: RunLog = NULL_LOG,
) -> PredictResult:
    """Write each row's top ``k`` items of the retrieval export ``model`` for the rows of ``data`` into ``out``.

    Args:
        model (str): a retrieval export folder (``export.json`` of kind ``retrieval``).
        data (str): any source ``ingest`` reads (the users' columns; others are passed over).
        out (str): the output Parquet file.
        k (int): items per row, at most the catalogue's size.
        keep (list[str] | None): input columns copied to the output (ids to join on).
        on_bad_row (str): ``"error"`` stops at the first bad row, naming file, row and column; ``"skip"``
            leaves it out and counts it.
        batch_rows (int): rows read and scored at a time (memory is bounded by it).
        log (RunLog): records the row counts and the throughput.

    Raises:
        ValueError: a bad row (``on_bad_row="error"``), a ``keep`` column not in the data, ``k`` out of range.
        DataError: a source none of whose columns the user tower reads.
    """
    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.export.retriever import Retriever
    from recpipe.features.fg import FeatureGenerator

    keep = list(keep or [])
    with failing(log, "predict"):
        t0 = time.perf_counter()
        retriever = Retriever(model)
        retriever.check_k(k)  # before any row is read
        source = open_source(data)
        check_keep(source.schema().names, keep, data)
        retriever.check_columns(source.schema().names, where=data)
        fg = FeatureGenerator(retriever.spec, on_bad_row=on_bad_row, with_labels=False)
        t_loaded = time.perf_counter()
        out_path = Path(out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        writer: pq.ParquetWriter | None = None
        position = 0
        try:
            for sb in source.iter_batches(Shard(0, 1), batch_rows=batch_rows):
                features = fg(sb.batch, file=sb.file, first_row=sb.first_row)
                kept = np.arange(sb.num_rows) if fg.last_kept is None else np.flatnonzero(fg.last_kept)
                position += sb.num_rows
                if kept.size == 0:  # every row of the batch skipped (and counted)
                    continue
                ids, scores = retriever.search(retriever.embed(features), k)
                columns = {"row": pa.array(position - sb.num_rows + kept, pa.int64())}
                for c in keep:
                    columns[c] = sb.batch.column(c).take(pa.array(kept))
                columns["item_ids"] = ids
                offsets = pa.array(np.arange(0, scores.size + 1, k, dtype=np.int32))
                columns["scores"] = pa.ListArray.from_arrays(offsets, pa.array(scores.reshape(-1)))
                table = pa.table(columns)
                if writer is None:
                    writer = pq.ParquetWriter(out_path, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        if writer is None:  # an empty source still gets its (empty) output file
            empty = {
                "row": pa.array([], pa.int64()),
                "item_ids": pa.array([], pa.list_(retriever.item_ids.type)),
            }
            pq.write_table(pa.table({**empty, "scores": pa.array([], pa.list_(pa.float32()))}), out_path)
        return finished(out_path, str(model), position, fg.stats, t0, t_loaded, log)
