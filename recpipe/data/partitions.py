"""Partitioned sources: hive-style folders (``dt=20260101/``, nested ``dt=…/hh=…/``; local or object store)
and ODPS partitions, one selector syntax to choose among them, and :class:`PartitionedSource`, which reads
only the chosen partitions with each partition key as a string column of every row.

Selectors (``data.partitions``, ``--partitions``), parsed strictly:

- ``dt=20260107``: the partitions whose ``dt`` is that value;
- ``dt=20260101..20260107``: ``dt`` in the inclusive range (digit-only values compare as numbers, others as
  text);
- ``dt=20260101,20260103`` or ``dt=20260101,dt=20260103``: a comma list of values and ranges of one key;
- ``latest``: the newest value of the first (outermost) key; ``last:7``: its 7 newest values (all their
  nested partitions, e.g. every ``hh`` of those days).

Hive's partition of null values (``dt=__HIVE_DEFAULT_PARTITION__``: rows whose ``dt`` was null when Hive or
Spark wrote them) is no day: it sorts before every other value, ``latest`` and ``last:N`` never choose it
(nor does the eval split's "newest partition"), no range holds it, and it is read only when named
(``dt=__HIVE_DEFAULT_PARTITION__``); its rows' ``dt`` is null, as Hive and Spark read it.

A selector that matches nothing, names a key the source lacks, or does not parse is a
:class:`PartitionError` naming the source, the selector and the partitions that exist.

Example::

    parts = select(hive_partitions("data/logs").partitions, "last:2", "data/logs")
    [p.name for p in parts]     # ["dt=20260106", "dt=20260107"]
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from recpipe.data.files import DataFiles, choose_data_files, filesystem_of, hidden
from recpipe.data.sharding import FileSlice
from recpipe.data.types import DataError, PartedSource

_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_VALUE = r"[^=,/\s]+"
_SEGMENT = re.compile(rf"^({_KEY})=(.+)$")
_ITEM = re.compile(rf"^(?:({_KEY})=)?({_VALUE})$")
_LAST = re.compile(r"^last:([0-9]+)$")
SYNTAX = "dt=20260107, dt=20260101..20260107, dt=20260101,20260103, latest or last:N"
# The folder value Hive and Spark write for a null partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Partitions shown in an error message: the first and the last few.
_SHOWN = 3


class PartitionError(ValueError):
    """A partition selector that does not parse, names a key the source lacks or selects nothing."""


@dataclass(frozen=True)
class Partition:
    """One partition: its ``key=value`` pairs (outermost first) and where its rows are.

    Args:
        values (tuple[tuple[str, str], ...]): ``(("dt", "20260101"), ("hh", "00"))``.
        location (str): the folder (a filesystem path) or the ODPS partition spec.

    Example::

        >>> Partition((("dt", "20260101"), ("hh", "00")), "/data/dt=20260101/hh=00").name
        'dt=20260101/hh=00'
    """

    values: tuple[tuple[str, str], ...]
    location: str

    @property
    def name(self) -> str:
        """``dt=20260101`` (``dt=20260101/hh=00`` when nested): the name in run tags and messages."""
        return "/".join(f"{k}={v}" for k, v in self.values)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.values)

    def value(self, key: str) -> str:
        """The value of ``key``."""
        return dict(self.values)[key]


@dataclass(frozen=True)
class Selector:
    """A parsed selector: ``last`` newest values of the first key, or ``ranges`` of ``key``'s values.

    Args:
        text (str): as given.
        key (str | None): the key the ranges are on (None for ``latest`` / ``last:N``).
        ranges (tuple[tuple[str, str], ...]): inclusive ``(low, high)`` value ranges (one value: low == high).
        last (int | None): how many newest values of the first key (``latest`` is 1).
    """

    text: str
    key: str | None = None
    ranges: tuple[tuple[str, str], ...] = ()
    last: int | None = None


def order(value: str) -> tuple[int, int | str]:
    """The sort key of a partition value: Hive's null partition first, then digit-only values as numbers
    (``hh=5`` before ``hh=10``), then text."""
    if value == HIVE_NULL:
        return (-1, "")
    return (0, int(value)) if value.isdigit() else (1, value)


def parse_selector(text: str) -> Selector:
    """Parse a selector strictly (module docstring).

    Raises:
        PartitionError: it does not parse; the message shows the syntax.

    Example::

        >>> parse_selector("dt=20260101..20260107")
        Selector(text='dt=20260101..20260107', key='dt', ranges=(('20260101', '20260107'),), last=None)
    """

    def bad(why: str) -> PartitionError:
        return PartitionError(f"partition selector {text!r}: {why}; expected {SYNTAX}")

    if not isinstance(text, str) or not text.strip():
        raise bad("empty")
    if text != text.strip():
        raise bad("leading or trailing spaces")
    if text == "latest":
        return Selector(text, last=1)
    if m := _LAST.match(text):
        if int(m.group(1)) < 1:
            raise bad("last:N needs N >= 1")
        return Selector(text, last=int(m.group(1)))
    key, ranges = None, []
    for item in text.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise bad(f"{item!r} is not a value or a range low..high")
        item_key, value = m.groups()
        if key is None and item_key is None:
            raise bad(f"{item!r} names no key (write key=value)")
        if item_key is not None and key is not None and item_key != key:
            raise bad(f"one key per selector, got {key!r} and {item_key!r}")
        key = key or item_key
        low, dots, high = value.partition("..")
        if dots and (not low or not high or ".." in high or low.endswith(".") or high.startswith(".")):
            raise bad(f"{value!r} is not a range low..high")
        high = high if dots else low
        if order(low) > order(high):
            raise bad(f"range {value!r} runs backwards")
        ranges.append((low, high))
    return Selector(text, key=key, ranges=tuple(ranges))


def _listing(partitions: Sequence[Partition]) -> str:
    names = [p.name for p in partitions]
    if len(names) > 2 * _SHOWN:
        names = [*names[:_SHOWN], "…", *names[-_SHOWN:]]
    return f"{len(partitions)} partition(s): {', '.join(names)}" if partitions else "no partitions"


def select(partitions: Sequence[Partition], selector: str | Selector, source: str) -> list[Partition]:
    """The partitions ``selector`` chooses, in partition order (oldest first).

    Args:
        partitions (Sequence[Partition]): every partition of the source, in partition order.
        selector (str | Selector): what to read.
        source (str): the source's URI, for messages.

    Raises:
        PartitionError: the selector does not parse, names a key the source lacks, or selects nothing.
    """
    sel = parse_selector(selector) if isinstance(selector, str) else selector
    where = f"data source {source!r}, partition selector {sel.text!r}"
    if not partitions:
        raise PartitionError(f"{where}: the source has no key=value partitions")
    keys = partitions[0].keys
    if sel.last is not None:
        values = sorted({p.value(keys[0]) for p in partitions} - {HIVE_NULL}, key=order)[-sel.last :]
        if not values:
            raise PartitionError(
                f"{where}: selects nothing; it has {_listing(partitions)} ({HIVE_NULL} is no day)"
            )
        return [p for p in partitions if p.value(keys[0]) in values]
    assert sel.key is not None
    if sel.key not in keys:
        raise PartitionError(f"{where}: no partition key {sel.key!r}; its keys are {list(keys)}")
    ranges = [(order(lo), order(hi)) for lo, hi in sel.ranges]
    chosen = [p for p in partitions if any(lo <= order(p.value(sel.key)) <= hi for lo, hi in ranges)]
    if not chosen:
        raise PartitionError(f"{where}: selects nothing; it has {_listing(partitions)}")
    return chosen


def newest(partitions: Sequence[Partition]) -> list[Partition]:
    """The partitions holding the newest value of the first key (a day's every ``hh`` when nested); Hive's
    null partition only when there is nothing else."""
    if not partitions:
        return []
    key = partitions[0].keys[0]
    # HIVE_NULL sorts first: the max is it only when it is alone.
    last = max((p.value(key) for p in partitions), key=order)
    return [p for p in partitions if p.value(key) == last]


def _sorted(partitions: list[Partition]) -> list[Partition]:
    return sorted(partitions, key=lambda p: tuple(order(v) for _, v in p.values))


# ------------------------------------------------------------------------------------------- listing
@dataclass(frozen=True)
class HiveFolder:
    """A hive-style folder: its partitions and each one's files.

    Args:
        uri (str): the folder as given.
        filesystem (pafs.FileSystem): where it lives.
        partitions (list[Partition]): every partition, in partition order (empty: not partitioned).
        files (dict[str, list[str]]): partition name → its (non-hidden) file paths, sorted.
    """

    uri: str
    filesystem: pafs.FileSystem
    partitions: list[Partition]
    files: dict[str, list[str]]


def hive_partitions(uri: str) -> HiveFolder:
    """List the ``key=value`` partition folders under ``uri`` (one recursive listing).

    Every file must sit below the same sequence of keys (``dt=…/`` or ``dt=…/hh=…/``); folders below the
    last key are part of that partition. Names starting with ``_`` or ``.``, and folder markers
    (``dt=…_$folder$``), are skipped. Values are URL-decoded, as hive writes them.

    Args:
        uri (str): a local folder or ``s3://`` / ``gs://`` / ``hdfs://`` / ``file://`` URI.

    Raises:
        DataError: ``uri`` is not a folder, or its files sit under different keys (or beside partitions).

    Example::

        hive_partitions("s3://logs/clicks").partitions[-1].name   # "dt=20260107"
    """
    fs, root = filesystem_of(uri)
    root = root.rstrip("/") or "/"
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        raise DataError(f"partitioned data source {uri!r} is not a folder")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    found: dict[tuple[tuple[str, str], ...], str] = {}
    files: dict[tuple[tuple[str, str], ...], list[str]] = {}
    keys: tuple[str, ...] | None = None
    for info in infos:
        relative = info.path[len(root) :].lstrip("/")
        if hidden(relative):
            continue
        segments = relative.split("/")
        folders = segments if info.type == pafs.FileType.Directory else segments[:-1]
        values: list[tuple[str, str]] = []
        for segment in folders:
            m = _SEGMENT.match(segment)
            if m is None:
                break
            values.append((m.group(1), unquote(m.group(2))))
        if info.type == pafs.FileType.Directory:
            if len(values) == len(segments):  # a partition folder (maybe empty) or one above it
                found.setdefault(tuple(values), info.path)
            continue
        these = tuple(k for k, _ in values)
        if keys is not None and these != keys:
            raise DataError(
                f"partitioned data source {uri!r}: {info.path} lies under keys {list(these)}, other files "
                f"under {list(keys)}; every file must sit under the same key=value folders"
            )
        keys = these
        files.setdefault(tuple(values), []).append(info.path)
    if not keys:
        return HiveFolder(uri, fs, [], {})
    partitions = [Partition(v, path) for v, path in found.items() if len(v) == len(keys)]
    if any(tuple(k for k, _ in p.values) != keys for p in partitions):
        raise DataError(f"partitioned data source {uri!r}: partition folders nest different keys than {keys}")
    partitions = _sorted(partitions)
    return HiveFolder(uri, fs, partitions, {p.name: sorted(files.get(p.values, [])) for p in partitions})


def odps_partitions(table: Any, uri: str, prefix: str | None) -> list[Partition]:
    """The partitions of an ODPS table (below the URI's partition ``prefix``), in partition order.

    Args:
        table (Any): a pyodps table (``table_schema.partitions``, ``iterate_partitions(spec=)``).
        uri (str): the table's URI, for messages.
        prefix (str | None): the URI's partition spec (``dt=20260101``) or None.

    Raises:
        PartitionError: the table has no partition columns.
    """
    if not list(table.table_schema.partitions):
        raise PartitionError(f"data source {uri!r}: the ODPS table is not partitioned")
    parts = []
    for p in table.iterate_partitions(spec=prefix):
        spec = p.partition_spec
        parts.append(Partition(tuple((str(k), str(v)) for k, v in spec.kv.items()), str(spec)))
    return _sorted(parts)


# ------------------------------------------------------------------------------------------- reading
class PartitionedSource(PartedSource):
    """The selected partitions of a source read as one dataset: the parts of ``inner`` (files, or ODPS
    partitions) in partition order, each row carrying its partition's key values as string columns
    (after the data columns). A data column of the same name as a key is replaced by the key's value
    (the folder or partition is the truth). Shard ``i`` of ``k`` reads global rows ``[i*N//k, (i+1)*N//k)``
    and the shuffle permutes ``inner``'s units, as for any :class:`PartedSource`.

    Args:
        uri (str): the source as given.
        inner (PartedSource): the selected partitions' parts.
        partitions (list[Partition]): the selected partitions, in partition order.
        part_partition (list[int]): for each part of ``inner``, the index of its partition.
        selector (str): the selector, for messages.

    Example::

        src = open_source("data/logs", partitions="dt=20260101..20260103")
        src.schema().names[-1], src.num_rows()     # "dt", rows of those three days
    """

    def __init__(
        self,
        uri: str,
        inner: PartedSource,
        partitions: list[Partition],
        part_partition: list[int],
        selector: str,
    ) -> None:
        self.uri, self.inner, self.partitions, self.selector = uri, inner, partitions, selector
        self._part_partition = part_partition
        self.keys = partitions[0].keys
        self._schema: pa.Schema | None = None

    def schema(self) -> pa.Schema:
        """``inner``'s columns (less any named like a key), then each key as a string column."""
        if self._schema is None:
            data = [f for f in self.inner.schema() if f.name not in self.keys]
            self._schema = pa.schema([*data, *(pa.field(k, pa.string()) for k in self.keys)])
        return self._schema

    def schema_notes(self) -> list[str]:
        return self.inner.schema_notes()

    def column_gaps(self) -> dict[str, list[str]]:
        return self.inner.column_gaps()

    def part_partition(self, index: int) -> Partition:
        """The partition part ``index`` belongs to."""
        return self.partitions[self._part_partition[index]]

    def part_rows(self) -> list[int]:
        return self.inner.part_rows()

    def part_name(self, index: int) -> str:
        return self.inner.part_name(index)

    def part_units(self, index: int) -> list[int]:
        return self.inner.part_units(index)

    def read_part(
        self, piece: FileSlice, columns: list[str] | None, batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """``inner``'s rows of the piece, with the key columns of its partition added."""
        schema = self.schema()
        wanted = list(columns) if columns is not None else schema.names
        data = [c for c in wanted if c not in self.keys]
        # Rows are needed even when only key columns are asked for: read the narrowest data column.
        read = data or schema.names[:1]
        out_schema = pa.schema([schema.field(c) for c in wanted])
        values = {k: None if v == HIVE_NULL else v for k, v in self.part_partition(piece.file_index).values}
        for batch in self.inner.read_part(piece, read, batch_rows):
            n = batch.num_rows
            arrays = [
                pa.repeat(pa.scalar(values[c], pa.string()), n) if c in values else batch.column(c)
                for c in wanted
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def hive_files(folder: HiveFolder, partitions: list[Partition]) -> tuple[DataFiles, list[int]]:
    """The data files of ``partitions`` (in partition order) and, for each file, its partition's index.

    Raises:
        DataError: the partitions mix Parquet and CSV files, or hold no data file at all.
    """
    paths, owner = [], []
    for i, p in enumerate(partitions):
        for path in folder.files[p.name]:
            paths.append(path)
            owner.append(i)
    chosen = set(choose_data_files(paths, folder.uri))
    kept = [(path, i) for path, i in zip(paths, owner, strict=True) if path in chosen]
    if not kept:
        raise DataError(
            f"data source {folder.uri!r}: the selected partitions hold no data files ({_listing(partitions)})"
        )
    return DataFiles(folder.uri, folder.filesystem, [p for p, _ in kept]), [i for _, i in kept]
