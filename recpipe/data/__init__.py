"""Data inputs: sources (Parquet, CSV/TSV, ODPS, ``synthetic:``; hive-style and ODPS partitions) read as
exactly sharded Arrow batches, and synthetic Taobao / Criteo generators (:mod:`recpipe.data.synthetic`)."""

from recpipe.data.csv import CsvSource, criteo_csv_options
from recpipe.data.odps import OdpsCredentialsError, OdpsSource, OdpsTableRef, parse_odps_uri
from recpipe.data.parquet import ParquetSource
from recpipe.data.partitions import PartitionedSource, PartitionError
from recpipe.data.sharding import Shard
from recpipe.data.sources import SyntheticSource, check_source, open_source, parse_synthetic
from recpipe.data.types import DataError, Source, SourceBatch

__all__ = [
    "CsvSource",
    "DataError",
    "OdpsCredentialsError",
    "OdpsSource",
    "OdpsTableRef",
    "ParquetSource",
    "PartitionError",
    "PartitionedSource",
    "Shard",
    "Source",
    "SourceBatch",
    "SyntheticSource",
    "check_source",
    "criteo_csv_options",
    "open_source",
    "parse_odps_uri",
    "parse_synthetic",
]
