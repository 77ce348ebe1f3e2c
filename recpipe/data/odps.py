"""ODPS / MaxCompute tables read through pyodps' Arrow tunnel reader, sharded exactly by row ranges.

The pyodps boundary is one small object, the *client*: anything with ``get_table(name, project=)``
returning a table with ``table_schema`` and ``open_reader(partition=, arrow=True, columns=)``, whose
reader has ``count`` and ``read(start=, count=, columns=)`` yielding RecordBatches. By default it is
``odps.ODPS`` built from the environment; tests pass an in-memory stand-in.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from recpipe.data.sharding import FileSlice
from recpipe.data.types import PartedSource

CREDENTIAL_ENV = ("ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_PART = re.compile(r"^([A-Za-z0-9_]+)=([^=,/]+)$")


class OdpsCredentialsError(RuntimeError):
    """The environment lacks the ODPS credentials (``ODPS_ACCESS_ID``, ``ODPS_ACCESS_KEY``, ``ODPS_ENDPOINT``)."""


@dataclass(frozen=True)
class OdpsTableRef:
    """A table (or one partition of it) named by an ``odps://`` URI.

    Args:
        project (str): the project that owns the table.
        table (str): table name.
        partition (str | None): pyodps partition spec, ``"dt=20240101,hr=01"``; None for the whole table.

    Example::

        >>> parse_odps_uri("odps://ads/tables/taobao_sample/dt=20240101/hr=01")
        OdpsTableRef(project='ads', table='taobao_sample', partition='dt=20240101,hr=01')
    """

    project: str
    table: str
    partition: str | None = None


def parse_odps_uri(uri: str) -> OdpsTableRef:
    """Parse ``odps://project/tables/table[/k=v[/k=v...]]`` (a ``k=v,k=v`` segment is accepted too).

    Raises:
        ValueError: the URI does not have that form; the message shows the expected one.
    """
    expected = "expected odps://<project>/tables/<table>[/<key>=<value>...]"
    if not uri.startswith("odps://"):
        raise ValueError(f"{uri!r} is not an ODPS URI; {expected}")
    parts = [p for p in uri[len("odps://") :].split("/") if p]
    if len(parts) < 3 or parts[1] != "tables" or not _NAME.match(parts[0]) or not _NAME.match(parts[2]):
        raise ValueError(f"bad ODPS URI {uri!r}; {expected}")
    specs = [kv for segment in parts[3:] for kv in segment.split(",") if kv]
    bad = [kv for kv in specs if not _PART.match(kv)]
    if bad:
        raise ValueError(f"bad partition spec {bad} in {uri!r}; {expected}, e.g. /dt=20240101/hr=01")
    keys = [kv.split("=", 1)[0] for kv in specs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate partition key in {uri!r}: {keys}")
    return OdpsTableRef(parts[0], parts[2], ",".join(specs) or None)


def require_credentials() -> None:
    """Raise :class:`OdpsCredentialsError` naming every required variable that is unset or empty."""
    missing = [k for k in CREDENTIAL_ENV if not os.environ.get(k)]
    if missing:
        raise OdpsCredentialsError(
            f"reading ODPS tables needs the environment variables {', '.join(CREDENTIAL_ENV)} "
            f"(and optionally ODPS_PROJECT; on a cluster, from the Kubernetes Secret 'recpipe-odps'); "
            f"missing: {', '.join(missing)}"
        )


def odps_client_from_env(project: str) -> Any:
    """An ``odps.ODPS`` client from ``ODPS_ACCESS_ID``, ``ODPS_ACCESS_KEY``, ``ODPS_ENDPOINT`` and the
    optional ``ODPS_PROJECT`` (the default project; else ``project``). Credentials never come from config.

    Raises:
        OdpsCredentialsError: a required variable is unset or empty; the message names it.
    """
    require_credentials()
    from odps import ODPS  # optional dependency (the "full" extra)

    return ODPS(
        os.environ["ODPS_ACCESS_ID"],
        os.environ["ODPS_ACCESS_KEY"],
        project=os.environ.get("ODPS_PROJECT") or project,
        endpoint=os.environ["ODPS_ENDPOINT"],
    )


# The pieces an ODPS table is shuffled in (recpipe.data.shuffle): a download-session range each.
ODPS_SHUFFLE_UNIT_ROWS = 65_536


class OdpsSource(PartedSource):
    """An ODPS table or partition read with the tunnel's Arrow reader; shard ``i`` of ``k`` reads
    rows ``[i*N//k, (i+1)*N//k)`` of the download session (``N = reader.count``).

    Partition columns are not part of the rows (pyodps' ``append_partitions`` stays off;
    :mod:`recpipe.data.partitions` adds them).

    Args:
        uri (str): ``odps://project/tables/table[/dt=20240101/hr=01]``.
        client (Any | None): the pyodps boundary (see the module docstring); ``odps.ODPS`` from the
            environment when None, created on first use.
        partitions (list[str] | None): partition specs to read instead of the URI's, one part each, in
            this order (:func:`recpipe.data.partitions.odps_partitions` lists them).

    Example::

        src = OdpsSource("odps://ads/tables/taobao_sample/dt=20240101")
        src.num_rows()                 # reader.count of the partition
        for sb in src.iter_batches(Shard.of(rank, world, worker, workers), batch_rows=8192): ...
    """

    def __init__(self, uri: str, client: Any | None = None, partitions: list[str] | None = None) -> None:
        self.uri = uri
        self.ref = parse_odps_uri(uri)
        self._client = client
        self._table: Any | None = None
        self._specs: list[str | None] = [self.ref.partition] if partitions is None else list(partitions)
        self._counts: list[int] | None = None

    def table(self) -> Any:
        """The pyodps table (fetched once)."""
        return self._get_table()

    def _get_table(self) -> Any:
        if self._table is None:
            if self._client is None:
                self._client = odps_client_from_env(self.ref.project)
            self._table = self._client.get_table(self.ref.table, project=self.ref.project)
        return self._table

    def _open_reader(self, part: int, columns: list[str] | None = None) -> Any:
        return self._get_table().open_reader(partition=self._specs[part], arrow=True, columns=columns)

    def schema(self) -> pa.Schema:
        """The table's data columns as Arrow types (pyodps' own ODPS → Arrow mapping)."""
        from odps.tunnel.io.types import odps_schema_to_arrow_schema

        return odps_schema_to_arrow_schema(self._get_table().table_schema)

    def part_rows(self) -> list[int]:
        """Rows of each part: the table (or the URI's partition), or each partition given (the download
        sessions' counts, cached)."""
        if self._counts is None:
            counts = []
            for part in range(len(self._specs)):
                with self._open_reader(part) as reader:
                    counts.append(int(reader.count))
            self._counts = counts
        return self._counts

    def part_name(self, index: int) -> str:
        spec = self._specs[index]
        if spec == self.ref.partition:
            return self.uri
        return f"{self.uri} partition {spec}"

    def part_units(self, index: int) -> list[int]:
        """Ranges of ``ODPS_SHUFFLE_UNIT_ROWS``: the tunnel reads any range (``start``, ``count``)."""
        rows = self.part_rows()[index]
        full, rest = divmod(rows, ODPS_SHUFFLE_UNIT_ROWS)
        return [ODPS_SHUFFLE_UNIT_ROWS] * full + ([rest] if rest else [])

    def read_part(
        self, piece: FileSlice, columns: list[str] | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """Rows of the download session, in table order."""
        with self._open_reader(piece.file_index, columns) as reader:
            batches = reader.read(start=piece.start, count=piece.stop - piece.start, columns=columns)
            if columns is not None:  # the tunnel returns table order; callers get the order they asked for
                batches = (b.select(columns) for b in batches)
            yield from batches
