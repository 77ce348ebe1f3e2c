"""Open any supported input as a :class:`Source`: Parquet, CSV/TSV (local or object store), ODPS, or
generated ``synthetic:`` data. The one place that knows the URI schemes.

Every source yields :class:`~recpipe.data.types.SourceBatch` es (an Arrow RecordBatch plus the file and
first row it came from) for one :class:`~recpipe.data.sharding.Shard`; the union over the shards of one
count is exactly the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlparse

from recpipe.config import CsvOptions
from recpipe.data.csv import CsvSource
from recpipe.data.files import DataFiles, detect_format, resolve_files
from recpipe.data.odps import OdpsSource, parse_odps_uri, require_credentials
from recpipe.data.parquet import ParquetSource
from recpipe.data.partitions import (
    PartitionedSource,
    hive_files,
    hive_partitions,
    odps_partitions,
    parse_selector,
    select,
)
from recpipe.data.synthetic import generate
from recpipe.data.types import PartedSource

SYNTHETIC = "synthetic:"
ODPS = "odps://"
# Options of each synthetic kind besides rows and seed: keyword arguments of recpipe.data.synthetic.generate.
SYNTHETIC_OPTIONS = {
    "taobao": ("users", "ads", "days", "start"),
    "criteo": ("max_vocab", "hashed", "pairs", "days", "start"),
    "config": ("path", "nulls", "vocab", "lists"),
    "retrieval": ("users", "items", "dim", "ranking"),
}
# Options that are not integers: synthetic:config's config path (generate's ``config``) and null share.
_TEXT_OPTIONS = {"path": "config"}
_FLOAT_OPTIONS = ("nulls",)
# Column layouts a kind can generate, as URI query suffixes: criteo's Kaggle one and TorchEasyRec's
# (hashed=1: int_k / cat_k, what its example configs read). synthetic_source_for tries each.
SYNTHETIC_LAYOUTS = {"taobao": ("",), "criteo": ("", "&hashed=1")}


class SyntheticSource(NamedTuple):
    """A parsed ``synthetic:`` URI: what :func:`recpipe.data.synthetic.generate` takes.

    Args:
        kind (str): ``"taobao"``, ``"criteo"``, ``"config"`` or ``"retrieval"``.
        rows (int): rows to generate.
        seed (int): generator seed.
        options (dict[str, Any]): the kind's own options, as :func:`recpipe.data.synthetic.generate` takes them
            (``users``, ``ads``; ``max_vocab``; ``config`` (the URI's ``path``), ``nulls``, ``vocab``, ``lists``).
    """

    kind: str
    rows: int
    seed: int
    options: dict[str, Any]


def parse_synthetic(uri: str) -> SyntheticSource:
    """``synthetic:taobao?rows=100000&seed=1`` → ``SyntheticSource("taobao", 100000, 1, {})``.

    Besides ``rows`` and ``seed``, taobao takes ``users`` and ``ads`` (catalogue sizes) and criteo
    ``max_vocab`` (vocabulary cap), ``hashed`` (1: TorchEasyRec's ``int_k``/``cat_k`` columns) and ``pairs``
    (0: no pair effects in the click model); both take ``days`` (data with time: the rows split over that many
    days in ``dt=YYYYMMDD/`` folders, ads born and retiring, :mod:`recpipe.data.synthetic.daily`) and ``start``
    (its first day, ``YYYYMMDD``, default 20260101); ``synthetic:config?path=<config.yaml>`` (rows for every input
    column of that config, :mod:`recpipe.data.synthetic.config`) takes ``nulls`` (share of nulls, default
    0.01), ``vocab`` (values per id space) and ``lists`` (1: list columns for multi-value ids); anything
    else is an error naming the allowed keys; ``synthetic:retrieval`` takes ``users``, ``items``, ``dim`` and ``ranking`` (1: the same world's impressions
    for a ranker; :mod:`recpipe.data.synthetic.retrieval`; its item table is ``<folder>/_items.parquet``).

    Example::

        parse_synthetic("synthetic:config?path=configs/rich_taobao_small.yaml&rows=5000&nulls=0.02")
        # SyntheticSource("config", 5000, 0, {"config": "configs/rich_taobao_small.yaml", "nulls": 0.02})

    Raises:
        ValueError: an unknown kind or option, a value that is not an integer, fewer than 10 rows, a config
            kind without ``path`` or with a path that is not a file.
    """
    u = urlparse(uri)
    kind = u.path or u.netloc
    if kind not in SYNTHETIC_OPTIONS:
        raise ValueError(
            f"data source {uri!r}: synthetic kind must be 'taobao', 'criteo', 'config' or 'retrieval', got {kind!r}"
        )
    q = parse_qs(u.query)
    allowed = ("rows", "seed", *SYNTHETIC_OPTIONS[kind])
    unknown = sorted(set(q) - set(allowed))
    if unknown:
        raise ValueError(
            f"data source {uri!r}: unknown option(s) {unknown}; synthetic {kind} takes {list(allowed)}"
        )
    values: dict[str, Any] = {}
    for key, texts in q.items():
        if key in _TEXT_OPTIONS:
            values[_TEXT_OPTIONS[key]] = texts[-1]
            continue
        number = float if key in _FLOAT_OPTIONS else int
        try:
            values[key] = number(texts[-1])
        except ValueError:
            what = "a number" if number is float else "an integer"
            raise ValueError(f"data source {uri!r}: {key} must be {what}, got {texts[-1]!r}") from None
    rows = values.pop("rows", 100_000)
    seed = values.pop("seed", 0)
    if rows < 10:
        raise ValueError(f"data source {uri!r}: rows must be >= 10, got {rows}")
    if kind == "config":
        path = values.get("config")
        if not path:
            raise ValueError(f"data source {uri!r}: synthetic:config needs path=<config.yaml>")
        if not Path(path).is_file():
            raise ValueError(f"data source {uri!r}: config file {path!r} does not exist")
    return SyntheticSource(kind, rows, seed, values)


def check_source(uri: str, partitions: str | None = None) -> None:
    """Fail fast, before any data moves, when ``uri`` cannot be read: a malformed ``synthetic:`` spec,
    an ODPS table URI that is malformed or has no credentials in the environment, a path/URI with
    no data files, or a ``partitions`` selector that does not parse (or, for a folder, selects nothing).

    Args:
        uri (str): the data source.
        partitions (str | None): a partition selector (:mod:`recpipe.data.partitions`); None: all the data.

    Raises:
        ValueError: why ``uri`` is unreadable (``DataError`` for missing files, ``PartitionError`` for the
            selector).
        OdpsCredentialsError: an ODPS table without credentials in the environment.

    Example::

        check_source("synthetic:taobao?rows=1000")    # fine
        check_source("synthetic:config?path=my.yaml")  # SyntheticConfigError: a kind without a generator
        check_source("/no/such/folder")                # DataError: no such file or folder
        check_source("data/logs", partitions="dt=20990101")  # PartitionError: selects nothing; it has …
    """
    if not uri or not uri.strip():
        raise ValueError("the data source is empty")
    if partitions is not None:
        parse_selector(partitions)
        if not uri.startswith((SYNTHETIC, ODPS)):  # a folder is listed; a table is listed when opened
            resolve_files(uri)
            select(hive_partitions(uri).partitions, partitions, uri)
            return
    if uri.startswith(SYNTHETIC):
        syn = parse_synthetic(uri)
        if syn.kind == "config":  # the config loads and every feature's kind has a generator
            from recpipe.config import load_config
            from recpipe.data.synthetic.config import plan_columns

            plan_columns(load_config(syn.options["config"]))
    elif uri.startswith(ODPS):
        parse_odps_uri(uri)
        require_credentials()
    else:
        resolve_files(uri)


def open_source(
    uri: str,
    csv: CsvOptions | None = None,
    generate_into: str | Path | None = None,
    partitions: str | None = None,
    **odps_kwargs: Any,
) -> PartedSource:
    """The :class:`Source` for ``uri`` (only the partitions ``partitions`` selects, when given): a
    :class:`~recpipe.data.types.PartedSource`, whose ``schema_notes()`` and ``column_gaps()`` say how files of
    different schemas were read together.

    ``synthetic:`` URIs (:func:`parse_synthetic`) are generated into the folder ``generate_into`` first,
    then read as Parquet. ``odps://`` URIs open an :class:`OdpsSource` (``odps_kwargs``, e.g. ``client=``,
    go to it). Anything
    else is resolved to files (a file, a folder, a glob; local or ``s3://``/``gs://``/``hdfs://``) whose
    format comes from the first file's suffix (``.parquet``/``.pq``; ``.csv``/``.tsv``/``.txt``, optionally
    compressed) or, without one, its leading bytes (``PAR1`` means Parquet, otherwise CSV).

    Args:
        uri (str): where the data is.
        csv (CsvOptions | None): how to parse CSV files (ignored for Parquet and ODPS).
        generate_into (str | Path | None): where a ``synthetic:`` source is written (required for one).
        partitions (str | None): a partition selector (``dt=20260101..20260107``, ``latest``, ``last:7``;
            :mod:`recpipe.data.partitions`) over a hive-style folder (also a generated one) or a
            partitioned ODPS table: a :class:`PartitionedSource` of those partitions, each key a string
            column. None: the source as it is (every file; the URI's ODPS partition).
        **odps_kwargs: keyword arguments for :class:`OdpsSource`.

    Raises:
        DataError: nothing exists at ``uri``, or a folder holds no data files.
        PartitionError: ``partitions`` does not parse, names no key of the source or selects nothing.
        ValueError: a malformed ``synthetic:`` URI, or one without ``generate_into``.

    Example::

        open_source("runs/data/train").num_rows()                       # Parquet folder
        open_source("criteo/day_0", csv=criteo_csv_options())           # raw Criteo TSV
        open_source("odps://ads/tables/taobao/dt=20240101", client=odps_client)
        open_source("synthetic:taobao?rows=5000", generate_into="runs/x/raw")
        open_source("s3://logs/clicks", partitions="last:7")            # dt=…/ folders, a dt column
    """
    if partitions is not None:
        parse_selector(partitions)  # a malformed selector fails before anything is generated or listed
    if uri.startswith(SYNTHETIC):
        syn = parse_synthetic(uri)
        if generate_into is None:
            raise ValueError(f"data source {uri!r}: a synthetic source needs a folder to generate into")
        generate(syn.kind, syn.rows, generate_into, seed=syn.seed, **syn.options)
        return open_source(str(generate_into), csv=csv, partitions=partitions)
    if uri.startswith(ODPS):
        source = OdpsSource(uri, **odps_kwargs)
        if partitions is None:
            return source
        chosen = select(odps_partitions(source.table(), uri, source.ref.partition), partitions, uri)
        inner = OdpsSource(uri, partitions=[p.location for p in chosen], **odps_kwargs)
        return PartitionedSource(uri, inner, chosen, list(range(len(chosen))), partitions)
    if odps_kwargs:
        raise ValueError(f"ODPS options {sorted(odps_kwargs)} given for a non-ODPS uri {uri!r}")
    files = resolve_files(uri)
    if partitions is None:
        return _file_source(uri, files, csv)
    folder = hive_partitions(uri)
    chosen = select(folder.partitions, partitions, uri)
    selected, owner = hive_files(folder, chosen)
    return PartitionedSource(uri, _file_source(uri, selected, csv), chosen, owner, partitions)


def _file_source(uri: str, files: DataFiles, csv: CsvOptions | None) -> PartedSource:
    if detect_format(files) == "parquet":
        return ParquetSource(uri, files)
    return CsvSource(uri, csv, files)
