"""ingest: a source (ODPS table, Parquet/CSV path or URI, ``synthetic:taobao?rows=N``) → Parquet
``train/`` and ``eval/`` splits with a ``_meta.json`` (rows, digests, schema hash, sampling rate).

The eval split is, in this order: a separate eval source as given (``data.eval``: kept, never re-split);
with a partition selector (``data.partitions``), the newest selected partition (unless
``data.split.eval_fraction`` is set); else the last days of ``data.split.time_column`` or a hashed fraction.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

import recpipe.data.types as types
from recpipe.auc import binary_auc
from recpipe.config import CsvOptions, DataConfig, SplitConfig
from recpipe.config.placeholders import resolve
from recpipe.data.partitions import PartitionedSource, newest
from recpipe.data.sharding import Shard
from recpipe.data.sources import SYNTHETIC, open_source
from recpipe.data.types import Source
from recpipe.features.schema_check import check_source
from recpipe.features.spec import FeatureSpec
from recpipe.runlog import NULL_LOG, RunLog, failing

SECONDS_PER_DAY = 86_400
# Ticks per second of each time unit (data.split.time_unit, a timestamp type's unit).
TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# Seconds since the epoch past this are the year 5138: the column counts something finer than seconds.
_MAX_PLAUSIBLE_SECONDS = 10**11
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
    # How eval was chosen: "given" (eval_source), "partitions" (the newest one), "time" or "fraction".
    split: str = "time"
    eval_source: str | None = None
    # With a partition selector: the partitions read for training and for eval (oldest first), and a
    # digest of each training partition's rows as read (sha256 of their Arrow IPC batches).
    partitions: list[str] = field(default_factory=list)
    eval_partitions: list[str] = field(default_factory=list)
    partition_digests: dict[str, str] = field(default_factory=dict)
    # Files of different schemas read as one dataset: what was unified (recpipe.data.parquet), eval's prefixed.
    schema_notes: list[str] = field(default_factory=list)


# Run tags of the partitions an ingest read (recpipe.tracking.lineage reads them).
TAG_PARTITIONS = "data_partitions"
TAG_PARTITION_DIGESTS = "data_partition_digests"
TAG_EVAL_PARTITIONS = "eval_partitions"
TAG_SCHEMA_NOTES = "data_schema_notes"


def configured_sources(
    data: DataConfig, source: str | None, environ: Mapping[str, str]
) -> tuple[str, str | None]:
    """The training source and the separate eval source (or None) of a run: ``source`` (``--source``,
    ``--data``, the pipeline's ``data_source``), else ``data.train``; ``data.eval`` as given. Their
    ``{NAME}`` placeholders are resolved from ``data.params`` and ``environ``.

    Args:
        data (DataConfig): the config's ``data:``.
        source (str | None): the source named on the command line or as a parameter; None or "": ``data.train``.
        environ (Mapping[str, str]): the process environment, read at the entry point.

    Raises:
        ValueError: neither ``source`` nor ``data.train`` is given.

    Example::

        configured_sources(cfg.data, None, os.environ)   # ("odps://ads/tables/train", "odps://ads/tables/eval")
    """
    train = source or data.train
    if not train:
        raise ValueError("no data source: give --source (a pipeline's data_source) or set data.train")
    resolved = resolve(train, data.params, environ)
    return resolved, (resolve(data.eval, data.params, environ) if data.eval else None)


def epoch_seconds(values: pa.Array | pa.ChunkedArray, column: str, where: str, unit: str = "s") -> pa.Array:
    """The time column's ``values`` as float64 seconds since the epoch (UTC), nulls kept: numbers (and
    numeric text) in ``unit``, timestamps of any unit (a zone's too: Arrow keeps them as UTC), dates, or
    ISO-8601 text (``2026-01-07 13:45:00``, ``2026-01-07``, ``2026-01-07T13:45:00+08:00``).

    Args:
        values (pa.Array | pa.ChunkedArray): the column (or a batch of it).
        column (str): its name, for messages.
        where (str): the data source, for messages.
        unit (str): what a number counts (``data.split.time_unit``): ``s``, ``ms``, ``us`` or ``ns``.

    Raises:
        DataError: a type or text that is no time, or numbers too large to be seconds (milliseconds read as
            seconds would put every row in one eval day).

    Example::

        epoch_seconds(pa.array(["2026-01-07 00:00:01"]), "ts", "logs/")   # [1767744001.0]
    """
    what = f"data source {where!r}, time column {column!r} (data.split.time_column)"
    t = values.type
    if pa.types.is_dictionary(t):
        values, t = values.cast(t.value_type), t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:  # numeric text: numbers, as below
            values, t = pc.cast(values, pa.float64()), pa.float64()
        except pa.ArrowInvalid:
            parsed = _parse_iso(values)
            if parsed is None:
                bad = next(
                    (
                        v
                        for v in pc.unique(values).to_pylist()
                        if v is not None and _parse_iso(pa.array([v])) is None
                    ),
                    None,
                )
                if bad is None:  # every value parses alone: some carry a UTC offset, others none
                    raise types.DataError(
                        f"{what}: ISO-8601 times with a UTC offset and without one in one column; which zone the "
                        "others are in is a guess: write every time with its offset, or none"
                    ) from None
                raise types.DataError(
                    f"{what}: {bad!r} is neither a number nor an ISO-8601 time; expected seconds since the "
                    "epoch, a timestamp, a date, or text like 2026-01-07 13:45:00"
                ) from None
            values, t = parsed, parsed.type
    if pa.types.is_timestamp(t):
        # Nanoseconds past 2^53 round to the float's precision: far below a second.
        ticks = pc.cast(pc.cast(values, pa.int64()), pa.float64(), safe=False)
        return pc.divide(ticks, float(TICKS_PER_SECOND[t.unit]))
    if pa.types.is_date32(t):
        return pc.multiply(pc.cast(pc.cast(values, pa.int32()), pa.float64()), float(SECONDS_PER_DAY))
    if pa.types.is_date64(t):
        return pc.divide(pc.cast(pc.cast(values, pa.int64()), pa.float64()), 1000.0)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        raise types.DataError(
            f"{what} is {t}; expected seconds since the epoch (numbers in data.split.time_unit), a timestamp, "
            "a date, or ISO-8601 text"
        )
    seconds = pc.divide(pc.cast(values, pa.float64(), safe=False), float(TICKS_PER_SECOND[unit]))
    top = pc.max(seconds).as_py()
    if top is not None and top > _MAX_PLAUSIBLE_SECONDS:
        ticks = top * TICKS_PER_SECOND[unit]  # the largest value as written
        plausible = [u for u in ("ms", "us", "ns") if ticks / TICKS_PER_SECOND[u] <= _MAX_PLAUSIBLE_SECONDS]
        finer = plausible[0] if plausible else "ns"
        raise types.DataError(
            f"{what}: {pc.max(values).as_py()} is no time in {unit!r} (data.split.time_unit; that would be "
            f"after the year 5000); if the column counts {finer}, set data.split.time_unit: {finer}"
        )
    return seconds


def _parse_iso(text: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray | None:
    """``text`` as timestamps, if Arrow parses all of it as ISO-8601 (naive, else with UTC offsets); else None."""
    for stamp in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
        try:
            return pc.cast(text, stamp)
        except pa.ArrowInvalid:
            continue
    return None


def label_numbers(values: pa.Array | pa.ChunkedArray, label: str, where: str) -> pa.Array:
    """The label column as float64 (nulls kept): numbers, booleans or numeric text, as training reads it.

    Raises:
        DataError: the column holds something else (text that is no number, a list…), naming it.
    """
    try:
        return pc.cast(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise types.DataError(
            f"data source {where!r}, label column {label!r}: {values.type} that is not numbers ({e}); expected "
            "0/1 numbers, booleans or numeric text"
        ) from None


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
    partitions: str | None = None,
    eval_source: str | None = None,
) -> IngestResult:
    """Read ``source`` once, split it (or keep ``eval_source`` as the eval split) and write ``out_dir/train``
    and ``out_dir/eval`` as Parquet.

    Args:
        source (str): ``odps://project/tables/t[/pt=…]``, a Parquet/CSV path or URI, or
            ``synthetic:taobao?rows=N[&seed=S]`` (generated first into ``out_dir/raw``).
        out_dir (str | Path | None): output folder (splits, ``_meta.json``, generated ``raw/``); None:
            a work folder beside ``train_dir``, removed at the end.
        label (str): label column (negative down-sampling keeps every positive).
        split (SplitConfig): last ``eval_last_days`` of ``time_column``, or a hashed ``eval_fraction``
            (with ``partitions``: only ``eval_fraction`` applies; without it the newest partition is eval).
        neg_sample_rate (float): keep this fraction of training negatives; recorded for re-calibration.
        oracle_column (str | None): true-probability column of synthetic data; its eval AUC is reported.
        csv (CsvOptions | None): CSV parsing options.
        seed (int): salt of the deterministic row sampling.
        train_dir, eval_dir (str | Path | None): where the splits go instead of ``out_dir/train`` and
            ``out_dir/eval`` (a pipeline's two dataset artifacts).
        log (RunLog): records both splits as dataset inputs, the row counts and oracle AUC as metrics, and
            with ``partitions`` the tags ``data_partitions``, ``data_partition_digests``, ``eval_partitions``.
        spec (FeatureSpec | None): the config's features: the source's schema is checked against them
            before any row is read (:class:`~recpipe.features.schema_check.SchemaMismatch` lists every problem).
        partitions (str | None): a partition selector of ``source`` (``data.partitions``:
            :mod:`recpipe.data.partitions`); the eval split is the newest selected partition (the newest
            value of the first key) and the others train, unless ``eval_source`` is given or
            ``split.eval_fraction`` is set. One selected partition alone is refused.
        eval_source (str | None): a separate eval input (``data.eval``; TorchEasyRec's ``eval_input_path``):
            read whole as the eval split, as given; ``source`` is then all training rows (never re-split).

    Example::

        run("data/logs", "runs/x/data", "clk", partitions="dt=20260101..20260107")  # eval: dt=20260107
        run("data/train", "runs/x/data", "clk", eval_source="data/eval")         # the user's own split
    """
    with failing(log, "ingest"):
        if spec is not None:
            check_source(spec, source, csv, partitions=partitions)
            if eval_source is not None:
                check_source(spec, eval_source, csv)
        if out_dir is None:  # only the two splits are kept: work beside them, then clean up
            if train_dir is None or eval_dir is None:
                raise ValueError("ingest needs out_dir, or both train_dir and eval_dir")
            work = Path(train_dir).parent / f".{Path(train_dir).name}.ingest"
        else:
            work = Path(out_dir)
        try:
            result = _ingest(source, work, label, split or SplitConfig(), neg_sample_rate, oracle_column, csv,
                             seed, Path(train_dir or work / "train"), Path(eval_dir or work / "eval"),
                             partitions, eval_source)  # fmt: skip
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
    for source, rows, digest, context in (
        (r.source, r.train_rows, r.train_digest, "training"),
        (r.eval_source or r.source, r.eval_rows, r.eval_digest, "evaluation"),
    ):
        log.log_dataset(source, rows, columns, digest, context, name=f"{context}-data")
    log.log_metrics(
        {"data.train_rows": r.train_rows, "data.eval_rows": r.eval_rows, "data.oracle_auc": r.oracle_auc}
    )
    if r.partitions:
        tags = {
            TAG_PARTITIONS: ",".join(r.partitions),
            TAG_PARTITION_DIGESTS: json.dumps(r.partition_digests),
        }
        if r.eval_partitions:
            tags[TAG_EVAL_PARTITIONS] = ",".join(r.eval_partitions)
        log.set_tags(tags)
    if r.schema_notes:
        log.set_tags({TAG_SCHEMA_NOTES: json.dumps(r.schema_notes)})


def _partition_split(src: Source, source: str, partitions: str, split: SplitConfig) -> tuple[str, set[str]]:
    """The split kind and the eval partitions of a partitioned ``src``: the newest one, or (with
    ``split.eval_fraction``) none, every partition feeding both splits."""
    assert isinstance(src, PartitionedSource)
    if split.eval_fraction is not None:
        return "fraction", set()
    eval_names = {p.name for p in newest(src.partitions)}
    if len(eval_names) == len(src.partitions):
        raise ValueError(
            f"data source {source!r}: data.partitions {partitions!r} selects only {', '.join(sorted(eval_names))}; "
            "the eval split is the newest selected partition and training needs the others: select more "
            "(e.g. last:2), give a separate eval source (data.eval), or set data.split.eval_fraction"
        )
    return "partitions", eval_names


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
    partitions: str | None = None,
    eval_source: str | None = None,
) -> IngestResult:
    t0 = time.perf_counter()
    if not 0.0 < neg_sample_rate <= 1.0:
        raise ValueError(f"neg_sample_rate must be in (0, 1], got {neg_sample_rate}")
    if eval_source is not None and source.startswith(SYNTHETIC):
        raise ValueError(
            f"data source {source!r} is generated but the eval split {eval_source!r} is given (data.eval): "
            "give the training data too (data.train, --source or --data), or drop data.eval (--set data.eval=null)"
        )
    out.mkdir(parents=True, exist_ok=True)
    src = open_source(source, csv=csv, generate_into=out / "raw", partitions=partitions)
    schema = src.schema()
    if schema.get_field_index(label) < 0:
        raise ValueError(f"data source {source!r} has no label column {label!r}; columns: {schema.names}")
    eval_src = None
    if eval_source is not None:
        eval_src = open_source(eval_source, csv=csv, generate_into=out / "raw-eval")
        if eval_src.schema().get_field_index(label) < 0:
            names = eval_src.schema().names
            raise ValueError(f"eval source {eval_source!r} has no label column {label!r}; columns: {names}")
        kind, eval_names = "given", set()
    elif partitions is not None:
        kind, eval_names = _partition_split(src, source, partitions, split)
    else:
        kind = "fraction" if split.eval_fraction is not None or split.time_column is None else "time"
        eval_names = set()
    use_time = kind == "time"
    if use_time and schema.get_field_index(split.time_column) < 0:
        raise ValueError(f"data source {source!r} has no time column {split.time_column!r} for the split")
    cutoff = None
    if use_time:  # first pass over the time column only

        def seconds(values: pa.ChunkedArray | pa.Array) -> pa.Array:
            return epoch_seconds(values, split.time_column, source, split.time_unit)

        tops = [pc.max(seconds(sb.batch.column(split.time_column))).as_py()
                for sb in src.iter_batches(Shard(0, 1), columns=[split.time_column])]  # fmt: skip
        last_day = int(max((x for x in tops if x is not None), default=0) // SECONDS_PER_DAY)
        cutoff = (last_day - split.eval_last_days + 1) * SECONDS_PER_DAY
    # Each part (a file, an ODPS partition) belongs to one partition; a batch never spans parts.
    owner: dict[str, str] = {}
    if isinstance(src, PartitionedSource):
        owner = {src.part_name(i): src.part_partition(i).name for i in range(len(src.part_rows()))}
    hashes = {p.name: hashlib.sha256() for p in getattr(src, "partitions", []) if p.name not in eval_names}
    tmp = out / ".ingest.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "train").mkdir(parents=True)
    (tmp / "eval").mkdir(parents=True)
    train_w, eval_w = _Writer(tmp / "train"), _Writer(tmp / "eval")
    dropped = 0
    offset = 0
    eval_labels, eval_oracle = [], []
    has_oracle = oracle_column is not None and schema.get_field_index(oracle_column) >= 0

    def write_eval(ev: pa.Table) -> None:
        eval_w.write(ev)
        if has_oracle and ev.num_rows and ev.schema.get_field_index(oracle_column) >= 0:
            y = pc.fill_null(label_numbers(ev.column(label), label, source), 0.0)
            eval_labels.append(np.asarray(y.cast(pa.int8())))
            eval_oracle.append(np.asarray(pc.fill_null(ev.column(oracle_column), 0.0)))

    # Shown on a terminal only, and only once ingestion has taken a few seconds.
    bar = tqdm(
        desc="ingest", unit="rows", unit_scale=True, disable=None, delay=types.PROGRESS_DELAY_S, leave=False
    )
    for sb in src.iter_batches(Shard(0, 1)):
        bar.update(sb.batch.num_rows)
        t = pa.Table.from_batches([sb.batch])
        idx = np.arange(offset, offset + t.num_rows)
        offset += t.num_rows
        partition = owner.get(sb.file)
        if partition in hashes:  # a copy: a slice's IPC bytes depend on the buffer it was cut from
            hashes[partition].update(sb.batch.take(pa.array(np.arange(sb.num_rows))).serialize())
        if kind == "time":
            is_eval = np.asarray(
                pc.fill_null(pc.greater_equal(seconds(t.column(split.time_column)), cutoff), False)
            )
        elif kind == "fraction":
            is_eval = _uniform(idx, seed) < (split.eval_fraction or 0.1)
        else:
            is_eval = np.full(t.num_rows, partition in eval_names)
        ev = t.filter(pa.array(is_eval))
        tr = t.filter(pa.array(~is_eval))
        if neg_sample_rate < 1.0 and tr.num_rows:
            y = np.asarray(pc.fill_null(label_numbers(tr.column(label), label, source), 1.0))
            keep = (y > 0) | (_uniform(idx[~is_eval], seed + 1) < neg_sample_rate)
            dropped += int((~keep).sum())
            tr = tr.filter(pa.array(keep))
        train_w.write(tr)
        write_eval(ev)
    for sb in eval_src.iter_batches(Shard(0, 1)) if eval_src is not None else ():
        bar.update(sb.batch.num_rows)
        write_eval(pa.Table.from_batches([sb.batch]))
    bar.close()
    train_w.close()
    eval_w.close()
    if train_w.rows == 0 or eval_w.rows == 0:
        why = {"given": "check data.eval", "partitions": "check data.partitions"}.get(
            kind, "check data.split"
        )
        raise ValueError(
            f"data source {source!r}: the split left {train_w.rows} training and {eval_w.rows} eval rows; "
            f"both must be non-empty ({why})"
        )
    for name, dst in (("train", train_dir), ("eval", eval_dir)):
        shutil.rmtree(dst, ignore_errors=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(tmp / name, dst)
    shutil.rmtree(tmp, ignore_errors=True)
    oracle = None
    if eval_labels:
        oracle = binary_auc(np.concatenate(eval_labels), np.concatenate(eval_oracle))
    names = [p.name for p in getattr(src, "partitions", [])]
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
        split=kind,
        eval_source=eval_source,
        partitions=[n for n in names if n not in eval_names],
        eval_partitions=[n for n in names if n in eval_names or kind == "fraction"],
        partition_digests={n: h.hexdigest() for n, h in hashes.items()},
        schema_notes=[
            *src.schema_notes(),
            *(f"eval: {n}" for n in (eval_src.schema_notes() if eval_src else [])),
        ],
    )
    (out / "_meta.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result
