"""Partition selectors and hive-style folders (written with pyarrow): only the selected partitions are read,
each row carries its key, and shards of any count add up to exactly the selected rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from recpipe.data import DataError, PartitionedSource, PartitionError, Shard, open_source
from recpipe.data.partitions import Partition, Selector, newest, parse_selector, select
from recpipe.data.shuffle import ShuffledView
from recpipe.data.sources import check_source
from recpipe.data.types import PartedSource

DAYS = ["20260101", "20260102", "20260103", "20260104", "20260105"]
DAY_ROWS = [101, 0, 57, 230, 9]  # day 2 is an empty folder (no file)


def _write_days(
    root: Path, make_rows: Callable[[int, int], pa.Table], fmt: str = "parquet"
) -> dict[str, range]:
    """One folder per day; rows are numbered globally, so every row says where it came from."""
    owned, start = {}, 0
    for day, n in zip(DAYS, DAY_ROWS, strict=True):
        folder = root / f"dt={day}"
        folder.mkdir(parents=True)
        owned[day] = range(start, start + n)
        if n == 0:
            continue
        for j, (lo, hi) in enumerate(((start, start + n // 2), (start + n // 2, start + n))):
            table = make_rows(lo, hi)
            if fmt == "parquet":
                pq.write_table(table, folder / f"part-{j}.parquet", row_group_size=16)
            else:
                pacsv.write_csv(table, folder / f"part-{j}.csv")
        (folder / "_SUCCESS").write_text("")
        start += n
    return owned


@pytest.fixture()
def days(tmp_path: Path, make_rows: Callable[[int, int], pa.Table]) -> tuple[Path, dict[str, range]]:
    return tmp_path / "logs", _write_days(tmp_path / "logs", make_rows)


def _read(src: PartedSource, shard: Shard = Shard(0, 1), **kw: object) -> pa.Table:
    return pa.Table.from_batches([sb.batch for sb in src.iter_batches(shard, batch_rows=23, **kw)])


def _parts(*days: str) -> list[Partition]:
    return [Partition((("dt", d),), f"/x/dt={d}") for d in days]


@pytest.mark.parametrize(
    "text, want",
    [
        ("dt=20260107", Selector("dt=20260107", "dt", (("20260107", "20260107"),))),
        ("dt=20260101..20260107", Selector("dt=20260101..20260107", "dt", (("20260101", "20260107"),))),
        ("dt=1,3..4", Selector("dt=1,3..4", "dt", (("1", "1"), ("3", "4")))),
        ("dt=1,dt=3", Selector("dt=1,dt=3", "dt", (("1", "1"), ("3", "3")))),
        ("latest", Selector("latest", last=1)),
        ("last:7", Selector("last:7", last=7)),
    ],
)
def test_selectors_parse(text: str, want: Selector) -> None:
    assert parse_selector(text) == want


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        (" latest", "spaces"),
        ("Latest", "names no key"),
        ("last:0", "N >= 1"),
        ("last:x", "names no key"),
        ("dt=", "not a value"),
        ("dt=1..", "not a range"),
        ("dt=1...3", "not a range"),
        ("dt=5..3", "runs backwards"),
        ("dt=1,hh=2", "one key per selector"),
        ("dt=1,,2", "not a value"),
        ("20260101", "names no key"),
        ("dt=2026 0101", "not a value"),
    ],
)
def test_malformed_selectors_are_refused_with_the_syntax(text: str, why: str) -> None:
    with pytest.raises(PartitionError, match=why) as err:
        parse_selector(text)
    assert repr(text) in str(err.value) and "last:N" in str(err.value)


def test_select_ranges_lists_latest_and_last() -> None:
    parts = _parts("20260101", "20260102", "20260103", "20260105")
    names = lambda sel: [p.value("dt") for p in select(parts, sel, "src")]  # noqa: E731
    assert names("dt=20260102..20260104") == ["20260102", "20260103"]
    assert names("dt=20260105,20260101") == ["20260101", "20260105"]
    assert names("latest") == ["20260105"]
    assert names("last:2") == ["20260103", "20260105"]
    assert names("last:99") == ["20260101", "20260102", "20260103", "20260105"]
    # Digit-only values compare as numbers: hh=5 lies in 2..10 and is older than hh=10.
    hours = [Partition((("hh", h),), h) for h in ("5", "10")]
    assert [p.value("hh") for p in select(hours, "hh=2..10", "src")] == ["5", "10"]
    assert [p.value("hh") for p in newest(hours)] == ["10"]


def test_a_selector_that_matches_nothing_names_source_selector_and_partitions() -> None:
    parts = _parts(*(f"202601{d:02d}" for d in range(1, 15)))
    with pytest.raises(PartitionError) as err:
        select(parts, "dt=20250101..20251231", "s3://logs/clicks")
    msg = str(err.value)
    assert "'s3://logs/clicks'" in msg and "'dt=20250101..20251231'" in msg and "selects nothing" in msg
    assert "14 partition(s): dt=20260101, dt=20260102, dt=20260103, …, dt=20260112" in msg
    with pytest.raises(PartitionError, match=r"no partition key 'hh'; its keys are \['dt'\]"):
        select(parts, "hh=01", "src")


def test_hive_folder_reads_only_the_selected_partitions_with_the_key_column(days) -> None:
    root, owned = days
    src = open_source(str(root), partitions="dt=20260103..20260105")
    assert isinstance(src, PartitionedSource)
    assert [p.name for p in src.partitions] == ["dt=20260103", "dt=20260104", "dt=20260105"]
    assert (
        src.schema().names == ["row", "name", "score", "dt"] and src.schema().field("dt").type == pa.string()
    )
    t = _read(src)
    want = [*owned["20260103"], *owned["20260104"], *owned["20260105"]]
    assert t.column("row").to_pylist() == want
    assert t.column("dt").to_pylist() == [d for d in ("20260103", "20260104", "20260105") for _ in owned[d]]
    assert t.column("name").to_pylist() == [f"n{i}" for i in want]
    # Columns in the order asked for; the key alone still gives one value per row.
    assert _read(src, columns=["dt", "row"]).column_names == ["dt", "row"]
    assert _read(src, columns=["dt"]).num_rows == len(want)
    # Without a selector the folder reads as before: every file, no key column.
    plain = open_source(str(root))
    assert plain.num_rows() == sum(DAY_ROWS) and "dt" not in plain.schema().names


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("selector", ["dt=20260101,20260104..20260105", "last:4", "latest"])
def test_shards_of_any_count_are_exactly_the_selected_rows(tmp_path, make_rows, fmt, selector) -> None:
    owned = _write_days(tmp_path / "logs", make_rows, fmt)
    src = open_source(str(tmp_path / "logs"), partitions=selector)
    want = [r for p in src.partitions for r in owned[p.value("dt")]]
    assert src.num_rows() == len(want) > 0
    for count in (1, 2, 3):
        pieces = [_read(src, Shard(i, count)) for i in range(count)]
        rows = [r for t in pieces for r in t.column("row").to_pylist()]
        assert rows == want, (count, selector)  # in order: no row lost, none twice
        days_of = [d for t in pieces for d in t.column("dt").to_pylist()]
        assert all(r in owned[d] for r, d in zip(rows, days_of, strict=True))


def test_the_shuffle_permutes_the_selected_rows_and_keeps_their_keys(days) -> None:
    root, owned = days
    src = open_source(str(root), partitions="last:2")
    assert src.part_units(0) == [16, 16, 16, 16, 16, 16, 16, 3]  # the first file's row groups (115 rows)
    view = ShuffledView(src, seed=3, epoch=0, buffer_rows=50)
    t = pa.Table.from_batches([p.batch for p in view.rows(0, view.num_rows)])
    rows = t.column("row").to_pylist()
    assert sorted(rows) == [*owned["20260104"], *owned["20260105"]] and rows != sorted(rows)
    assert all(r in owned[d] for r, d in zip(rows, t.column("dt").to_pylist(), strict=True))


def test_nested_partitions_select_on_either_key(tmp_path, make_rows) -> None:
    root, start = tmp_path / "logs", 0
    for day in ("20260101", "20260102"):
        for hh in ("5", "10"):
            (root / f"dt={day}" / f"hh={hh}").mkdir(parents=True)
            pq.write_table(make_rows(start, start + 7), root / f"dt={day}" / f"hh={hh}" / "p.parquet")
            start += 7
    latest = open_source(str(root), partitions="latest")
    assert [p.name for p in latest.partitions] == ["dt=20260102/hh=5", "dt=20260102/hh=10"]
    assert _read(latest).column("row").to_pylist() == list(range(14, 28))
    assert _read(latest).column_names[-2:] == ["dt", "hh"]
    evening = open_source(str(root), partitions="hh=10")
    assert [p.name for p in evening.partitions] == ["dt=20260101/hh=10", "dt=20260102/hh=10"]
    assert _read(evening).column("hh").to_pylist() == ["10"] * 14


def test_a_folder_written_by_pyarrow_dataset_reads_back(tmp_path, make_rows) -> None:
    table = make_rows(0, 90).append_column("dt", pa.array(["20260101", "20260102", "20260103"] * 30))
    pads.write_dataset(
        table, tmp_path / "ds", format="parquet", partitioning=["dt"], partitioning_flavor="hive"
    )
    src = open_source(str(tmp_path / "ds"), partitions="dt=20260102..20260103")
    t = _read(src)
    assert sorted(t.column("row").to_pylist()) == [r for r in range(90) if r % 3 in (1, 2)]
    assert set(zip(t.column("row").to_pylist(), t.column("dt").to_pylist(), strict=True)) == {
        (r, ["20260101", "20260102", "20260103"][r % 3]) for r in range(90) if r % 3
    }


def test_a_data_column_named_like_the_key_gives_way_to_the_folder(tmp_path, make_rows) -> None:
    (tmp_path / "logs" / "dt=20260102").mkdir(parents=True)
    table = make_rows(0, 5).append_column("dt", pa.array([20260101] * 5, pa.int64()))  # stale copy
    pq.write_table(table, tmp_path / "logs" / "dt=20260102" / "p.parquet")
    src = open_source(str(tmp_path / "logs"), partitions="latest")
    assert src.schema().names == ["row", "name", "score", "dt"]
    assert _read(src).column("dt").to_pylist() == ["20260102"] * 5


def test_bad_folders_and_selectors_fail_naming_the_source(tmp_path, make_rows, days) -> None:
    root, _ = days
    with pytest.raises(PartitionError, match=r"selects nothing; it has 5 partition\(s\): dt=20260101"):
        open_source(str(root), partitions="dt=20990101")
    with pytest.raises(PartitionError, match="'dt=2026..'"):
        check_source(str(root), partitions="dt=2026..")
    with pytest.raises(PartitionError, match="selects nothing"):
        check_source(str(root), partitions="dt=20990101")
    check_source(str(root), partitions="last:3")  # fine
    # An empty partition alone holds no data file.
    with pytest.raises(DataError, match=r"hold no data files \(1 partition\(s\): dt=20260102\)"):
        open_source(str(root), partitions="dt=20260102")
    flat = tmp_path / "flat"
    flat.mkdir()
    pq.write_table(make_rows(0, 3), flat / "p.parquet")
    with pytest.raises(PartitionError, match="has no key=value partitions"):
        open_source(str(flat), partitions="latest")
    mixed = tmp_path / "mixed"
    (mixed / "dt=20260101").mkdir(parents=True)
    pq.write_table(make_rows(0, 3), mixed / "dt=20260101" / "p.parquet")
    pq.write_table(make_rows(3, 6), mixed / "stray.parquet")
    with pytest.raises(DataError, match=r"stray.parquet lies under keys \[\]"):
        open_source(str(mixed), partitions="latest")
    with pytest.raises(PartitionError, match="last:N"):
        open_source("synthetic:taobao?rows=100", generate_into=tmp_path / "g", partitions="last")
    assert not (tmp_path / "g").exists()  # refused before generating


def test_folder_markers_of_hadoop_s3_and_emr_are_skipped(days, make_rows) -> None:
    """EMR and Hadoop's S3 connectors write an empty ``dt=…_$folder$`` beside each folder: a marker, not a file
    of data, in the partitioned and the plain listing alike."""
    root, owned = days
    for day in DAYS:
        (root / f"dt={day}_$folder$").write_bytes(b"")
    (root / "dt=20260103" / "nested_$folder$").write_bytes(b"")
    src = open_source(str(root), partitions="last:2")
    assert [p.name for p in src.partitions] == ["dt=20260104", "dt=20260105"]
    assert _read(src).column("row").to_pylist() == [*owned["20260104"], *owned["20260105"]]
    assert open_source(str(root)).num_rows() == sum(DAY_ROWS)
    # A folder of suffix-less files (taken whole) does not take the markers as data either.
    plain = root.parent / "plain"
    plain.mkdir()
    pacsv.write_csv(make_rows(0, 4), plain / "part-00000")
    (plain / "sub_$folder$").write_bytes(b"")
    assert open_source(str(plain)).num_rows() == 4


def test_hives_null_partition_is_no_day(tmp_path, make_rows) -> None:
    """``dt=__HIVE_DEFAULT_PARTITION__`` holds the rows whose ``dt`` was null when Hive or Spark wrote them: never
    the newest day (``latest``, ``last:N``, ingest's eval split), in no range; read only when named, its ``dt``
    null."""
    root = tmp_path / "logs"
    for i, day in enumerate(("20260101", "20260102", "__HIVE_DEFAULT_PARTITION__")):
        (root / f"dt={day}").mkdir(parents=True)
        pq.write_table(make_rows(10 * i, 10 * i + 3), root / f"dt={day}" / "p.parquet")
    names = lambda sel: [p.name for p in open_source(str(root), partitions=sel).partitions]  # noqa: E731
    assert names("latest") == ["dt=20260102"]
    assert names("last:5") == ["dt=20260101", "dt=20260102"]
    assert names("dt=20260101..20991231") == ["dt=20260101", "dt=20260102"]
    both = open_source(str(root), partitions="dt=__HIVE_DEFAULT_PARTITION__,20260102")
    assert [p.name for p in both.partitions] == ["dt=__HIVE_DEFAULT_PARTITION__", "dt=20260102"]
    assert [p.name for p in newest(both.partitions)] == ["dt=20260102"]
    t = _read(both)
    assert t.column("row").to_pylist() == [20, 21, 22, 10, 11, 12]
    assert t.column("dt").to_pylist() == [None] * 3 + ["20260102"] * 3
    alone = open_source(str(root), partitions="dt=__HIVE_DEFAULT_PARTITION__").partitions
    assert [p.name for p in newest(alone)] == ["dt=__HIVE_DEFAULT_PARTITION__"]
    only_null = tmp_path / "nulls"
    (only_null / "dt=__HIVE_DEFAULT_PARTITION__").mkdir(parents=True)
    pq.write_table(make_rows(0, 3), only_null / "dt=__HIVE_DEFAULT_PARTITION__" / "p.parquet")
    with pytest.raises(PartitionError, match="selects nothing.*__HIVE_DEFAULT_PARTITION__ is no day"):
        open_source(str(only_null), partitions="latest")
