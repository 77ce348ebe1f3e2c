"""open_source: choosing the reader from the URI, the suffix or the leading bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from recpipe.data import CsvSource, OdpsSource, ParquetSource, Source, criteo_csv_options, open_source


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
    (tmp_path / "notes.csv").write_text("x\n1\n")
    source = open_source(str(tmp_path))
    assert isinstance(source, ParquetSource) and source.num_rows() == 300


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
