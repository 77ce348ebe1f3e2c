"""Files that cannot be read are errors naming the file: a truncated .csv.gz, a folder mixing formats."""

from __future__ import annotations

import gzip

import pytest

from recpipe.data.sources import open_source
from recpipe.data.types import DataError


def _csv(rows: int) -> bytes:
    return ("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(rows))).encode()


@pytest.mark.parametrize("cut", [0.5, 0.02])  # mid-file, and inside the first block
def test_truncated_gzip_names_the_file(tmp_path, cut):
    whole = gzip.compress(_csv(200_000))
    (tmp_path / "part-0.csv.gz").write_bytes(gzip.compress(_csv(10)))
    (tmp_path / "part-1.csv.gz").write_bytes(whole[: int(len(whole) * cut)])
    source = open_source(str(tmp_path))
    with pytest.raises(DataError, match=r"part-1.csv.gz: cannot read: .*(Truncated|truncated|corrupt)"):
        source.num_rows()
        for _ in source.iter_batches():
            pass


def test_a_folder_with_parquet_and_csv_files_is_an_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1], "b": [2]}), tmp_path / "part-0.parquet")
    (tmp_path / "extra.csv").write_bytes(_csv(3))
    with pytest.raises(
        DataError, match=r"holds both Parquet \(1 files, .*part-0.parquet\) and CSV files \(1"
    ):
        open_source(str(tmp_path)).num_rows()
    # A glob names one format explicitly.
    assert open_source(str(tmp_path / "*.parquet")).num_rows() == 1
