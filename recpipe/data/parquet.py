"""Parquet datasets (a file, a folder or a glob; local or object store) read as exactly sharded batches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from recpipe.data.files import DataFiles, resolve_files
from recpipe.data.sharding import FileSlice
from recpipe.data.types import DataError, PartedSource


@dataclass(frozen=True)
class _FileLayout:
    num_rows: int
    row_group_rows: list[int]
    schema: pa.Schema | None  # None for a zero-byte file


class ParquetSource(PartedSource):
    """Parquet files read as RecordBatches; shard ``i`` of ``k`` reads global rows
    ``[i*N//k, (i+1)*N//k)`` and only the row groups that overlap them.

    Row counts and schemas come from the footers (read once, lazily). A zero-byte file counts as an
    empty file; a file whose footer cannot be read, or whose schema differs from the first file's,
    raises :class:`DataError` naming it.

    Args:
        uri (str): a ``.parquet`` file, a folder (all ``*.parquet`` below it, sorted) or a glob; local
            or ``s3://`` / ``gs://`` / ``hdfs://``.
        files (DataFiles | None): already resolved files of ``uri`` (skips listing again).

    Example::

        src = ParquetSource("runs/data/train")
        src.num_rows()                                    # 1009
        [sb.num_rows for sb in src.iter_batches(Shard(2, 3), batch_rows=256)]   # rows 672..1008
    """

    def __init__(self, uri: str, files: DataFiles | None = None) -> None:
        self.uri = uri
        self._files = files if files is not None else resolve_files(uri)
        self._layouts: list[_FileLayout] | None = None

    def _layout(self) -> list[_FileLayout]:
        if self._layouts is None:
            layouts = [self._read_footer(i, path) for i, path in enumerate(self._files.paths)]
            # Files without rows may carry a degenerate schema (all-null columns); they are not checked.
            with_rows = [i for i, lay in enumerate(layouts) if lay.num_rows > 0]
            for i in with_rows[1:]:
                first, schema = layouts[with_rows[0]].schema, layouts[i].schema
                assert first is not None and schema is not None
                if not schema.equals(first, check_metadata=False):
                    raise DataError(
                        f"{self._files.name(i)}: schema differs from {self._files.name(with_rows[0])}'s: "
                        f"{_schema_diff(first, schema)}"
                    )
            self._layouts = layouts
        return self._layouts

    def _read_footer(self, i: int, path: str) -> _FileLayout:
        fs = self._files.filesystem
        if fs.get_file_info(path).size == 0:
            return _FileLayout(0, [], None)
        try:
            with fs.open_input_file(path) as f:
                meta = pq.read_metadata(f)
                schema = meta.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{self._files.name(i)}: not a readable Parquet file: {e}") from e
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        return _FileLayout(meta.num_rows, groups, schema)

    def schema(self) -> pa.Schema:
        """The dataset's Arrow schema: the first file with rows decides (empty when no file has a schema)."""
        layouts = self._layout()
        ordered = [lay for lay in layouts if lay.num_rows > 0] + layouts
        return next((lay.schema for lay in ordered if lay.schema is not None), pa.schema([]))

    def part_rows(self) -> list[int]:
        """Rows of each file, from the footers."""
        return [layout.num_rows for layout in self._layout()]

    def part_name(self, index: int) -> str:
        return self._files.name(index)

    def part_units(self, index: int) -> list[int]:
        return list(self._layout()[index].row_group_rows)

    def read_part(
        self, piece: FileSlice, columns: list[str] | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """Only the row groups that overlap the piece are read."""
        # Row groups overlapping [piece.start, piece.stop) and the file row where the first one begins.
        groups, first_group_row, offset = [], None, 0
        for g, n in enumerate(self._layout()[piece.file_index].row_group_rows):
            if offset < piece.stop and offset + n > piece.start:
                groups.append(g)
                first_group_row = offset if first_group_row is None else first_group_row
            offset += n
        name = self._files.name(piece.file_index)
        return self._sliced(piece, groups, first_group_row or 0, batch_rows, columns, name)

    def _sliced(
        self,
        piece: FileSlice,
        groups: list[int],
        row: int,
        batch_rows: int,
        columns: list[str] | None,
        name: str,
    ) -> Iterator[pa.RecordBatch]:
        try:
            with self._files.filesystem.open_input_file(self._files.paths[piece.file_index]) as f:
                reader = pq.ParquetFile(f)
                for batch in reader.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns):
                    lo, hi = max(row, piece.start), min(row + batch.num_rows, piece.stop)
                    if lo < hi:
                        yield batch.slice(lo - row, hi - lo)
                    row += batch.num_rows
                    if row >= piece.stop:
                        return
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{name}: failed to read Parquet rows from row {row}: {e}") from e


def _schema_diff(a: pa.Schema, b: pa.Schema) -> str:
    diffs = [f"{n!r} missing" for n in a.names if b.get_field_index(n) < 0]
    diffs += [f"{n!r} unexpected" for n in b.names if a.get_field_index(n) < 0]
    diffs += [
        f"{f.name!r} is {b.field(f.name).type}, expected {f.type}"
        for f in a
        if b.get_field_index(f.name) >= 0 and b.field(f.name).type != f.type
    ]
    return "; ".join(diffs) or f"column order {b.names}, expected {a.names}"
