"""CSV / TSV files (with a header, or with explicit column names and types) read as exactly sharded batches.

Empty fields are nulls in every column (strings too, so the raw Criteo layout's missing categoricals
are nulls), and so is ``\\N`` (Hive's text tables, MySQL's and PostgreSQL's dumps; ``data.csv.null_values``);
a quoted field, ``""`` included, stays its text. Files in another encoding than UTF-8 name it
(``data.csv.encoding``).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from recpipe.config import CsvOptions
from recpipe.data.files import DataFiles, resolve_files, strip_compression
from recpipe.data.sharding import FileSlice
from recpipe.data.types import DataError, PartedSource

ARROW_TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "float32": pa.float32(),
    "string": pa.string(),
    "bool": pa.bool_(),
}


def _is_utf8(encoding: str) -> bool:
    """Whether ``encoding`` (a Python codec name: ``utf8``, ``UTF-8``, ``utf_8``…) is UTF-8."""
    return codecs.lookup(encoding).name == "utf-8"


CRITEO_COLUMNS = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]
_BLOCK_SIZE = 1 << 22
_CONVERSION_ERROR = re.compile(
    r"In CSV column #(\d+): (?:Row #(\d+): )?CSV conversion error to (\w+): invalid value '(.*)'", re.S
)


def criteo_csv_options() -> CsvOptions:
    """CsvOptions for the raw Criteo layout: no header, tab-separated, ``label, I1..I13, C1..C26``,
    ``label``/``I*`` int64, ``C*`` string (8 hex chars), empty fields missing.

    Example::

        src = open_source("criteo/day_0", csv=criteo_csv_options())
    """
    types = {c: "string" if c.startswith("C") else "int64" for c in CRITEO_COLUMNS}
    return CsvOptions(delimiter="\t", header=False, columns=list(CRITEO_COLUMNS), column_types=types)


class _RowRecorder:
    """An ``invalid_row_handler`` that remembers the first malformed row (pyarrow's errors lack its line)."""

    def __init__(self) -> None:
        self.first: pacsv.InvalidRow | None = None

    def __call__(self, row: pacsv.InvalidRow) -> str:
        self.first = self.first or row
        return "error"


class CsvSource(PartedSource):
    """Delimited text files read as RecordBatches with one fixed schema, sharded exactly by row ranges.

    Column types are ``options.column_types`` where given, else inferred once from the first
    non-empty file's first block (all-empty columns become strings) and then fixed for every file, so
    all shards agree. Row counts come from one scan of the files (done lazily, once per source).

    Args:
        uri (str): a file, folder or glob (``.csv``, ``.tsv``, ``.txt``, optionally ``.gz``/``.bz2``).
        options (CsvOptions | None): delimiter, header, names and types. Without an explicit
            delimiter, ``.tsv`` files are tab-separated. With ``header`` and ``columns`` both set the
            header line is skipped and ``columns`` name the fields.
        files (DataFiles | None): already resolved files of ``uri``.

    Example::

        src = CsvSource("criteo/train.tsv", criteo_csv_options())
        src.schema().field("C1").type     # string
        next(src.iter_batches(batch_rows=4)).batch.num_rows   # 4
    """

    def __init__(self, uri: str, options: CsvOptions | None = None, files: DataFiles | None = None) -> None:
        self.uri = uri
        self._files = files if files is not None else resolve_files(uri)
        self._options = options or CsvOptions()
        if not self._options.header and not self._options.columns:
            raise ValueError(f"CSV {uri!r} has no header: CsvOptions.columns must name its columns")
        unknown = {k: v for k, v in self._options.column_types.items() if v not in ARROW_TYPES}
        if unknown:
            raise ValueError(f"unknown CSV column types {unknown}; use one of {sorted(ARROW_TYPES)}")
        self._delimiter = self._options.delimiter
        tsv = strip_compression(self._files.paths[0].lower()).endswith(".tsv")
        if tsv and "delimiter" not in self._options.model_fields_set:
            self._delimiter = "\t"
        self._schema: pa.Schema | None = None
        self._rows: list[int] | None = None

    # ----------------------------------------------------------------------------------- opening
    def _open(
        self, i: int, types: dict[str, pa.DataType] | None, include: list[str] | None, rec: _RowRecorder
    ) -> pacsv.CSVStreamingReader | None:
        """A streaming reader for file ``i``, or None when the file is empty."""
        fs, path = self._files.filesystem, self._files.paths[i]
        opts = self._options
        read = pacsv.ReadOptions(
            use_threads=False,  # single-threaded parsing makes pyarrow report line numbers
            block_size=_BLOCK_SIZE,
            column_names=opts.columns,
            skip_rows=1 if opts.header and opts.columns else 0,
            encoding=opts.encoding,
        )
        parse = pacsv.ParseOptions(delimiter=self._delimiter, invalid_row_handler=rec)
        convert = pacsv.ConvertOptions(
            column_types=types or {},
            include_columns=include,
            null_values=list(opts.null_values),
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        )
        stream = fs.open_input_stream(path, compression="detect")
        try:
            return pacsv.open_csv(stream, read_options=read, parse_options=parse, convert_options=convert)
        except pa.ArrowInvalid as e:
            stream.close()
            if "Empty CSV file" in str(e):
                return None
            raise self._error(i, e, rec, types) from e
        except OSError as e:  # a truncated or corrupt .gz/.bz2 in its first block
            stream.close()
            raise DataError(f"{self._files.name(i)}: cannot read: {e}") from e

    def _error(
        self, i: int, e: Exception, rec: _RowRecorder, types: dict[str, pa.DataType] | None, row0: int = 0
    ) -> DataError:
        name = self._files.name(i)
        if rec.first is not None:
            r = rec.first
            where = f"line {r.number}" if r.number is not None else "a line"
            return DataError(
                f"{name} {where}: expected {r.expected_columns} columns separated by "
                f"{self._delimiter!r}, got {r.actual_columns}: {r.text[:200]!r}"
            )
        m = _CONVERSION_ERROR.search(str(e))
        if m is not None and m.group(2) is not None:  # pyarrow names the line when parsing single-threaded
            column = (self._options.columns or self._header(i))[int(m.group(1))]
            line = int(m.group(2))
            return DataError(
                f"{name} line {line} (row {line - 1 - int(self._options.header)}), column {column!r}: "
                f"expected {m.group(3)}, got {m.group(4)!r}"
            )
        if m is not None and types is not None:
            return self._conversion_error(i, int(m.group(1)), types, row0)
        hint = ""
        if "invalid UTF8" in str(e) and _is_utf8(self._options.encoding):
            hint = " (not UTF-8? name the files' encoding in data.csv.encoding, e.g. gbk)"
        return DataError(f"{name}: cannot parse CSV: {e}{hint}")

    def _conversion_error(self, i: int, col: int, types: dict[str, pa.DataType], row0: int) -> DataError:
        """Find the first value of column ``col`` at or after data row ``row0`` that does not convert."""
        name = self._files.name(i)
        names = self._options.columns or self._header(i)
        column = names[col]
        want = types.get(column, pa.string())
        reader = self._open(i, {column: pa.string()}, [column], _RowRecorder())
        row = 0
        for batch in reader or ():
            if row + batch.num_rows > row0:
                values = batch.column(0)
                try:
                    pc.cast(values, want)
                except pa.ArrowInvalid:
                    for k, v in enumerate(values.to_pylist()):
                        try:
                            pa.array([v], pa.string()).cast(want)
                        except pa.ArrowInvalid:
                            line = row + k + 1 + int(self._options.header)
                            return DataError(
                                f"{name} line {line} (row {row + k}), column {column!r}: "
                                f"expected {want}, got {v!r}"
                            )
            row += batch.num_rows
        return DataError(f"{name}: column {column!r} has a value that is not {want}")

    # ------------------------------------------------------------------------------------ schema
    def schema(self) -> pa.Schema:
        """The fixed schema of every batch (explicit types, the rest inferred from the first file)."""
        if self._schema is None:
            explicit = {c: pa.string() for c in self._options.text_columns}
            explicit.update({k: ARROW_TYPES[v] for k, v in self._options.column_types.items()})
            inferred: pa.Schema | None = None
            where = self.uri
            for i in range(len(self._files.paths)):
                reader = self._open(i, explicit, None, _RowRecorder())
                if reader is not None:
                    inferred, where = reader.schema, self._files.name(i)
                    reader.close()
                    break
            if inferred is None:  # every file is empty
                names = self._options.columns or []
                inferred = pa.schema([(n, explicit.get(n, pa.string())) for n in names])
            twice = sorted({n for n in inferred.names if inferred.names.count(n) > 1})
            if twice:  # which one a feature would read is a guess
                raise DataError(f"{where}: columns {twice} are named more than once in {inferred.names}")
            unknown = sorted(set(self._options.column_types) - set(inferred.names))
            if unknown:
                raise ValueError(
                    f"column_types name columns {unknown} that {self.uri!r} lacks: {inferred.names}"
                )
            self._schema = pa.schema(
                [(f.name, pa.string() if pa.types.is_null(f.type) else f.type) for f in inferred]
            )
        return self._schema

    def _file_rows(self) -> list[int]:
        if self._rows is None:
            schema = self.schema()
            first = schema.names[0] if schema.names else None
            rows = []
            for i in range(len(self._files.paths)):
                rec = _RowRecorder()
                reader = self._open(
                    i, {first: pa.string()} if first else None, [first] if first else None, rec
                )
                n = 0
                if reader is not None:
                    self._check_header(i, schema)
                    try:
                        for batch in reader:
                            n += batch.num_rows
                    except pa.ArrowInvalid as e:
                        raise self._error(i, e, rec, None) from e
                    except OSError as e:  # a truncated .gz/.bz2: pyarrow names no file
                        raise DataError(f"{self._files.name(i)}: cannot read: {e}") from e
                rows.append(n)
            self._rows = rows
        return self._rows

    def _header(self, i: int) -> list[str]:
        head = b""
        with self._files.filesystem.open_input_stream(self._files.paths[i], compression="detect") as f:
            while b"\n" not in head and (chunk := f.read(1 << 16)):
                head += chunk
        codec = self._options.encoding
        if _is_utf8(codec):  # a byte order mark (Excel's, exports') is no header text
            codec = "utf-8-sig"
        line = head.split(b"\n", 1)[0].decode(codec, "replace").rstrip("\r")
        return [name.strip('"') for name in line.split(self._delimiter)]

    def _check_header(self, i: int, want: pa.Schema) -> None:
        if self._options.header and not self._options.columns and i > 0:
            header = self._header(i)
            if header != want.names:
                raise DataError(f"{self._files.name(i)} line 1: header {header} differs from {want.names}")

    # ------------------------------------------------------------------------------------- reading
    def part_rows(self) -> list[int]:
        """Rows of each file (one scan of the files, cached)."""
        return self._file_rows()

    def part_name(self, index: int) -> str:
        return self._files.name(index)

    def read_part(
        self, piece: FileSlice, columns: list[str] | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        return self._sliced(piece, self.schema(), columns)

    def _sliced(
        self, piece: FileSlice, schema: pa.Schema, columns: list[str] | None
    ) -> Iterator[pa.RecordBatch]:
        types = {f.name: f.type for f in schema}
        rec = _RowRecorder()
        reader = self._open(piece.file_index, types, columns or schema.names, rec)
        row = 0
        if reader is None:
            return
        try:
            while row < piece.stop:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except pa.ArrowInvalid as e:
                    raise self._error(piece.file_index, e, rec, types, row) from e
                except OSError as e:  # a truncated .gz/.bz2: pyarrow names no file
                    raise DataError(f"{self._files.name(piece.file_index)}: cannot read: {e}") from e
                lo, hi = max(row, piece.start), min(row + batch.num_rows, piece.stop)
                if lo < hi:
                    yield batch.slice(lo - row, hi - lo)
                row += batch.num_rows
        finally:
            reader.close()
