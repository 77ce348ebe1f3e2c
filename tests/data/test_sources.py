"""open_source and check_source: choosing the reader from the URI scheme, the suffix or the leading bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from recpipe.data import (
    CsvSource,
    DataError,
    OdpsCredentialsError,
    OdpsSource,
    ParquetSource,
    Source,
    SyntheticSource,
    check_source,
    criteo_csv_options,
    open_source,
    parse_synthetic,
)


def test_suffixes_choose_the_reader(parquet_dir: Path, csv_dir: Path) -> None:
    assert isinstance(open_source(str(parquet_dir)), ParquetSource)
    assert isinstance(open_source(str(csv_dir / "part-0.csv")), CsvSource)
    assert isinstance(open_source("odps://ads/tables/t"), OdpsSource)


def test_suffixless_files_are_sniffed(tmp_path: Path, parquet_dir: Path) -> None:
    shutil.copy(parquet_dir / "part-00000.parquet", tmp_path / "day_0")
    source = open_source(str(tmp_path / "day_0"))
    assert isinstance(source, ParquetSource) and source.num_rows() == 300
    (tmp_path / "day_1").write_text("\t".join(["1", "5"] + [""] * 12 + ["a1b2c3d4"] * 26) + "\n")
    text = open_source(str(tmp_path / "day_1"), csv=criteo_csv_options())
    assert isinstance(text, CsvSource)
    row = next(text.iter_batches()).batch.to_pylist()[0]
    assert (row["label"], row["I1"], row["I2"], row["C26"]) == (1, 5, None, "a1b2c3d4")


def test_folder_prefers_parquet_over_other_files(tmp_path: Path, parquet_dir: Path) -> None:
    shutil.copy(parquet_dir / "part-00000.parquet", tmp_path / "a.parquet")
    (tmp_path / "notes.md").write_text("x\n1\n")  # issue 16: a CSV file next to Parquet is an error now
    source = open_source(str(tmp_path))
    assert isinstance(source, ParquetSource) and source.num_rows() == 300
    (tmp_path / "notes.csv").write_text("x\n1\n")
    assert open_source(str(tmp_path / "*.parquet")).num_rows() == 300  # a glob chooses the format


def test_sources_satisfy_the_protocol(parquet_dir: Path, csv_dir: Path) -> None:
    for source in (
        open_source(str(parquet_dir)),
        open_source(str(csv_dir)),
        open_source("odps://a/tables/b"),
    ):
        assert isinstance(source, Source)


def test_odps_options_for_files_are_rejected(parquet_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"ODPS options \['client'\] given for a non-ODPS uri"):
        open_source(str(parquet_dir), client=object())


def test_parse_synthetic() -> None:
    assert parse_synthetic("synthetic:taobao?rows=1000&seed=3&users=40") == SyntheticSource(
        "taobao", 1000, 3, {"users": 40}
    )
    assert parse_synthetic("synthetic:criteo") == SyntheticSource("criteo", 100_000, 0, {})
    for uri, match in (
        ("synthetic:movies?rows=10", "synthetic kind must be 'taobao', 'criteo', 'config' or 'retrieval'"),
        ("synthetic:criteo?rows=100&users=5", r"unknown option\(s\) \['users'\]"),
        ("synthetic:taobao?rows=ten", "rows must be an integer"),
        ("synthetic:taobao?rows=5", "rows must be >= 10"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_synthetic(uri)


def test_a_synthetic_source_is_generated_then_read(tmp_path: Path) -> None:
    source = open_source("synthetic:criteo?rows=50&seed=1&max_vocab=7", generate_into=tmp_path / "raw")
    assert isinstance(source, ParquetSource) and source.num_rows() == 50
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["_meta.json", "part-00000.parquet"]
    with pytest.raises(ValueError, match="needs a folder to generate into"):
        open_source("synthetic:criteo?rows=50")


def test_check_source_names_what_is_unreadable(parquet_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_source(str(parquet_dir))
    check_source("synthetic:taobao?rows=100")
    with pytest.raises(DataError, match="no such file or folder"):
        check_source(str(parquet_dir / "nope"))
    with pytest.raises(ValueError, match="synthetic kind"):
        check_source("synthetic:mnist?rows=10")
    with pytest.raises(ValueError, match="bad ODPS URI"):
        check_source("odps://proj/views/t")
    for key in ("ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(OdpsCredentialsError, match="missing: ODPS_ACCESS_ID, ODPS_ACCESS_KEY, ODPS_ENDPOINT"):
        check_source("odps://proj/tables/t/dt=20240101")
    for key in ("ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT"):
        monkeypatch.setenv(key, "x")
    check_source("odps://proj/tables/t/dt=20240101")
    with pytest.raises(ValueError, match="empty"):
        check_source(" ")


def test_a_scheme_no_filesystem_reads_is_an_error_naming_the_ones_that_are() -> None:
    with pytest.raises(DataError, match=r"'oss://bucket/logs': no filesystem reads oss:// here; .* s3:// "):
        open_source("oss://bucket/logs")
