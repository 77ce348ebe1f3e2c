"""CsvSource: headers, explicit names and types, TSV, compression, nulls, and the DataError cases."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

import recpipe.data.csv as csv_module
from recpipe.config import CsvOptions
from recpipe.data import CsvSource, DataError, Shard, criteo_csv_options, open_source


def test_header_csv_folder_with_an_empty_file(csv_dir: Path) -> None:
    source = open_source(str(csv_dir))
    assert isinstance(source, CsvSource)
    assert source.num_rows() == 1009
    assert source.schema() == pa.schema([("row", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    batches = list(source.iter_batches(batch_rows=200))
    assert [sb.num_rows for sb in batches] == [200, 200, 100, 200, 200, 109]
    assert [sb.first_row for sb in batches[3:]] == [0, 200, 400]
    assert Path(batches[3].file).name == "part-2.csv"
    assert batches[5].batch["score"][0].as_py() == (500 + 400) / 8


def test_tsv_suffix_means_tab_unless_a_delimiter_is_given(tmp_path: Path) -> None:
    path = tmp_path / "x.tsv"
    path.write_text("a\tb\n1\txy\n2\t\n")
    batch = next(CsvSource(str(path), CsvOptions()).iter_batches()).batch
    assert batch.to_pylist() == [{"a": 1, "b": "xy"}, {"a": 2, "b": None}]
    comma = CsvSource(str(path), CsvOptions(delimiter=","))
    assert comma.schema().names == ["a\tb"]


def test_no_header_with_names_and_types(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text('1|7|""\n|8|q\n')
    options = CsvOptions(delimiter="|", header=False, columns=["a", "b", "c"], column_types={"b": "float64"})
    source = CsvSource(str(path), options)
    assert source.schema() == pa.schema([("a", pa.int64()), ("b", pa.float64()), ("c", pa.string())])
    # Empty fields are nulls; a quoted empty string stays an empty string.
    assert next(source.iter_batches()).batch.to_pylist() == [
        {"a": 1, "b": 7.0, "c": ""},
        {"a": None, "b": 8.0, "c": "q"},
    ]


def test_header_and_columns_renames(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("x,y\n1,2\n")
    source = CsvSource(str(path), CsvOptions(columns=["a", "b"]))
    assert next(source.iter_batches()).batch.to_pylist() == [{"a": 1, "b": 2}]


def test_gzip_csv(tmp_path: Path) -> None:
    path = tmp_path / "d.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\n" + b"".join(b"%d,%d\n" % (i, 2 * i) for i in range(101))))
    source = open_source(str(path))
    assert source.num_rows() == 101
    rows = [r for sb in source.iter_batches(Shard(1, 2), batch_rows=7) for r in sb.batch["b"].to_pylist()]
    assert rows == [2 * i for i in range(50, 101)]


def test_text_in_numeric_column_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("row,name\n0,a\n1,b\nx,c\n3,d\n")
    source = CsvSource(str(path), CsvOptions(column_types={"row": "int64"}))
    with pytest.raises(DataError) as e:
        list(source.iter_batches())
    assert str(e.value) == f"{path} line 4 (row 2), column 'row': expected int64, got 'x'"


def test_bad_value_far_into_the_file_with_inferred_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(csv_module, "_BLOCK_SIZE", 256)  # many blocks: the type is inferred from the first
    lines = ["k,v"] + [f"{i},{i * 0.5}" for i in range(300)]
    lines[250] = "249,oops"
    path = tmp_path / "late.csv"
    path.write_text("\n".join(lines) + "\n")
    source = CsvSource(str(path))
    assert source.schema().field("v").type == pa.float64()
    with pytest.raises(
        DataError, match=r"late\.csv line 251 \(row 249\), column 'v': expected double, got 'oops'"
    ):
        list(source.iter_batches(batch_rows=1000))


def test_conversion_error_without_a_row_number_is_located_by_scanning(tmp_path: Path) -> None:
    # Older pyarrow releases do not put "Row #" into conversion errors; the source then scans the column.
    path = tmp_path / "scan.csv"
    path.write_text("a,b\n1,2\n3,4\n5,zz\n")
    source = CsvSource(str(path), CsvOptions(column_types={"b": "int64"}))
    error = source._conversion_error(0, 1, {"a": pa.int64(), "b": pa.int64()}, 0)
    assert str(error) == f"{path} line 4 (row 2), column 'b': expected int64, got 'zz'"


def test_wrong_number_of_fields_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text("a,b\n1,2\n3\n4,5\n")
    with pytest.raises(
        DataError, match=r"short\.csv line 3: expected 2 columns separated by ',', got 1: '3'"
    ):
        CsvSource(str(path)).num_rows()


def test_header_mismatch_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    (tmp_path / "b.csv").write_text("a,c\n1,2\n")
    with pytest.raises(DataError, match=r"b\.csv line 1: header \['a', 'c'\] differs"):
        CsvSource(str(tmp_path)).num_rows()


def test_empty_files_yield_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    headerless = CsvSource(
        str(path), CsvOptions(header=False, columns=["a", "b"], column_types={"a": "int64"})
    )
    assert headerless.num_rows() == 0 and list(headerless.iter_batches()) == []
    assert headerless.schema() == pa.schema([("a", pa.int64()), ("b", pa.string())])
    header_only = tmp_path / "header.csv"
    header_only.write_text("a,b\n")
    source = CsvSource(str(header_only))
    assert source.num_rows() == 0 and source.schema().names == ["a", "b"]


def test_option_errors(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("a\n1\n")
    with pytest.raises(ValueError, match="CsvOptions.columns must name its columns"):
        CsvSource(str(path), CsvOptions(header=False))
    with pytest.raises(ValueError, match=r"unknown CSV column types \{'a': 'int8'\}"):
        CsvSource(str(path), CsvOptions(column_types={"a": "int8"}))
    with pytest.raises(ValueError, match=r"column_types name columns \['z'\]"):
        CsvSource(str(path), CsvOptions(column_types={"z": "int64"})).schema()


def test_criteo_options_layout() -> None:
    options = criteo_csv_options()
    assert options.delimiter == "\t" and options.header is False
    assert options.columns is not None and len(options.columns) == 40
    assert options.columns[:2] == ["label", "I1"] and options.columns[-1] == "C26"
    assert options.column_types["I13"] == "int64" and options.column_types["C1"] == "string"


def test_hives_null_marker_is_null_and_a_quoted_one_is_text(tmp_path: Path) -> None:
    """Hive's text tables, MySQL's and PostgreSQL's dumps write a null as ``\\N``: null in every column, a number
    column stays numeric; quoted, it is the text ``\\N``. ``null_values`` names other markers."""
    path = tmp_path / "hive.csv"
    path.write_text('id\x01price\x01name\n1\x01\\N\x01a\n2\x012.5\x01\\N\n3\x011.0\x01"\\N"\n')
    batch = next(CsvSource(str(path), CsvOptions(delimiter="\x01")).iter_batches()).batch
    assert batch.schema.field("price").type == pa.float64()
    assert batch.to_pylist() == [
        {"id": 1, "price": None, "name": "a"},
        {"id": 2, "price": 2.5, "name": None},
        {"id": 3, "price": 1.0, "name": "\\N"},
    ]
    path.write_text("id,price\n1,NULL\n2,2.5\n")
    assert CsvSource(str(path), CsvOptions()).schema().field("price").type == pa.string()  # the text NULL
    marked = next(CsvSource(str(path), CsvOptions(null_values=["", "NULL"])).iter_batches()).batch
    assert marked.column("price").to_pylist() == [None, 2.5]


def test_files_in_another_encoding_are_read_when_it_is_named(tmp_path: Path) -> None:
    rows = "user,slot\n1,广告位_7\n2,首页\n"
    (tmp_path / "part-0.csv").write_bytes(rows.encode("gbk"))
    (tmp_path / "part-1.csv").write_bytes(rows.encode("gbk"))
    with pytest.raises(
        DataError, match=r"part-0.csv: cannot parse CSV: .*invalid UTF8.*data.csv.encoding, e.g. gbk"
    ):
        list(open_source(str(tmp_path), csv=CsvOptions(text_columns=["slot"])).iter_batches())  # as an id's
    source = open_source(str(tmp_path), csv=CsvOptions(text_columns=["slot"], encoding="gbk"))
    assert [r["slot"] for sb in source.iter_batches() for r in sb.batch.to_pylist()] == [
        "广告位_7",
        "首页",
    ] * 2
    with pytest.raises(ValueError, match="unknown text encoding 'gbkk'"):
        CsvOptions(encoding="gbkk")


def test_a_byte_order_mark_on_every_file_is_no_header_text(tmp_path: Path) -> None:
    """Excel and some exports start each UTF-8 file with a BOM; the second file's header still matches."""
    for i in range(2):
        (tmp_path / f"part-{i}.csv").write_bytes("\ufeffa,b\n1,x\n".encode())
    source = open_source(str(tmp_path))
    assert source.schema().names == ["a", "b"] and source.num_rows() == 2


def test_a_column_named_twice_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Which of two ``price`` columns a feature would read is a guess: refused, in CSV and Parquet alike."""
    import pyarrow.parquet as pq

    (tmp_path / "part-0.csv").write_text("id,price,price\n1,2.5,3.5\n")
    with pytest.raises(DataError, match=r"part-0.csv: columns \['price'\] are named more than once"):
        open_source(str(tmp_path)).schema()
    table = pa.Table.from_arrays(
        [pa.array([1]), pa.array([2.5]), pa.array([3.5])], names=["id", "price", "price"]
    )
    pq.write_table(table, tmp_path / "part-0.parquet")
    with pytest.raises(DataError, match=r"part-0.parquet: columns \['price'\] are named more than once"):
        open_source(str(tmp_path / "part-0.parquet")).schema()
