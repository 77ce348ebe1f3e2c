"""Does the data fit the config? The columns FG reads, checked against a source's schema before any row
is read, every problem listed at once.

A config whose features name columns the data lacks (or holds in a type FG cannot read) would otherwise
fail only when the first batch reaches FG, after the model is built. numpy and pyarrow only (no torch).
"""

from __future__ import annotations

import tempfile

import pyarrow as pa

from recpipe.config import CsvOptions
from recpipe.config.features import feature_output
from recpipe.data.types import DataError
from recpipe.features.kinds.base import ANY, HISTORY, IDS, LIST_OF, NUMERIC, TEXT
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.spec import FeatureSpec, SequenceFeature


class SchemaMismatch(DataError):
    """The data lacks columns the config reads, or holds them in types FG cannot read.

    Args:
        where (str): the data (a URI), for the message.
        problems (list[str]): one line per problem.
        names (list[str]): every column the data has.
    """

    def __init__(self, where: str, problems: list[str], names: list[str]) -> None:
        self.where, self.problems, self.names = where, problems, names
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(
            f"data {where!r} does not fit the config ({len(problems)} problem(s)):\n{lines}\n"
            f"  the data has {len(names)} columns: {names}"
        )


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_number(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)
    )


def _readable(t: pa.DataType, need: str) -> bool:
    if pa.types.is_null(t):  # an all-null column: every row takes the feature's default
        return True
    if need == HISTORY:  # text, or items: values, or lists of sub-values (recpipe.features.raw.history_text)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            t = t.value_type
            if pa.types.is_struct(t):  # sub-values by name, checked by FG
                return True
            if pa.types.is_list(t) or pa.types.is_large_list(t):
                t = t.value_type
            return _is_string(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
        return _is_string(t)
    if need.endswith(LIST_OF):  # a multi-value feature: its values, or a list of them
        need = need.removesuffix(LIST_OF)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            t = t.value_type
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        return need == ANY
    if need == NUMERIC:
        return _is_number(t) or _is_string(t)
    # A DECIMAL(p, 0) holds whole numbers; a float column is pandas' integers with nulls (FG checks each value).
    if need == IDS:
        return (
            pa.types.is_integer(t)
            or _is_string(t)
            or pa.types.is_floating(t)
            or (pa.types.is_decimal(t) and t.scale == 0)
        )
    if need == TEXT:
        return _is_string(t)
    return True


def required_columns(spec: FeatureSpec, with_labels: bool = True) -> dict[str, tuple[str, str]]:
    """``column → (what reads it, the type it needs)`` for every column FG reads.

    Args:
        spec (FeatureSpec): the features (fitted or built from the config).
        with_labels (bool): include the label, weight and group columns (training, evaluation).
    """
    need: dict[str, tuple[str, str]] = {}
    for e in spec.fg_entries():
        reader = f"{'sequence' if isinstance(e, SequenceFeature) else 'feature'} {e.name!r}"
        for column, (_, what) in feature_kind(e.kind).columns(e).items():
            if feature_output(column) is None:  # "feature:X": FG derives it from X's column
                need.setdefault(column, (reader, what))
    if with_labels:
        for column in spec.labels:
            need.setdefault(column, ("the label", NUMERIC))
        if spec.weight:
            need.setdefault(spec.weight, ("the weight", NUMERIC))
        if spec.group_column:
            need.setdefault(spec.group_column, ("the GAUC group (data.group_column)", ANY))
    return need


def schema_problems(spec: FeatureSpec, schema: pa.Schema, with_labels: bool = True) -> list[str]:
    """Every reason ``schema`` cannot feed ``spec``: one line for all missing columns, one per bad type.

    Args:
        spec (FeatureSpec): the features.
        schema (pa.Schema): the data's schema (all its columns).
        with_labels (bool): the label, weight and group columns are needed too.

    Example::

        >>> schema_problems(spec, pa.schema([("label", pa.int8()), ("I1", pa.float32())]))
        ["missing columns ['I2', ..., 'C26'] (read by feature 'I2', ...)"]
    """
    need = required_columns(spec, with_labels)
    missing = [c for c in need if schema.get_field_index(c) < 0]
    problems = []
    if missing:
        readers = ", ".join(need[c][0] for c in missing[:3]) + (", …" if len(missing) > 3 else "")
        problems.append(f"missing columns {missing} (read by {readers})")
    for column, (reader, kind) in need.items():
        i = schema.get_field_index(column)
        if i >= 0 and not _readable(schema.field(i).type, kind):
            problems.append(f"column {column!r} ({reader}): expected {kind}, got {schema.field(i).type}")
    return problems


def check_schema(spec: FeatureSpec, schema: pa.Schema, where: str, with_labels: bool = True) -> None:
    """Raise :class:`SchemaMismatch` listing every problem of :func:`schema_problems`.

    Args:
        spec (FeatureSpec): the features.
        schema (pa.Schema): the data's schema.
        where (str): the data, for the message.
        with_labels (bool): the label, weight and group columns are needed too.
    """
    problems = schema_problems(spec, schema, with_labels)
    if problems:
        raise SchemaMismatch(where, problems, list(schema.names))


def source_schema(uri: str, csv: CsvOptions | None = None) -> pa.Schema:
    """The schema of the data at ``uri`` without reading its rows (Parquet footers, a CSV's first block;
    a ``synthetic:`` source generates 10 rows of its kind into a temporary folder).

    Args:
        uri (str): any source :func:`recpipe.data.sources.open_source` reads.
        csv (CsvOptions | None): CSV parsing options.
    """
    from recpipe.data.sources import SYNTHETIC, open_source, parse_synthetic

    if uri.startswith(SYNTHETIC):
        from recpipe.data.synthetic import generate

        syn = parse_synthetic(uri)
        with tempfile.TemporaryDirectory(prefix="recpipe-schema-") as tmp:
            # Options may change the columns (criteo's hashed, days' time_stamp); one day has every column.
            options = {**syn.options, **({"days": 1} if syn.options.get("days") else {})}
            generate(syn.kind, 10, tmp, **options)
            return open_source(tmp).schema()
    return open_source(uri, csv=csv).schema()


def check_source(
    spec: FeatureSpec,
    uri: str,
    csv: CsvOptions | None = None,
    with_labels: bool = True,
    partitions: str | None = None,
) -> None:
    """:func:`check_schema` of the data at ``uri`` (:func:`source_schema`; only the ``partitions`` selected,
    when given), and no column the config reads missing from some of its files (files of different schemas
    read as one dataset give such a file's rows nulls: :mod:`recpipe.data.parquet`).

    Raises:
        SchemaMismatch: the data does not fit ``spec``.
        DataError: nothing to read at ``uri``.
    """
    from recpipe.data.sources import SYNTHETIC, open_source

    if uri.startswith(SYNTHETIC):
        check_schema(spec, source_schema(uri, csv), uri, with_labels)
        return
    source = open_source(uri, csv=csv, partitions=partitions)
    schema = source.schema()
    problems = schema_problems(spec, schema, with_labels)
    need = required_columns(spec, with_labels)
    for column, files in source.column_gaps().items():
        if column in need:
            problems.append(
                f"column {column!r} ({need[column][0]}) is missing from {len(files)} file(s), e.g. {files[0]}: "
                "its rows there would read as missing; select data that has it (data.partitions)"
            )
    if problems:
        raise SchemaMismatch(uri, problems, list(schema.names))
