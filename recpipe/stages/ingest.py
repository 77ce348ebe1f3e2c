"""ingest: a source (ODPS table, Parquet/CSV path or URI, ``synthetic:taobao?rows=N``) → Parquet
``train/`` and ``eval/`` splits with a ``_meta.json`` (rows, digests, schema hash, sampling rate)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

import recpipe.data.types as types
from recpipe.auc import binary_auc
from recpipe.config import CsvOptions, SplitConfig
from recpipe.data.sharding import Shard
from recpipe.data.sources import open_source
from recpipe.features.schema_check import check_source
from recpipe.features.spec import FeatureSpec
from recpipe.runlog import NULL_LOG, RunLog, failing

SECONDS_PER_DAY = 86_400
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class IngestResult:
    train_dir: str
    eval_dir: str
    train_rows: int
    eval_rows: int
    negatives_dropped: int
    neg_sample_rate: float
    train_digest: str
    eval_digest: str
    schema_hash: str
    oracle_auc: float | None
    source: str
    seconds: float


def _uniform(index: np.ndarray, salt: int) -> np.ndarray:
    """A deterministic U[0,1) per global row index (no RNG state to carry between chunks)."""
    x = (index.astype(np.uint64) + np.uint64(salt)) * _GOLDEN
    x ^= x >> np.uint64(29)
    x *= _GOLDEN
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.parquet")):
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class _Writer:
    def __init__(self, folder: Path, rows_per_file: int = 1_000_000):
        self.folder, self.rows_per_file = folder, rows_per_file
        self.index, self.rows, self.writer, self.in_file = 0, 0, None, 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.writer is None or self.in_file >= self.rows_per_file:
            self.close()
            self.writer = pq.ParquetWriter(self.folder / f"part-{self.index:05d}.parquet", table.schema)
            self.index += 1
            self.in_file = 0
        self.writer.write_table(table, row_group_size=65_536)
        self.in_file += table.num_rows
        self.rows += table.num_rows

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def run(
    source: str,
    out_dir: str | Path | None,
    label: str,
    split: SplitConfig | None = None,
    neg_sample_rate: float = 1.0,
    oracle_column: str | None = "true_prob",
    csv: CsvOptions | None = None,
    seed: int = 0,
    train_dir: str | Path | None = None,
    eval_dir: str | Path | None = None,
    log: RunLog = NULL_LOG,
    spec: FeatureSpec | None = None,
) -> IngestResult:
    """Read ``source`` once, split it and write ``out_dir/train`` and ``out_dir/eval`` as Parquet.

    Args:
        source (str): ``odps://project/tables/t[/pt=…]``, a Parquet/CSV path or URI, or
            ``synthetic:taobao?rows=N[&seed=S]`` (generated first into ``out_dir/raw``).
        out_dir (str | Path | None): output folder (splits, ``_meta.json``, generated ``raw/``); None:
            a work folder beside ``train_dir``, removed at the end.
        label (str): label column (negative down-sampling keeps every positive).
        split (SplitConfig): last ``eval_last_days`` of ``time_column``, or a hashed ``eval_fraction``.
        neg_sample_rate (float): keep this fraction of training negatives; recorded for re-calibration.
        oracle_column (str | None): true-probability column of synthetic data; its eval AUC is reported.
        csv (CsvOptions | None): CSV parsing options.
        seed (int): salt of the deterministic row sampling.
        train_dir, eval_dir (str | Path | None): where the splits go instead of ``out_dir/train`` and
            ``out_dir/eval`` (a pipeline's two dataset artifacts).
        log (RunLog): records both splits as dataset inputs and the row counts and oracle AUC as metrics.
        spec (FeatureSpec | None): the config's features: the source's schema is checked against them
            before any row is read (:class:`~recpipe.features.schema_check.SchemaMismatch` lists every problem).
    """
    with failing(log, "ingest"):
        if spec is not None:
            check_source(spec, source, csv)
        if out_dir is None:  # only the two splits are kept: work beside them, then clean up
            if train_dir is None or eval_dir is None:
                raise ValueError("ingest needs out_dir, or both train_dir and eval_dir")
            work = Path(train_dir).parent / f".{Path(train_dir).name}.ingest"
        else:
            work = Path(out_dir)
        try:
            result = _ingest(source, work, label, split or SplitConfig(), neg_sample_rate, oracle_column, csv,
                             seed, Path(train_dir or work / "train"), Path(eval_dir or work / "eval"))  # fmt: skip
        finally:
            if out_dir is None:
                shutil.rmtree(work, ignore_errors=True)
        _log_ingest(log, result)
    return result


def _log_ingest(log: RunLog, r: IngestResult) -> None:
    if log.run_id is None:
        return
    schema = pq.read_schema(next(iter(sorted(Path(r.train_dir).glob("*.parquet")))))
    columns = {f.name: str(f.type) for f in schema}
    for rows, digest, context in (
        (r.train_rows, r.train_digest, "training"),
        (r.eval_rows, r.eval_digest, "evaluation"),
    ):
        log.log_dataset(r.source, rows, columns, digest, context, name=f"{context}-data")
    log.log_metrics(
        {"data.train_rows": r.train_rows, "data.eval_rows": r.eval_rows, "data.oracle_auc": r.oracle_auc}
    )


def _ingest(
    source: str,
    out: Path,
    label: str,
    split: SplitConfig,
    neg_sample_rate: float,
    oracle_column: str | None,
    csv: CsvOptions | None,
    seed: int,
    train_dir: Path,
    eval_dir: Path,
) -> IngestResult:
    t0 = time.perf_counter()
    if not 0.0 < neg_sample_rate <= 1.0:
        raise ValueError(f"neg_sample_rate must be in (0, 1], got {neg_sample_rate}")
    out.mkdir(parents=True, exist_ok=True)
    src = open_source(source, csv=csv, generate_into=out / "raw")
    schema = src.schema()
    if schema.get_field_index(label) < 0:
        raise ValueError(f"data source {source!r} has no label column {label!r}; columns: {schema.names}")
    use_time = split.eval_fraction is None and split.time_column is not None
    if use_time and schema.get_field_index(split.time_column) < 0:
        raise ValueError(f"data source {source!r} has no time column {split.time_column!r} for the split")
    cutoff = None
    if use_time:  # first pass over the time column only
        last_day = max(
            int(pc.max(sb.batch.column(split.time_column)).as_py() or 0) // SECONDS_PER_DAY
            for sb in src.iter_batches(Shard(0, 1), columns=[split.time_column])
        )
        cutoff = (last_day - split.eval_last_days + 1) * SECONDS_PER_DAY
    tmp = out / ".ingest.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "train").mkdir(parents=True)
    (tmp / "eval").mkdir(parents=True)
    train_w, eval_w = _Writer(tmp / "train"), _Writer(tmp / "eval")
    dropped = 0
    offset = 0
    eval_labels, eval_oracle = [], []
    has_oracle = oracle_column is not None and schema.get_field_index(oracle_column) >= 0
    # Shown on a terminal only, and only once ingestion has taken a few seconds.
    bar = tqdm(
        desc="ingest", unit="rows", unit_scale=True, disable=None, delay=types.PROGRESS_DELAY_S, leave=False
    )
    for sb in src.iter_batches(Shard(0, 1)):
        bar.update(sb.batch.num_rows)
        t = pa.Table.from_batches([sb.batch])
        idx = np.arange(offset, offset + t.num_rows)
        offset += t.num_rows
        if use_time:
            is_eval = np.asarray(pc.fill_null(pc.greater_equal(t.column(split.time_column), cutoff), False))
        else:
            is_eval = _uniform(idx, seed) < (split.eval_fraction or 0.1)
        ev = t.filter(pa.array(is_eval))
        tr = t.filter(pa.array(~is_eval))
        if neg_sample_rate < 1.0 and tr.num_rows:
            y = np.asarray(pc.fill_null(tr.column(label), 1).cast(pa.float64()))
            keep = (y > 0) | (_uniform(idx[~is_eval], seed + 1) < neg_sample_rate)
            dropped += int((~keep).sum())
            tr = tr.filter(pa.array(keep))
        train_w.write(tr)
        eval_w.write(ev)
        if has_oracle and ev.num_rows:
            eval_labels.append(np.asarray(pc.fill_null(ev.column(label), 0).cast(pa.int8())))
            eval_oracle.append(np.asarray(pc.fill_null(ev.column(oracle_column), 0.0)))
    bar.close()
    train_w.close()
    eval_w.close()
    if train_w.rows == 0 or eval_w.rows == 0:
        raise ValueError(
            f"data source {source!r}: the split left {train_w.rows} training and {eval_w.rows} eval rows; "
            "both must be non-empty (check data.split)"
        )
    for name, dst in (("train", train_dir), ("eval", eval_dir)):
        shutil.rmtree(dst, ignore_errors=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(tmp / name, dst)
    shutil.rmtree(tmp, ignore_errors=True)
    oracle = None
    if eval_labels:
        oracle = binary_auc(np.concatenate(eval_labels), np.concatenate(eval_oracle))
    result = IngestResult(
        train_dir=str(train_dir),
        eval_dir=str(eval_dir),
        train_rows=train_w.rows,
        eval_rows=eval_w.rows,
        negatives_dropped=dropped,
        neg_sample_rate=neg_sample_rate,
        train_digest=_digest(train_dir),
        eval_digest=_digest(eval_dir),
        schema_hash=hashlib.sha256(schema.to_string().encode()).hexdigest(),
        oracle_auc=None if oracle is None or np.isnan(oracle) else float(oracle),
        source=source,
        seconds=round(time.perf_counter() - t0, 3),
    )
    (out / "_meta.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result
