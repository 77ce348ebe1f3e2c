"""predict: score any source the trainer reads with an exported model, streamed, into a Parquet file.

Rows go through the same raw-value contract and FG as training and serving (``fg.json`` of the export),
one source batch at a time, so memory stays bounded whatever the source's size. The output keeps the
input's order: ``row`` (0-based position in the source), the ``keep`` columns, then ``probability``
(or ``logit``; a multi-task model's ``probability_<label>`` for each of its labels). Under ``on_bad_row="skip"`` bad rows are left out and counted
(``rows_read = rows_scored + rows_skipped``).

A log sorted by request (one user × its candidates) is scored request by request with ``request_key`` and
``context_columns``: the user's columns are FG'd once per request and tiled over its candidates
(:mod:`recpipe.features.request_groups`), the same output as the row form.
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
    request_key: str | None = None,
    context_columns: list[str] | None = None,
    k: int | None = None,
) -> PredictResult:
    """Score ``data`` with the exported model ``model``; write ``out`` (Parquet). A retrieval export writes each
    row's top ``k`` items instead (:func:`~recpipe.stages.predict_retrieval.run_retrieval`).

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
        request_key (str | None): with ``context_columns``: the column whose runs of consecutive equal values
            are one request each (a log sorted by request; a key that comes back later is another request).
        context_columns (list[str] | None): the columns every row of a request shares (the user's features
            and history), FG'd once per request; a row of a request holding another value is an error naming
            its row and column whatever ``on_bad_row`` says (a contract error of the grouping, not a bad
            value). A request longer than ``batch_rows`` is scored in pieces (the same output).
        k (int | None): a retrieval export's items per row (default 50); a ranking model refuses it.

    Raises:
        ValueError: a bad row (``on_bad_row="error"``), a ``keep`` or grouping column not in the data, a context
            column that is no input column of the model, ``request_key`` without ``context_columns`` or the
            other way round.

    Example::

        run("runs/x/export", "data/today/", "scores.parquet", keep=["user_id", "adgroup_id"])
    """
    from tqdm import tqdm

    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.export.layout import is_retrieval_export
    from recpipe.export.loaders import load_backend, served_folder
    from recpipe.features.fg import FeatureGenerator
    from recpipe.features.request_groups import Grouped, RequestGroups

    if is_retrieval_export(model):
        from recpipe.export.retriever import DEFAULT_K
        from recpipe.stages.predict_retrieval import run_retrieval

        if request_key is not None or context_columns is not None or output != "probability":
            raise ValueError(
                f"{model} is a retrieval export: it writes each row's top-k items; --request-key, "
                "--context-columns and --output are a ranking model's"
            )
        return run_retrieval(model, data, out, k or DEFAULT_K, keep, on_bad_row, batch_rows, log)
    if k is not None:
        raise ValueError(f"k (--k) is a retrieval export's; {model} scores each row once (a ranking model)")
    keep = list(keep or [])
    if (request_key is None) != (context_columns is None):
        raise ValueError(
            "request_key (--request-key) and context_columns (--context-columns) go together: the requests "
            "and the columns their rows share"
        )
    with failing(log, "predict"):
        t0 = time.perf_counter()
        folder = served_folder(model)
        scorer = load_backend(folder)
        source = open_source(data)
        check_keep(source.schema().names, keep, data)
        scorer.check_columns(source.schema().names, where=data)
        fg = FeatureGenerator(scorer.spec, on_bad_row=on_bad_row, with_labels=False)
        groups = None
        if request_key is not None:
            groups = RequestGroups(
                fg, request_key, list(context_columns or []), source.schema().names, data, batch_rows
            )
        t_loaded = time.perf_counter()
        out_path = Path(out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        writer: pq.ParquetWriter | None = None
        position = 0
        bar = tqdm(total=_total_rows(source), unit="row", disable=not progress, desc="predict")

        def write(done: Grouped | None) -> None:
            nonlocal writer
            if done is None:
                return
            values = np.concatenate(done.out.values) if done.out.values else np.zeros(0, np.int64)
            lengths = np.concatenate(done.out.lengths) if done.out.lengths else np.zeros(0, np.int32)
            scores = scorer.to_output(scorer.predict_batch(done.out.dense, values, lengths), output)
            columns = {"row": pa.array(done.positions, pa.int64())}
            for c in keep:
                columns[c] = done.rows.column(c)
            for name, column in scorer.output_by_column(scores, output).items():
                columns[name] = pa.array(column, pa.float64())
            table = pa.table(columns)
            if writer is None:
                writer = pq.ParquetWriter(out_path, table.schema)
            writer.write_table(table)

        try:
            for sb in source.iter_batches(Shard(0, 1), batch_rows=batch_rows):
                if groups is not None:
                    write(groups.feed(sb, position))
                else:
                    features = fg(sb.batch, file=sb.file, first_row=sb.first_row)
                    kept = np.arange(sb.num_rows) if fg.last_kept is None else np.flatnonzero(fg.last_kept)
                    rows = pa.Table.from_batches([sb.batch.select(keep)]).take(pa.array(kept))
                    write(Grouped(features, rows, position + kept))
                position += sb.num_rows
                bar.update(sb.num_rows)
            if groups is not None:
                write(groups.finish())
        finally:
            bar.close()
            if writer is not None:
                writer.close()
        if writer is None:  # an empty source still gets its (empty) output file
            empty = {name: pa.array([], pa.float64()) for name in scorer.output_columns(output)}
            pq.write_table(pa.table({"row": pa.array([], pa.int64()), **empty}), out_path)
        # grouped: only the requests with a bad value went through ``fg`` (row by row)
        return finished(out_path, str(folder), position, fg.stats, t0, t_loaded, log)


def _total_rows(source: object) -> int | None:
    try:
        return int(source.num_rows())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a source that cannot count cheaply shows a bar without a total
        return None
