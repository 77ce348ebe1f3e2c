"""The raw-value contract: what a missing or oddly typed value means, decided once for every path.

Every reader (Parquet, CSV/TSV, ODPS) and every scorer (the eager model, each export backend, the MLflow
pyfunc, ``recpipe predict``) hands its rows to FG, and FG first passes them through :func:`normalize`, so
the same value means the same thing at training and at serving. The rules (README, "Bad input"):

- **Missing** — a null, Python ``None``, a float ``NaN`` (pandas' missing value) and the empty string
  ``""`` are one thing: no value. An id feature is then absent (or its ``default_value``), a raw feature
  takes its ``default``, a history has zero items. As in TorchEasyRec's FG, where an empty input is a
  missing one. A whole column of ``None`` (Arrow type ``null``) is a column of missing values.
- **Absent column at serving** — a feature column a request does not carry is all missing (a client
  leaves optional columns out). At training a missing column is an error, as before.
- **Ids** — ``123``, ``"123"`` and ``123.0`` are the same id: integral floats (pandas turns an integer
  column with missing values into float64) become integers; a float with a fraction stays a bad id (a
  mod mapping) or a category of its own text (a hash mapping). pandas nullable and categorical dtypes,
  and object columns mixing ``None`` and numbers, are read as their values.
- ``inf`` in a raw feature, text that is not a number, negative or overflowing ids stay bad rows
  (:class:`~recpipe.features.fg.BadRowError`, or skipped and counted).

numpy and pyarrow only (pandas only when it is what the caller passed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import feature_output
from recpipe.data.types import DataError
from recpipe.features.columns import MAX_EXACT_INT, dictionary_cached, integral_ids, is_string
from recpipe.features.kinds.base import ColumnKind
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.spec import FeatureSpec, sub_value_positions

_NATURAL: dict[str, pa.DataType] = {
    "id": pa.int64(),
    "float": pa.float64(),
    "sequence": pa.string(),
    "text": pa.string(),
}


def column_kinds(spec: FeatureSpec, with_labels: bool = True) -> dict[str, ColumnKind]:
    """Every input column FG reads and how its raw values are read (``id``, ``float``, ``sequence`` or
    ``text``: each entry's feature kind says)."""
    kinds: dict[str, ColumnKind] = {}
    for entry in spec.fg_entries():
        for column, (kind, _) in feature_kind(entry.kind).columns(entry).items():
            if feature_output(column) is None:  # "feature:X" is derived by FG, never read from the rows
                # A column read as ids and as a number (an id feature and an expr of it) is read as ids:
                # integral floats (a DataFrame's nullable ints) become int64, which a number reader takes too.
                if not (kind == "float" and kinds.get(column) == "id"):
                    kinds[column] = kind
    if with_labels:
        for column in spec.labels:
            if kinds.get(column) != "id":  # a domain label that is an id feature's column too stays ids
                kinds[column] = "float"
        if spec.weight:
            kinds[spec.weight] = "float"
    return kinds


class ColumnContract(NamedTuple):
    """What :func:`normalize` reads of a spec, computed once by a caller that normalizes many batches:
    :func:`column_kinds` and ``FeatureSpec.label_only_columns()``; ``dictionary``: the columns whose dictionary
    arrays stay encoded (:class:`~recpipe.features.fg.FeatureGenerator`'s ``dictionary_columns``)."""

    kinds: dict[str, ColumnKind]
    label_only: set[str]
    dictionary: frozenset[str] = frozenset()
    # Each history column's item and sub-value delimiters and its sub-values' names: a list column of items is read
    # as the text it stands for (:func:`history_text`).
    histories: dict[str, tuple[str, str, tuple[str, ...]]] = {}


def history_delimiters(spec: FeatureSpec) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Each history column of ``spec`` → its item delimiter, sub-value delimiter and sub-values' names in item
    order (the sub-features' names: ``adgroup_id`` of the key ``click_50_seq__adgroup_id``)."""
    out = {}
    for s in spec.sequences:
        feats = [spec.feature(k) for k in s.sub_features]
        names: list[str] = []
        for f, at in zip(feats, sub_value_positions(feats), strict=True):
            if at == len(names):  # a vector sub-value's keys after its first read the same position
                name = f.name.removeprefix(f"{s.name}__")
                names.append(name.rsplit("__", 1)[0] if "index" in f.params else name)
        out[s.column] = (s.delimiter, s.sub_delimiter, tuple(names))
    return out


def normalize(
    batch: pa.RecordBatch, spec: FeatureSpec, with_labels: bool = True, contract: ColumnContract | None = None
) -> pa.RecordBatch:
    """``batch`` with every FG input column read by the contract above; other columns are untouched.

    Args:
        batch (pa.RecordBatch): raw rows.
        spec (FeatureSpec): which columns are ids, floats and histories.
        with_labels (bool): training rows (a missing column stays missing, for FG's column check) or
            serving rows (an absent feature column is all missing).
        contract (ColumnContract | None): the spec's columns for ``with_labels``, computed before (else here).
    """
    if contract is None:
        contract = ColumnContract(
            column_kinds(spec, with_labels), spec.label_only_columns(), histories=history_delimiters(spec)
        )
    names = list(batch.schema.names)
    arrays = list(batch.columns)
    changed = False
    for column, kind in contract.kinds.items():
        i = batch.schema.get_field_index(column)
        if i < 0:
            if with_labels or column in contract.label_only:
                continue
            names.append(column)
            arrays.append(pa.nulls(batch.num_rows, _NATURAL[kind]))
            changed = True
            continue
        arr = batch.column(i)
        if column in contract.histories and _is_list(arr.type):
            delimiter, sub_delimiter, sub_values = contract.histories[column]
            arr = history_text(arr, delimiter, sub_delimiter, column, sub_values)
        arr = normalize_column(arr, kind, column if column in contract.dictionary else None)
        if arr is not batch.column(i):
            arrays[i] = arr
            changed = True
    return pa.RecordBatch.from_arrays(arrays, names=names) if changed else batch


def normalize_column(arr: pa.Array, kind: ColumnKind, keep_dictionary: str | None = None) -> pa.Array:
    """One column by the contract; returns ``arr`` itself when nothing changes. ``keep_dictionary`` (the column's
    name): a dictionary of strings without an empty one (checked once per dictionary) stays encoded; otherwise a
    dictionary column is decoded first."""
    if pa.types.is_dictionary(arr.type):  # pandas categoricals, a shuffled window's hashed ids
        if (
            keep_dictionary is not None
            and is_string(arr.type.value_type)
            and not dictionary_cached(arr.dictionary, keep_dictionary, "empty", _has_empty)
        ):
            return arr
        arr = arr.dictionary_decode()
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), _NATURAL[kind])
    if pa.types.is_decimal(arr.type):
        # ODPS / Hive DECIMAL: a whole-number id as its exact text, else a float64
        arr = pc.cast(arr, pa.string() if kind == "id" and arr.type.scale == 0 else pa.float64())
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        empty = pc.equal(arr, "")
        if pc.any(empty).as_py():
            arr = pc.if_else(empty, pa.scalar(None, arr.type), arr)
        return arr
    if pa.types.is_floating(arr.type) and kind not in ("sequence", "text"):  # numeric text: a column error
        nan = pc.is_nan(arr)
        if pc.any(nan).as_py():
            arr = pc.if_else(nan, pa.scalar(None, arr.type), arr)
        return _float_ids(arr) if kind == "id" else arr
    return arr


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _item_text(values: pa.Array) -> pa.Array:
    """Values (numbers or text) as text, a null one empty (an empty item or sub-value).

    Raises:
        TypeError: values of another type.
    """
    if not (is_string(values.type) or pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TypeError(values.type)
    return pc.fill_null(values if is_string(values.type) else pc.cast(values, pa.string()), "")


def _relisted(lists: pa.Array, values: pa.Array) -> pa.Array:
    """``values``, one for each element of ``lists`` in order, grouped as ``lists`` groups its elements (a null
    list stays null)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))), pa.int32())
    return pa.ListArray.from_arrays(offsets, values, mask=pc.is_null(lists))


def _joined(lists: pa.Array, delimiter: str) -> pa.Array:
    """Each list of ``lists`` (of numbers or text) as its values' text (:func:`_item_text`) joined by
    ``delimiter``; a null list stays null."""
    return pc.binary_join(_relisted(lists, _item_text(pc.list_flatten(lists))), delimiter)


def history_text(
    arr: pa.Array, delimiter: str, sub_delimiter: str, column: str, names: Sequence[str] = ()
) -> pa.Array:
    """A history given as a list column (Parquet, ODPS ``ARRAY``, a JSON array) as the text it stands for:
    each item a value (``[11, 12]`` → ``"11|12"``), the list of its sub-values (``[[11, 3], [12, 4]]`` →
    ``"11\\x033|12\\x034"``), or a struct holding the sub-values ``names`` as fields (Spark's
    ``collect_list(struct(adgroup_id, cate_id))``; other fields are not read), numbers as their text; a null item
    or sub-value is empty, a null list no history.

    Raises:
        DataError: items of another type (maps, lists nested deeper), or structs lacking a sub-value's field,
            naming the column.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    item = arr.type.value_type
    if pa.types.is_struct(item):
        arr = _struct_items(arr, sub_delimiter, column, names)
        item = arr.type.value_type
    try:
        if _is_list(item):  # items of sub-values
            arr = _relisted(arr, pc.fill_null(_joined(pc.list_flatten(arr), sub_delimiter), ""))
        return _joined(arr, delimiter)
    except TypeError:
        raise DataError(
            f"column {column!r}: a history as a list column holds items of values or of lists of sub-values "
            f"(numbers or text), got {arr.type}"
        ) from None


def _struct_items(arr: pa.Array, sub_delimiter: str, column: str, names: Sequence[str]) -> pa.Array:
    """A list column of struct items → a list column of each item's sub-value text (``names``' fields joined)."""
    fields = [arr.type.value_type.field(i).name for i in range(arr.type.value_type.num_fields)]
    missing = [n for n in names if n not in fields]
    if not names or missing:
        raise DataError(
            f"column {column!r}: a history's struct items hold its sub-values by name {list(names)}; "
            f"the structs have fields {fields}" + (f", not {missing}" if missing else "")
        )
    flat = pc.list_flatten(arr)
    parts = []
    for n in names:
        try:
            parts.append(_item_text(flat.field(n)))
        except TypeError:
            raise DataError(
                f"column {column!r}: struct field {n!r} is {flat.field(n).type}; expected numbers or text"
            ) from None
    text = pc.binary_join_element_wise(*parts, sub_delimiter)
    text = pc.if_else(pc.is_null(flat), pa.scalar("", pa.string()), text)  # a null item: empty
    return _relisted(arr, text)


def _has_empty(dictionary: pa.Array) -> bool:
    return bool(pc.any(pc.equal(dictionary, "")).as_py())


def _float_ids(arr: pa.Array) -> pa.Array:
    """Integral floats → int64 (``123.0`` is id 123); any other float → its text, which a mod mapping
    refuses as a bad id and a hash mapping hashes as a category of its own."""
    ids = integral_ids(arr)
    return ids if ids is not None else pc.cast(arr, pa.string())


def to_arrow(rows: Any) -> pa.Table:
    """Raw rows as the clients send them → an Arrow table.

    Accepts a pyarrow Table / RecordBatch, a pandas DataFrame (any dtypes: nullable ``Int64``,
    categoricals, object columns mixing ``None``, numbers and text), a list of JSON records
    (``[{"user_id": 1, "price": null}, …]``) or a mapping of column → values.
    """
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if isinstance(rows, list) and all(isinstance(r, dict) for r in rows):
        return records_to_arrow(rows)
    import pandas as pd

    if isinstance(rows, list):
        rows = pd.DataFrame.from_records(rows)
    elif isinstance(rows, dict):
        rows = pd.DataFrame(rows)
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(
            f"raw rows must be a DataFrame, an Arrow table or JSON records, got {type(rows).__name__}"
        )
    arrays = [values_to_arrow(rows[c], str(c)) for c in rows.columns]
    return pa.Table.from_arrays(arrays, names=[str(c) for c in rows.columns])


def records_to_arrow(records: list[dict[str, Any]]) -> pa.Table:
    """JSON records (``[{"user_id": 1, "price": null}, …]``) → an Arrow table, column by column, without
    pandas: the columns in the order they first appear, a key absent from a record a null there.

    A column's values become one Arrow array as :func:`values_to_arrow` makes it. Unlike a DataFrame, an integer
    column with nulls stays integer (pandas makes it float64, where an id above 2**53 would lose digits).
    """
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    return pa.Table.from_arrays(
        [values_to_arrow([r.get(c) for r in records], str(c)) for c in names], names=[str(c) for c in names]
    )


def values_to_arrow(values: Any, column: str = "?") -> pa.Array:
    """One column's raw values (a list, a pandas Series) → an Arrow array: its own type where one holds them
    all (None and NaN null), else text (:func:`_as_text`); lists (a history's items, a multi-value id's values)
    mixing numbers and text are lists of text.

    Raises:
        DataError: lists nested to different depths in one column (``column`` named).
    """
    try:
        return pa.array(values, from_pandas=True)
    # an object column mixing numbers and text, or holding an integer no 64-bit type holds (a JSON id of 2**70
    # is its digits, as the same id sent as text)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        if any(_is_scalar_array(v) for v in values):
            # MLflow's server parses ``instances`` into object arrays of 0-d arrays (``array(None, dtype=object)``
            # for a JSON null): their values, or a null would be read as the text "None"
            return values_to_arrow([v.item() if _is_scalar_array(v) else v for v in values], column)
        if any(isinstance(v, (list, tuple)) for v in values):
            try:
                return pa.array([_as_texts(v) for v in values])
            except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
                raise DataError(
                    f"column {column!r}: its lists mix values and lists at one depth (a history's items are all "
                    f"values or all lists of sub-values): {err}"
                ) from None
        return pa.array([_as_text(v) for v in values], type=pa.string())


def _is_scalar_array(v: Any) -> bool:
    return isinstance(v, np.ndarray) and v.ndim == 0


def _as_texts(v: Any) -> Any:
    """``v`` with every value in it (at any depth of lists) as :func:`_as_text`'s text."""
    return [_as_texts(x) for x in v] if isinstance(v, (list, tuple)) else _as_text(v)


def _as_text(v: Any) -> str | None:
    import pandas as pd

    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and v == math.floor(v) and abs(v) < MAX_EXACT_INT:
        return str(int(v))
    return str(v)
