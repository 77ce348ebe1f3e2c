"""Reading a scoring request's body (the part of MLflow's scoring protocol every kind of model shares): JSON
``dataframe_records`` / ``dataframe_split`` or a CSV / Parquet body → Arrow rows, ``params`` checked, and the
:class:`RequestError` (an HTTP status and a message naming what is wrong) a bad request raises. Used by the scoring
server (:mod:`recpipe.export.server`) and by each kind's invoker (:mod:`recpipe.export.pair`)."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa

from recpipe.data.types import DataError
from recpipe.export.scorer import OUTPUTS
from recpipe.features.raw import records_to_arrow, values_to_arrow

JSON = "application/json"
CSV = "text/csv"
PARQUET = "application/vnd.apache.parquet"
# MLflow's scoring protocol's row forms: pandas' records and split orients, and TF Serving's row (``instances``: a
# list of row objects) and columnar (``inputs``: an object of column → values) forms.
ROW_FORMATS = ("dataframe_records", "dataframe_split", "instances", "inputs")
PARAMS = ("output", "context")
# A retrieval model's (two towers: each user row's top-K items): ``k`` (default recpipe.export.retriever.DEFAULT_K).
RETRIEVAL_PARAMS = ("k",)


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message naming what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message: str) -> RequestError:
    return RequestError(400, f"bad request: {message}")


def parse_json_body(body: bytes) -> tuple[pa.Table, str, str | None]:
    """A JSON body → its rows as Arrow, the output asked for and the context (None: none).

    Raises:
        RequestError: not JSON, not an object, not exactly one of :data:`ROW_FORMATS`, a malformed
            ``dataframe_split``, an unknown key or parameter, a parameter of the wrong type.
    """
    rows, params = read_json_body(body)
    output, context = _params(params)
    return rows, output, context


def read_json_body(body: bytes) -> tuple[pa.Table, Any]:
    """A JSON body → its rows as Arrow and its ``params`` as sent (None: none), for the model's kind to read.

    Raises:
        RequestError: not JSON, not an object, not exactly one of :data:`ROW_FORMATS`, a malformed
            ``dataframe_split``, an unknown key.
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"the body is not JSON ({err})") from None
    if not isinstance(doc, dict):
        raise bad_request(
            f"the body must be a JSON object with one of {list(ROW_FORMATS)}, got {type(doc).__name__}"
        )
    unknown = sorted(set(doc) - {*ROW_FORMATS, "params"})
    if unknown:
        raise bad_request(
            f"unknown keys {unknown}; the body holds one of {list(ROW_FORMATS)} and optionally 'params'"
        )
    formats = [k for k in ROW_FORMATS if k in doc]
    if len(formats) != 1:
        raise bad_request(
            f"the body must hold exactly one of {list(ROW_FORMATS)}, got {formats or 'neither'}"
        )
    rows = doc[formats[0]]
    try:
        if formats[0] in ("dataframe_records", "instances"):
            table = records_table(rows, formats[0])
        elif formats[0] == "inputs":
            table = columns_table(rows)
        else:
            table = split_table(rows)
    except DataError as err:  # a column's values that make no Arrow column (lists nested unevenly)
        raise bad_request(str(err)) from None
    return table, doc.get("params")


def _params(params: Any) -> tuple[str, str | None]:
    params = read_params(params, PARAMS, "the model")
    output = params.get("output") or "probability"
    if output not in OUTPUTS:
        raise bad_request(f"params.output must be one of {list(OUTPUTS)}, got {output!r}")
    context = params.get("context")
    if context is not None and not isinstance(context, str):
        raise bad_request(
            f"params.context must be a string (a JSON object's text), got {type(context).__name__}"
        )
    return output, context


def read_params(params: Any, allowed: tuple[str, ...], reader: str) -> dict[str, Any]:
    """A request's ``params`` (None: none) checked to be an object of ``allowed`` keys only.

    Raises:
        RequestError: not an object, or an unknown key (naming what ``reader`` reads).
    """
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise bad_request(f"'params' must be an object, got {type(params).__name__}")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise bad_request(f"unknown params {unknown}; {reader} reads {list(allowed)}")
    return params


def whole_param(
    params: dict[str, Any], name: str, default: int, high: int, bound: str, what: str = ""
) -> int:
    """``params[name]`` (``default`` when absent), a whole number in ``1..high``.

    Raises:
        RequestError: not a whole number, or out of range (naming ``what`` it is and the ``bound``).
    """
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise bad_request(
            f"params.{name}{f' ({what})' if what else ''} must be a whole number in 1..{high} ({bound}), got "
            f"{value!r}"
        )
    return value


def records_table(rows: Any, form: str = "dataframe_records") -> pa.Table:
    """``dataframe_records`` (or ``instances``, ``form``): a list of row objects."""
    if not isinstance(rows, list):
        raise bad_request(f"{form} must be a list of row objects, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise bad_request(f"{form} row {i} must be an object (column -> value), got {type(row).__name__}")
    return records_to_arrow(rows)


def columns_table(columns: Any) -> pa.Table:
    """``inputs``: an object of column → its values, one per row (every column as many)."""
    if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
        got = (
            type(columns).__name__
            if not isinstance(columns, dict)
            else "an object whose values are not all lists"
        )
        raise bad_request(f"inputs must be an object of column -> list of values (one per row), got {got}")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise bad_request(f"inputs' columns must hold as many values each, got {lengths}")
    return pa.Table.from_arrays(
        [values_to_arrow(values, name) for name, values in columns.items()], names=list(columns)
    )


def split_table(split: Any) -> pa.Table:
    """``dataframe_split``: ``{"columns": [...], "data": [[...], ...]}`` (an ``index`` is allowed and unused)."""
    if not isinstance(split, dict):
        raise bad_request(
            f"dataframe_split must be an object with 'columns' and 'data', got {type(split).__name__}"
        )
    unknown = sorted(set(split) - {"columns", "data", "index"})
    if unknown:
        raise bad_request(
            f"dataframe_split has unknown keys {unknown}; it holds 'columns', 'data' (and 'index')"
        )
    columns, data = split.get("columns"), split.get("data")
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise bad_request("dataframe_split.columns must be a list of column names")
    if len(set(columns)) != len(columns):
        raise bad_request(f"dataframe_split.columns names a column twice: {columns}")
    if not isinstance(data, list):
        raise bad_request("dataframe_split.data must be a list of rows (lists of values)")
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            raise bad_request(
                f"dataframe_split.data row {i} must be a list of {len(columns)} values, got {got}"
            )
    return pa.Table.from_arrays(
        [values_to_arrow([row[j] for row in data], columns[j]) for j in range(len(columns))], names=columns
    )


def file_table(body: bytes, mime: str) -> pa.Table:
    """A CSV (read as MLflow's server reads it, pandas) or Parquet body → rows."""
    from recpipe.features.raw import to_arrow

    try:
        if mime == PARQUET:
            import pyarrow.parquet as pq

            return pq.read_table(io.BytesIO(body))
        import pandas as pd

        return to_arrow(pd.read_csv(io.BytesIO(body)))
    except (ValueError, OSError, pa.ArrowException) as err:
        raise bad_request(f"the {mime} body cannot be read: {err}") from None
