"""OdpsSource through an in-memory stand-in for pyodps.

ODPS cannot be reached from tests. ``FakeOdps`` stands in for ``odps.ODPS`` and serves Arrow tables
through the same calls pyodps exposes for the table tunnel's Arrow download (the data path recpipe
uses in place of the Storage API): ``get_table(name, project=)`` → a table with ``table_schema`` (a
real ``odps.models.TableSchema``) and ``open_reader(partition=, arrow=True, columns=)`` → a reader
with ``count`` and ``read(start=, count=, columns=)`` yielding RecordBatches in small tunnel-sized
pieces, in table column order. ``test_stand_in_matches_pyodps_signatures`` keeps it honest.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import odps
import pyarrow as pa
import pytest
from odps.models import TableSchema
from odps.models.partition import Partition
from odps.models.readers import TunnelArrowReader
from odps.models.table import Table
from odps.tunnel.io.types import arrow_type_to_odps_type
from odps.types import PartitionSpec

from recpipe.data import (
    OdpsCredentialsError,
    OdpsSource,
    OdpsTableRef,
    PartitionedSource,
    PartitionError,
    Shard,
    open_source,
    parse_odps_uri,
)
from recpipe.data.odps import odps_client_from_env

TUNNEL_BATCH = 97


class FakeArrowReader:
    """Stands in for pyodps' ``TableArrowReader`` over one download session."""

    def __init__(self, table: pa.Table, columns: list[str] | None) -> None:
        self._table = table
        self._columns = columns

    @property
    def count(self) -> int:
        return self._table.num_rows

    def read(
        self,
        start: int | None = None,
        count: int | None = None,
        compress: bool = False,
        columns: Any = None,
        append_partitions: Any = None,
    ) -> Iterator[pa.RecordBatch]:
        start = start or 0
        count = self.count - start if count is None else min(count, self.count - start)
        wanted = set(columns or self._columns or self._table.column_names)
        table = self._table.select([c for c in self._table.column_names if c in wanted])  # table order
        yield from table.slice(start, count).to_batches(max_chunksize=TUNNEL_BATCH)

    def __enter__(self) -> FakeArrowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeTable:
    """Stands in for ``odps.models.Table``: partitions keyed by their normalized partition spec."""

    def __init__(self, partitions: dict[str | None, pa.Table], partition_keys: list[str]) -> None:
        self._partitions = {None if k is None else str(PartitionSpec(k)): v for k, v in partitions.items()}
        first = next(iter(partitions.values()))
        self.table_schema = TableSchema.from_lists(
            first.column_names,
            [arrow_type_to_odps_type(t) for t in first.schema.types],
            partition_keys,
            ["string"] * len(partition_keys),
        )
        self.opened: list[tuple[str | None, list[str] | None]] = []

    def open_reader(
        self, partition: str | None = None, arrow: bool = False, columns: Any = None, **kw: Any
    ) -> FakeArrowReader:
        assert arrow, "recpipe must read through the Arrow reader"
        key = None if partition is None else str(PartitionSpec(partition))
        if key not in self._partitions:
            raise KeyError(f"no partition {key}")
        self.opened.append((key, columns))
        return FakeArrowReader(self._partitions[key], columns)

    def iterate_partitions(self, spec: str | None = None, reverse: bool = False) -> Iterator[FakePartition]:
        """Like pyodps': the partitions whose spec starts with ``spec``'s keys and values."""
        prefix = {} if spec is None else PartitionSpec(spec).kv
        keys = [k for k in self._partitions if k is not None]
        for key in reversed(keys) if reverse else keys:
            if all(PartitionSpec(key).kv.get(k) == v for k, v in prefix.items()):
                yield FakePartition(PartitionSpec(key))


class FakePartition:
    """Stands in for ``odps.models.Partition``: its ``partition_spec``."""

    def __init__(self, spec: PartitionSpec) -> None:
        self.partition_spec = spec


class FakeOdps:
    """Stands in for ``odps.ODPS``: ``get_table(name, project=)``."""

    def __init__(self, tables: dict[tuple[str, str], FakeTable]) -> None:
        self._tables = tables

    def get_table(self, name: str, project: str | None = None, schema: str | None = None) -> FakeTable:
        return self._tables[(project or "", name)]


def _rows(start: int, stop: int) -> pa.Table:
    idx = list(range(start, stop))
    return pa.table(
        {
            "row": pa.array(idx, pa.int64()),
            "clk": pa.array([i % 2 for i in idx], pa.int64()),
            "name": [f"n{i}" for i in idx],
        }
    )


@pytest.fixture()
def client() -> FakeOdps:
    partitioned = FakeTable(
        {"dt=20240101,hr=01": _rows(0, 1009), "dt=20240101,hr=02": _rows(5000, 5010)}, ["dt", "hr"]
    )
    # Listed out of order: recpipe orders partitions itself.
    daily = FakeTable(
        {"dt=20240103": _rows(200, 230), "dt=20240101": _rows(0, 101), "dt=20240102": _rows(101, 200)}, ["dt"]
    )
    return FakeOdps(
        {
            ("ads", "taobao"): partitioned,
            ("ads", "daily"): daily,
            ("ads", "plain"): FakeTable({None: _rows(0, 10)}, []),
        }
    )


