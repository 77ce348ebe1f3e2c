"""ParquetSource: files, folders, globs, batching, and the DataError cases."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recpipe.data import DataError, ParquetSource, Shard, open_source


def test_folder_reads_all_parquet_files_in_order_and_skips_meta(parquet_dir: Path) -> None:
    source = open_source(str(parquet_dir))
    assert isinstance(source, ParquetSource)
    assert source.num_rows() == 1009
    assert source.schema().names == ["row", "name", "score"]
    table = pa.Table.from_batches([sb.batch for sb in source.iter_batches()])
    assert table.column("row").to_pylist() == list(range(1009))
    assert table.column("name")[1008].as_py() == "n1008"


def test_single_file_and_glob(parquet_dir: Path) -> None:
    one = open_source(str(parquet_dir / "part-00001.parquet"))
    assert one.num_rows() == 409
    first = next(one.iter_batches(batch_rows=5))
    assert first.batch["row"].to_pylist() == [300, 301, 302, 303, 304]
    assert first.file == str(parquet_dir / "part-00001.parquet") and first.first_row == 0

    glob = open_source(str(parquet_dir / "part-0000[02].parquet"))
    rows = [r for sb in glob.iter_batches() for r in sb.batch["row"].to_pylist()]
    assert rows == list(range(300)) + list(range(709, 1009))


def test_file_uri_scheme(parquet_dir: Path) -> None:
    assert open_source(f"file://{parquet_dir}").num_rows() == 1009


def test_batches_never_span_files_and_carry_first_row(parquet_dir: Path) -> None:
    batches = list(open_source(str(parquet_dir)).iter_batches(batch_rows=100))
    assert [sb.num_rows for sb in batches] == [100] * 3 + [100] * 4 + [9] + [100] * 3
    assert [sb.first_row for sb in batches[3:8]] == [0, 100, 200, 300, 400]
    assert {Path(sb.file).name for sb in batches[3:8]} == {"part-00001.parquet"}
    assert batches[7].batch["row"][0].as_py() == 300 + 400


def test_shard_edges_slice_row_groups(parquet_dir: Path) -> None:
    # Shard 1 of 3 owns global rows [336, 672): inside file 1 (rows 300..708) at file rows 36..371.
    batches = list(open_source(str(parquet_dir)).iter_batches(Shard(1, 3), batch_rows=1000))
    assert len(batches) == 1
    assert batches[0].first_row == 36 and batches[0].num_rows == 336
    assert batches[0].batch["row"].to_pylist() == list(range(336, 672))


def test_column_selection_and_unknown_column(parquet_dir: Path) -> None:
    source = open_source(str(parquet_dir))
    batch = next(source.iter_batches(columns=["score", "row"])).batch
    assert batch.schema.names == ["score", "row"]
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in"):
        next(source.iter_batches(columns=["row", "nope"]))


def test_empty_files_count_as_zero_rows(
    tmp_path: Path, parquet_dir: Path, make_rows: Callable[[int, int], pa.Table]
) -> None:
    shutil.copy(parquet_dir / "part-00000.parquet", tmp_path / "b.parquet")
    pq.write_table(make_rows(0, 0), tmp_path / "a.parquet")  # footer, zero rows
    (tmp_path / "c.parquet").write_bytes(b"")  # zero bytes
    source = open_source(str(tmp_path))
    assert source.num_rows() == 300
    assert sum(sb.num_rows for sb in source.iter_batches(Shard(1, 2))) == 150


def test_corrupt_file_names_the_file(tmp_path: Path, parquet_dir: Path) -> None:
    shutil.copy(parquet_dir / "part-00000.parquet", tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"this is not parquet at all")
    with pytest.raises(DataError, match=r"b\.parquet: not a readable Parquet file"):
        open_source(str(tmp_path)).num_rows()


def test_truncated_file_names_the_file(tmp_path: Path, parquet_dir: Path) -> None:
    data = (parquet_dir / "part-00001.parquet").read_bytes()
    (tmp_path / "t.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"t\.parquet"):
        ParquetSource(str(tmp_path / "t.parquet")).num_rows()


def test_schema_mismatch_names_file_and_column(
    tmp_path: Path, make_rows: Callable[[int, int], pa.Table]
) -> None:
    pq.write_table(make_rows(0, 5), tmp_path / "a.parquet")
    pq.write_table(
        make_rows(5, 9).set_column(0, "row", pa.array(["5", "6", "7", "8"])), tmp_path / "b.parquet"
    )
    with pytest.raises(
        DataError,
        match=r"b\.parquet: schema does not unify with .*a\.parquet's: 'row' is string, expected int64$",
    ):
        ParquetSource(str(tmp_path)).schema()


def test_daily_files_whose_schema_evolved_read_as_one_dataset(
    tmp_path: Path, make_rows: Callable[[int, int], pa.Table]
) -> None:
    """A column added one day, an int32 that became an int64, columns in another order, a writer's dictionary
    strings: one dataset in the unified schema, the gaps null, every change said."""
    day1 = make_rows(0, 3).set_column(0, "row", pa.array([0, 1, 2], pa.int32()))
    day2 = make_rows(3, 5).append_column("region", pa.array(["hz", None]))
    day3 = make_rows(5, 6).select(["score", "name", "row"])
    day3 = day3.set_column(1, "name", day3.column("name").dictionary_encode())
    for i, t in enumerate((day1, day2, day3)):
        pq.write_table(t, tmp_path / f"part-{i}.parquet")
    src = ParquetSource(str(tmp_path))
    assert src.schema() == pa.schema([("row", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                                      ("region", pa.string())])  # fmt: skip
    rows = pa.Table.from_batches([sb.batch for sb in src.iter_batches(Shard(0, 1), batch_rows=2)])
    assert rows.column("row").to_pylist() == list(range(6))
    assert rows.column("name").to_pylist() == [f"n{i}" for i in range(6)]
    assert rows.column("region").to_pylist() == [None, None, None, "hz", None, None]
    assert src.column_gaps() == {
        "region": [str(tmp_path / "part-0.parquet"), str(tmp_path / "part-2.parquet")]
    }
    assert src.schema_notes() == [
        "column 'row' is int32 in some files: read as int64",
        f"column 'region' is absent from 2 of 3 files (first {tmp_path / 'part-0.parquet'}): read as null there",
    ]
    # A column asked for alone, from files that lack it; and every shard adds up to the rows.
    assert [v for sb in src.iter_batches(columns=["region"]) for v in sb.batch.column(0).to_pylist()] == [
        None, None, None, "hz", None, None]  # fmt: skip
    shards = [sb.batch.column("row").to_pylist() for k in range(3) for sb in src.iter_batches(Shard(k, 3))]
    assert sum(shards, []) == list(range(6))
    # Files that agree are read as they are, with nothing to say.
    same = ParquetSource(str(tmp_path / "part-0.parquet"))
    assert same.schema_notes() == [] and same.column_gaps() == {}


def test_empty_folder_and_missing_path(tmp_path: Path) -> None:
    (tmp_path / "_SUCCESS").write_text("")
    with pytest.raises(DataError, match=rf"no data files in folder '{tmp_path}'"):
        open_source(str(tmp_path))
    with pytest.raises(DataError, match="no such file or folder"):
        open_source(str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"no files match"):
        open_source(str(tmp_path / "*.parquet"))
