"""Open any supported input as a :class:`Source`: Parquet, CSV/TSV (local or object store) or ODPS.

Every source yields :class:`SourceBatch` es (an Arrow RecordBatch plus the file and first row it came
from) for one :class:`Shard`; the union over the shards of one count is exactly the dataset.
"""

from __future__ import annotations

from typing import Any

from recpipe.config import CsvOptions
from recpipe.data.csv import CsvSource, criteo_csv_options
from recpipe.data.files import detect_format, resolve_files
from recpipe.data.odps import OdpsSource
from recpipe.data.parquet import ParquetSource
from recpipe.data.sharding import Shard
from recpipe.data.types import DataError, Source, SourceBatch

__all__ = [
    "CsvSource",
    "DataError",
    "OdpsSource",
    "ParquetSource",
    "Shard",
    "Source",
    "SourceBatch",
    "criteo_csv_options",
    "open_source",
]


def open_source(uri: str, csv: CsvOptions | None = None, **odps_kwargs: Any) -> Source:
    """The :class:`Source` for ``uri``.

    ``odps://`` URIs open an :class:`OdpsSource` (``odps_kwargs``, e.g. ``client=``, go to it). Anything
    else is resolved to files (a file, a folder, a glob; local or ``s3://``/``gs://``/``hdfs://``) whose
    format comes from the first file's suffix (``.parquet``/``.pq``; ``.csv``/``.tsv``/``.txt``, optionally
    compressed) or, without one, its leading bytes (``PAR1`` means Parquet, otherwise CSV).

    Args:
        uri (str): where the data is.
        csv (CsvOptions | None): how to parse CSV files (ignored for Parquet and ODPS).
        **odps_kwargs: keyword arguments for :class:`OdpsSource`.

    Raises:
        DataError: nothing exists at ``uri``, or a folder holds no data files.

    Example::

        open_source("runs/data/train").num_rows()                       # Parquet folder
        open_source("criteo/day_0", csv=criteo_csv_options())           # raw Criteo TSV
        open_source("odps://ads/tables/taobao/dt=20240101", client=odps_client)
    """
    if uri.startswith("odps://"):
        return OdpsSource(uri, **odps_kwargs)
    if odps_kwargs:
        raise ValueError(f"ODPS options {sorted(odps_kwargs)} given for a non-ODPS uri {uri!r}")
    files = resolve_files(uri)
    if detect_format(files) == "parquet":
        return ParquetSource(uri, files)
    return CsvSource(uri, csv, files)