def test_parse_odps_uri() -> None:
    assert parse_odps_uri("odps://ads/tables/taobao") == OdpsTableRef("ads", "taobao", None)
    assert parse_odps_uri("odps://ads/tables/taobao/dt=20240101/hr=01") == OdpsTableRef(
        "ads", "taobao", "dt=20240101,hr=01"
    )
    assert parse_odps_uri("odps://ads/tables/taobao/dt=20240101,hr=01/") == OdpsTableRef(
        "ads", "taobao", "dt=20240101,hr=01"
    )
    for bad, message in [
        ("odps://ads/taobao", "bad ODPS URI"),
        ("odps://ads/tables/taobao/dt", "bad partition spec"),
        ("odps://ads/tables/taobao/dt=1/dt=2", "duplicate partition key"),
        ("s3://ads/tables/taobao", "not an ODPS URI"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_odps_uri(bad)


def test_reads_a_partition_with_exact_shards(client: FakeOdps) -> None:
    source = open_source("odps://ads/tables/taobao/dt=20240101/hr=01", client=client)
    assert isinstance(source, OdpsSource)
    assert source.num_rows() == 1009
    assert source.schema() == pa.schema([("row", pa.int64()), ("clk", pa.int64()), ("name", pa.string())])
    seen = []
    for i in range(3):
        batches = list(source.iter_batches(Shard(i, 3), batch_rows=128))
        start, stop = Shard(i, 3).row_range(1009)
        assert batches[0].first_row == start and batches[0].file == source.uri
        assert all(sb.num_rows == 128 for sb in batches[:-1])  # tunnel pieces of 97 regrouped
        rows = [r for sb in batches for r in sb.batch["row"].to_pylist()]
        assert rows == list(range(start, stop))
        seen += rows
    assert seen == list(range(1009))


def test_other_partition_and_unpartitioned_table(client: FakeOdps) -> None:
    other = OdpsSource("odps://ads/tables/taobao/dt=20240101/hr=02", client=client)
    assert [r for sb in other.iter_batches() for r in sb.batch["row"].to_pylist()] == list(range(5000, 5010))
    plain = OdpsSource("odps://ads/tables/plain", client=client)
    assert plain.num_rows() == 10


def test_columns_come_back_in_the_requested_order(client: FakeOdps) -> None:
    source = OdpsSource("odps://ads/tables/taobao/dt=20240101/hr=01", client=client)
    batch = next(source.iter_batches(columns=["name", "row"], batch_rows=3)).batch
    assert batch.to_pylist() == [{"name": "n0", "row": 0}, {"name": "n1", "row": 1}, {"name": "n2", "row": 2}]
    with pytest.raises(ValueError, match=r"columns \['dt'\] are not in"):
        next(source.iter_batches(columns=["dt"]))


def test_missing_credentials_name_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT", "ODPS_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ODPS_ACCESS_ID", "id")
    source = OdpsSource("odps://ads/tables/taobao")
    with pytest.raises(OdpsCredentialsError, match="missing: ODPS_ACCESS_KEY, ODPS_ENDPOINT"):
        source.num_rows()


def test_client_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # odps.ODPS() contacts the endpoint when constructed, so record its arguments instead.
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(odps, "ODPS", lambda *args, **kwargs: calls.append((args, kwargs)) or "client")
    monkeypatch.setenv("ODPS_ACCESS_ID", "id")
    monkeypatch.setenv("ODPS_ACCESS_KEY", "key")
    monkeypatch.setenv("ODPS_ENDPOINT", "http://service.example.com/api")
    monkeypatch.delenv("ODPS_PROJECT", raising=False)
    assert odps_client_from_env("ads") == "client"
    monkeypatch.setenv("ODPS_PROJECT", "billing")
    odps_client_from_env("ads")
    endpoint = "http://service.example.com/api"
    assert calls == [
        (("id", "key"), {"project": "ads", "endpoint": endpoint}),
        (("id", "key"), {"project": "billing", "endpoint": endpoint}),
    ]


def test_selected_partitions_carry_their_keys_and_shard_exactly(client: FakeOdps) -> None:
    source = open_source("odps://ads/tables/daily", client=client, partitions="dt=20240102..20240103")
    assert isinstance(source, PartitionedSource)
    assert [p.name for p in source.partitions] == ["dt=20240102", "dt=20240103"]
    assert source.schema().names == ["row", "clk", "name", "dt"] and source.part_rows() == [99, 30]
    for count in (1, 2, 3):
        shards = [list(source.iter_batches(Shard(i, count), batch_rows=40)) for i in range(count)]
        rows = [r for batches in shards for sb in batches for r in sb.batch["row"].to_pylist()]
        assert rows == list(range(101, 230)), count
        days = [d for batches in shards for sb in batches for d in sb.batch["dt"].to_pylist()]
        assert days == ["20240102"] * 99 + ["20240103"] * 30
    assert source.part_name(1) == "odps://ads/tables/daily partition dt='20240103'"
    assert [
        p.value("dt")
        for p in open_source("odps://ads/tables/daily", client=client, partitions="latest").partitions
    ] == ["20240103"]


def test_a_uri_partition_prefix_narrows_the_listing(client: FakeOdps) -> None:
    source = open_source("odps://ads/tables/taobao/dt=20240101", client=client, partitions="hr=02")
    batch = next(source.iter_batches(columns=["row", "dt", "hr"])).batch
    assert batch.to_pylist()[0] == {"row": 5000, "dt": "20240101", "hr": "02"} and batch.num_rows == 10


def test_odps_selectors_that_select_nothing_or_a_plain_table_are_refused(client: FakeOdps) -> None:
    with pytest.raises(
        PartitionError, match=r"selects nothing; it has 3 partition\(s\): dt=20240101, dt=20240102"
    ):
        open_source("odps://ads/tables/daily", client=client, partitions="dt=20250101")
    with pytest.raises(PartitionError, match=r"no partition key 'hh'; its keys are \['dt', 'hr'\]"):
        open_source("odps://ads/tables/taobao", client=client, partitions="hh=01")
    with pytest.raises(PartitionError, match="'odps://ads/tables/plain': the ODPS table is not partitioned"):
        open_source("odps://ads/tables/plain", client=client, partitions="latest")


def test_stand_in_matches_pyodps_signatures() -> None:
    assert {"spec", "reverse"} <= set(inspect.signature(Table.iterate_partitions).parameters)
    assert isinstance(inspect.getattr_static(Partition, "partition_spec"), property)
    assert PartitionSpec("dt=1,hr=2").kv == {"dt": "1", "hr": "2"}
    assert {"start", "count", "columns"} <= set(inspect.signature(TunnelArrowReader.read).parameters)
    assert isinstance(inspect.getattr_static(TunnelArrowReader, "count"), property)
    assert {"partition", "arrow", "columns"} <= set(inspect.signature(Table.open_reader).parameters)
    assert "project" in inspect.signature(odps.ODPS.get_table).parameters


def test_a_table_of_odps_warehouse_types_reads_as_the_generated_rows(tmp_path) -> None:
    """What pyodps' Arrow reader gives for an ODPS table typed as warehouses type it: ``time_stamp DATETIME``
    (timestamp[ms]), ``price DECIMAL(18,2)``, ``click_50_seq ARRAY<STRING>`` (one item each), ``clk BOOLEAN``.
    FG reads it as the generated rows; the time split reads the DATETIME as the epoch seconds."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from recpipe.config import load_config
    from recpipe.data.synthetic import generate
    from recpipe.features.build import build_feature_spec
    from recpipe.features.fg import FeatureGenerator
    from recpipe.stages.ingest import epoch_seconds

    generate("taobao", rows=300, out=tmp_path)
    rows = pq.read_table(tmp_path)
    price = pc.divide(pc.round(pc.multiply(rows.column("price"), 100.0)), 100.0)
    rows = rows.set_column(rows.schema.get_field_index("price"), "price", price)
    history = rows.column("click_50_seq").combine_chunks()
    items = pc.if_else(
        pc.fill_null(pc.equal(history, ""), False),
        pa.scalar([], pa.list_(pa.string())),
        pc.split_pattern(history, "|"),
    )
    typed = {
        "time_stamp": pc.multiply(rows.column("time_stamp"), 1000).cast(pa.timestamp("ms")),
        "price": rows.column("price").cast(pa.decimal128(18, 2)),
        "click_50_seq": items,
        "clk": rows.column("clk").cast(pa.bool_()),
    }
    odps_rows = rows
    for name, values in typed.items():
        odps_rows = odps_rows.set_column(odps_rows.schema.get_field_index(name), name, values)
    client = FakeOdps({("ads", "clicks"): FakeTable({None: odps_rows}, [])})
    source = open_source("odps://ads/tables/clicks", client=client)
    assert source.schema().field("time_stamp").type == pa.timestamp("ms")
    read = pa.Table.from_batches([sb.batch for sb in source.iter_batches(batch_rows=64)])
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "configs" / "din_taobao_small.yaml"
    spec = build_feature_spec(load_config(config))
    want, got = FeatureGenerator(spec)(rows), FeatureGenerator(spec)(read)
    np.testing.assert_array_equal(got.dense, want.dense)
    np.testing.assert_array_equal(got.labels, want.labels)
    for g, w in zip([*got.values, *got.lengths], [*want.values, *want.lengths], strict=True):
        np.testing.assert_array_equal(g, w)
    seconds = epoch_seconds(read.column("time_stamp"), "time_stamp", source.uri)
    assert seconds.to_pylist() == [float(s) for s in rows.column("time_stamp").to_pylist()]
