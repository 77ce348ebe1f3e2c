"""Small real datasets shared by the data tests: 1009 rows (prime, so no shard count divides it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

PARQUET_FILE_ROWS = (300, 409, 300)
CSV_FILE_ROWS = (500, 0, 509)  # the middle file is zero bytes


def rows_table(start: int, stop: int) -> pa.Table:
    """Rows ``start..stop-1``: ``row`` is the global row index, ``name`` and ``score`` derive from it."""
    idx = list(range(start, stop))
    return pa.table(
        {
            "row": pa.array(idx, pa.int64()),
            "name": pa.array([f"n{i}" for i in idx]),
            "score": pa.array([i / 8 for i in idx], pa.float64()),
        }
    )


@pytest.fixture(scope="session")
def make_rows() -> Callable[[int, int], pa.Table]:
    """:func:`rows_table`, for tests that write their own small files."""
    return rows_table


@pytest.fixture(scope="session")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three Parquet files (300, 409, 300 rows) with row groups of 37 rows, plus a ``_meta.json``."""
    out = tmp_path_factory.mktemp("parquet")
    start = 0
    for i, n in enumerate(PARQUET_FILE_ROWS):
        pq.write_table(rows_table(start, start + n), out / f"part-{i:05d}.parquet", row_group_size=37)
        start += n
    (out / "_meta.json").write_text("{}")
    return out


@pytest.fixture(scope="session")
def csv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three CSV files with headers (500 rows, an empty zero-byte file, 509 rows)."""
    out = tmp_path_factory.mktemp("csv")
    start = 0
    for i, n in enumerate(CSV_FILE_ROWS):
        path = out / f"part-{i}.csv"
        if n == 0:
            path.write_bytes(b"")
            continue
        pacsv.write_csv(rows_table(start, start + n), path)
        start += n
    return out
