"""The types every data source shares: :class:`SourceBatch`, the :class:`Source` protocol, :class:`DataError`,
and :class:`PartedSource`, the reading every reader shares (a dataset in parts, read one row range a shard)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from recpipe.data.sharding import FileSlice, Shard, slice_files

DEFAULT_BATCH_ROWS = 65536
# Seconds a data step (generate, ingest) runs before its progress bar appears (on a terminal only).
PROGRESS_DELAY_S = 2.0


class DataError(ValueError):
    """Bad input data; the message names the file (or table), the row and column, and what was expected.

    Rows are named twice where the source knows lines: ``line`` is the 1-based line of a text file (header
    included), ``row`` the 0-based data row (as :attr:`SourceBatch.first_row`).

    Example::

        DataError("data/part-0.csv line 3 (row 1), column 'I1': expected int64, got 'abc'")
    """


@dataclass(frozen=True)
class SourceBatch:
    """A RecordBatch and where its rows came from (for error messages downstream).

    Args:
        batch (pa.RecordBatch): the rows, ``(B,)`` per column.
        file (str): file path or table name the rows came from.
        first_row (int): 0-based index, within that file or table, of the batch's first row.

    Example::

        SourceBatch(batch=pa.record_batch({"clk": [0, 1]}), file="part-00000.parquet", first_row=65536)
    """

    batch: pa.RecordBatch
    file: str
    first_row: int

    @property
    def num_rows(self) -> int:
        """Rows in :attr:`batch`."""
        return self.batch.num_rows


@runtime_checkable
class Source(Protocol):
    """A table-shaped input read as Arrow RecordBatches, sharded exactly by row ranges.

    Example::

        src = open_source("data/train/")               # Parquet folder
        for sb in src.iter_batches(Shard.of(rank, world, worker, workers), batch_rows=8192):
            ...                                        # sb.batch: pa.RecordBatch of <= 8192 rows
    """

    uri: str

    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows :meth:`iter_batches` yields (all columns)."""
        ...

    def num_rows(self) -> int:
        """Rows in the whole dataset (all shards)."""
        ...

    def iter_batches(
        self,
        shard: Shard = Shard(0, 1),
        batch_rows: int = DEFAULT_BATCH_ROWS,
        columns: list[str] | None = None,
    ) -> Iterator[SourceBatch]:
        """This shard's rows, in dataset order, as batches of at most ``batch_rows`` rows.

        A batch never spans two files; within a file every batch but the last has ``batch_rows`` rows.
        """
        ...


def check_columns(schema: pa.Schema, columns: list[str] | None, where: str) -> list[str] | None:
    """Raise a ValueError naming the unknown ``columns`` (and the known ones) of ``where``."""
    if columns is None:
        return None
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise ValueError(f"columns {missing} are not in {where}; it has {schema.names}")
    return list(columns)


def check_batch_rows(batch_rows: int) -> None:
    """Raise a ValueError unless ``batch_rows >= 1``."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")


def rebatch(
    batches: Iterable[pa.RecordBatch], batch_rows: int, file: str, first_row: int
) -> Iterator[SourceBatch]:
    """Regroup ``batches`` (consecutive rows of one file starting at ``first_row``) into batches of
    exactly ``batch_rows`` rows, the last one possibly shorter.

    Args:
        batches (Iterable[pa.RecordBatch]): consecutive rows of one file, any batch sizes.
        batch_rows (int): rows per yielded batch.
        file (str): the file the rows came from.
        first_row (int): 0-based file row of the first row of ``batches``.

    Example::

        >>> [sb.num_rows for sb in rebatch([pa.record_batch({"x": range(5)})] * 3, 4, "f", 0)]
        [4, 4, 4, 3]
    """
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    row = first_row
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows < batch_rows:
            continue
        merged = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
        offset = 0
        while merged.num_rows - offset >= batch_rows:
            yield SourceBatch(merged.slice(offset, batch_rows), file, row)
            offset += batch_rows
            row += batch_rows
        rest = merged.slice(offset)
        pending = [rest] if rest.num_rows else []
        pending_rows = rest.num_rows
    if pending_rows:
        merged = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
        yield SourceBatch(merged, file, row)


class PartedSource:
    """A :class:`Source` made of parts with known row counts (files in order, or one table), of which shard
    ``i`` of ``k`` reads global rows ``[i*N//k, (i+1)*N//k)``: the reading every reader shares.

    A reader gives ``uri``, :meth:`schema`, :meth:`part_rows`, :meth:`part_name` and :meth:`read_part`.
    """

    uri: str

    def schema(self) -> pa.Schema:
        raise NotImplementedError

    def part_rows(self) -> list[int]:
        """Rows of each part, in dataset order."""
        raise NotImplementedError

    def part_name(self, index: int) -> str:
        """Part ``index``'s name in messages and in :attr:`SourceBatch.file`."""
        raise NotImplementedError

    def read_part(
        self, piece: FileSlice, columns: list[str] | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """Rows ``[piece.start, piece.stop)`` of part ``piece.file_index`` in order, in batches of any size
        (``columns`` checked already; None: all)."""
        raise NotImplementedError

    def part_units(self, index: int) -> list[int]:
        """Rows of each piece of part ``index`` that the reader reads whole (a Parquet file's row groups), in
        order: what :mod:`recpipe.data.shuffle` permutes. Default: the part is one piece."""
        return [self.part_rows()[index]]

    def num_rows(self) -> int:
        """Rows in all parts together."""
        return sum(self.part_rows())

    def schema_notes(self) -> list[str]:
        """What reading parts of different schemas as one dataset did (:mod:`recpipe.data.parquet`); none by
        default."""
        return []

    def column_gaps(self) -> dict[str, list[str]]:
        """Each column that some parts lack → those parts' names (read as nulls there); none by default."""
        return {}

    def iter_batches(
        self,
        shard: Shard = Shard(0, 1),
        batch_rows: int = DEFAULT_BATCH_ROWS,
        columns: list[str] | None = None,
    ) -> Iterator[SourceBatch]:
        """This shard's rows in dataset order, as batches of at most ``batch_rows`` rows (never spanning parts).

        Args:
            shard (Shard): which contiguous share of the rows to read.
            batch_rows (int): rows per batch.
            columns (list[str] | None): columns to read (all when None), in this order.
        """
        check_batch_rows(batch_rows)
        columns = check_columns(self.schema(), columns, self.uri)
        rows = self.part_rows()
        start, stop = shard.row_range(sum(rows))
        for piece in slice_files(rows, start, stop):
            batches = self.read_part(piece, columns, batch_rows)
            yield from rebatch(batches, batch_rows, self.part_name(piece.file_index), piece.start)
