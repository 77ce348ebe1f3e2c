"""Parquet datasets (a file, a folder or a glob; local or object store) read as exactly sharded batches.

Daily logs evolve: a column is added one day, an int32 becomes an int64, a writer dictionary-encodes its
strings. Files whose schemas differ are read as one dataset when Arrow can unify them without loss of meaning
(``pyarrow.unify_schemas(promote_options="permissive")``, dictionaries read as their values): every column of
any file, in the first file's order then the new ones; a file without a column gives its rows nulls there; a
narrower type is widened as it is read. :meth:`ParquetSource.schema_notes` says what was unified and
:meth:`ParquetSource.column_gaps` which files lack each column (a column the config reads may not be missing
from any: :func:`recpipe.features.schema_check.check_source` refuses). Types that do not unify (text in one
file, numbers in another) are a :class:`DataError` naming both files.
"""

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


def _values_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each dictionary column as its value type (how it unifies with a plain column)."""
    return pa.schema(
        [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema],
        metadata=schema.metadata,
    )


class ParquetSource(PartedSource):
    """Parquet files read as RecordBatches; shard ``i`` of ``k`` reads global rows
    ``[i*N//k, (i+1)*N//k)`` and only the row groups that overlap them.

    Row counts and schemas come from the footers (read once, lazily). A zero-byte file counts as an
    empty file; a file whose footer cannot be read, that names a column twice, or whose schema does not
    unify with the first file's (module docstring) raises :class:`DataError` naming it.

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
        # Set by _layout when the files' schemas differ: the dataset's schema, what was unified, the files
        # lacking each column.
        self._unified: pa.Schema | None = None
        self._notes: list[str] = []
        self._gaps: dict[str, list[str]] = {}

    def _layout(self) -> list[_FileLayout]:
        if self._layouts is None:
            layouts = [self._read_footer(i, path) for i, path in enumerate(self._files.paths)]
            # Files without rows may carry a degenerate schema (all-null columns); they are not checked.
            with_rows = [i for i, lay in enumerate(layouts) if lay.num_rows > 0]
            first = layouts[with_rows[0]].schema if with_rows else None
            if any(not layouts[i].schema.equals(first, check_metadata=False) for i in with_rows[1:]):
                self._unify(layouts, with_rows)
            self._layouts = layouts
        return self._layouts

    def _unify(self, layouts: list[_FileLayout], with_rows: list[int]) -> None:
        """The dataset schema of files whose schemas differ (module docstring), its notes and gaps."""
        name = self._files.name
        schemas = [_values_schema(layouts[i].schema) for i in with_rows]
        unified = _unified(schemas)
        if unified is None:
            first = schemas[0]
            for i, schema in zip(with_rows[1:], schemas[1:], strict=True):
                if _unified([first, schema]) is None:
                    raise DataError(
                        f"{name(i)}: schema does not unify with {name(with_rows[0])}'s: {_conflicts(first, schema)}"
                    )
            # Each file unifies with the first, yet not all of them together (two widen one column apart).
            raise DataError(f"{self.uri}: the files' schemas do not unify")
        unified = pa.schema(list(unified))  # no file's metadata (pandas', Spark's) speaks for all of them
        total = len(with_rows)
        for field in unified:
            lacking = [
                name(i) for i, s in zip(with_rows, schemas, strict=True) if s.get_field_index(field.name) < 0
            ]
            if lacking:
                self._gaps[field.name] = lacking
                self._notes.append(
                    f"column {field.name!r} is absent from {len(lacking)} of {total} files (first {lacking[0]}): "
                    "read as null there"
                )
            narrower = sorted({str(s.field(field.name).type) for s in schemas
                               if s.get_field_index(field.name) >= 0 and s.field(field.name).type != field.type})  # fmt: skip
            if narrower:
                self._notes.append(
                    f"column {field.name!r} is {' / '.join(narrower)} in some files: read as {field.type}"
                )
        self._unified = unified

    def schema_notes(self) -> list[str]:
        """What reading files of different schemas as one dataset did (empty when every file agrees)."""
        self._layout()
        return list(self._notes)

    def column_gaps(self) -> dict[str, list[str]]:
        """Each column some files (with rows) lack → those files' names (empty when every file agrees)."""
        self._layout()
        return {k: list(v) for k, v in self._gaps.items()}

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
        twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
        if twice:  # which one a feature would read is a guess
            raise DataError(f"{self._files.name(i)}: columns {twice} are named more than once")
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        return _FileLayout(meta.num_rows, groups, schema)

    def schema(self) -> pa.Schema:
        """The dataset's Arrow schema: the files' unified one where they differ, else the first file with rows
        decides (empty when no file has a schema)."""
        layouts = self._layout()
        if self._unified is not None:
            return self._unified
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
        first = first_group_row or 0
        if self._unified is None:
            return self._sliced(piece, groups, first, batch_rows, columns, name)
        own = self._layout()[piece.file_index].schema
        assert own is not None
        wanted = [self._unified.field(c) for c in (columns if columns is not None else self._unified.names)]
        present = [f.name for f in wanted if own.get_field_index(f.name) >= 0]
        return _conformed(self._sliced(piece, groups, first, batch_rows, present, name), own, wanted, name)

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


def _conformed(
    batches: Iterator[pa.RecordBatch], own: pa.Schema, wanted: list[pa.Field], name: str
) -> Iterator[pa.RecordBatch]:
    """A file's batches (schema ``own``) in the unified schema's ``wanted`` fields: a column the file lacks as
    nulls, a narrower one widened."""
    for batch in batches:
        arrays = []
        for f in wanted:
            if own.get_field_index(f.name) < 0:
                arrays.append(pa.nulls(batch.num_rows, f.type))
                continue
            values = batch.column(f.name)
            if values.type != f.type:
                try:
                    values = values.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise DataError(
                        f"{name}: column {f.name!r} ({values.type}) cannot be read as {f.type}: {e}"
                    ) from e
            arrays.append(values)
        yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(wanted))


def _unified(schemas: list[pa.Schema]) -> pa.Schema | None:
    """``schemas`` unified as Arrow's permissive promotion does (module docstring), or None where it cannot."""
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _conflicts(a: pa.Schema, b: pa.Schema) -> str:
    """The columns of both whose types do not unify, as ``'x' is string, expected int64``."""
    bad = [
        f"{f.name!r} is {b.field(f.name).type}, expected {f.type}"
        for f in a
        if b.get_field_index(f.name) >= 0 and _unified([pa.schema([f]), pa.schema([b.field(f.name)])]) is None
    ]
    return "; ".join(bad) or _schema_diff(a, b)


def _schema_diff(a: pa.Schema, b: pa.Schema) -> str:
    diffs = [f"{n!r} missing" for n in a.names if b.get_field_index(n) < 0]
    diffs += [f"{n!r} unexpected" for n in b.names if a.get_field_index(n) < 0]
    diffs += [
        f"{f.name!r} is {b.field(f.name).type}, expected {f.type}"
        for f in a
        if b.get_field_index(f.name) >= 0 and b.field(f.name).type != f.type
    ]
    return "; ".join(diffs) or f"column order {b.names}, expected {a.names}"
