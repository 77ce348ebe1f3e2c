"""Per-row reference FG, written for clarity, not speed.

Tests compare the vectorized FG against it and ``benchmarks/fg_throughput.py`` uses it as the
baseline. It follows the same rules as :mod:`recpipe.features.fg`, one Python row at a time.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa

from recpipe.features.fg import FGOutput
from recpipe.features.hashing import fnv1a64_py, zch_key_py
from recpipe.features.spec import FeatureSpec, IdMapping

_UINT = re.compile(r"^[0-9]{1,18}$")
_FLOAT = re.compile(r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$")


class RowError(ValueError):
    """The row is bad: (column, what was expected)."""

    def __init__(self, column: str, expected: str):
        super().__init__(f"{column}: {expected}")
        self.column = column


def _missing(v: object) -> bool:
    """The raw-value contract (:mod:`recpipe.features.raw`): null, NaN and "" are a missing value."""
    return v is None or v == "" or (isinstance(v, float) and math.isnan(v))


def _id_value(v: object) -> object:
    """``123.0`` is id 123; another float is its text."""
    if isinstance(v, float):
        return int(v) if v == math.floor(v) and abs(v) < 2.0**53 else str(v)
    return v


def _canonical(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def map_id(v: object, m: IdMapping, column: str, zch: bool = False) -> int | None:
    v = None if _missing(v) else _id_value(v)
    if v is None and m.default_value is not None:
        v = m.default_value
    if v is None:
        return None
    if m.kind == "mod":
        if isinstance(v, str):
            if not _UINT.match(v):
                raise RowError(column, "id")
            v = int(v)
        if v < 0 or v >= 10**18:  # the range of text ids and history items
            raise RowError(column, "id")
        return zch_key_py(v) if zch else v % m.size
    if m.kind == "identity":  # pre-encoded: the value is the row
        if isinstance(v, str):
            if not _UINT.match(v):
                raise RowError(column, "id")
            v = int(v)
        if not 0 <= v < m.size:
            raise RowError(column, "id")
        return v
    if m.kind == "hash":
        return zch_key_py(_canonical(v)) if zch else fnv1a64_py(_canonical(v)) % m.size
    if m.kind == "vocab":
        s = _canonical(v)
        vocab = m.vocab or []
        return vocab.index(s) + 1 if s in vocab else m.unk_id
    raise ValueError(m.kind)


def to_float(v: object, default: float, column: str) -> float:
    if _missing(v):
        return default
    if isinstance(v, str):
        if not _FLOAT.match(v):
            raise RowError(column, "number")
        v = float(v)
    x = float(v)
    if not math.isfinite(x):
        raise RowError(column, "finite")
    return x


def _row(
    spec: FeatureSpec, r: dict, with_labels: bool
) -> tuple[list[list[int]], list[float], float, float | None]:
    per_key: dict[str, list[int]] = {}
    for f in spec.sparse:
        if f.sequence is not None:
            continue
        if f.boundaries is not None:
            x = to_float(r[f.column], f.raw_default, f.column)
            bucket = 0
            while bucket < len(f.boundaries) and f.boundaries[bucket] <= x:
                bucket += 1
            per_key[f.name] = [bucket]
        elif isinstance(r[f.column], str) and f.params.get("separator", "\x1d") in r[f.column]:
            # a multi-value id (recpipe.features.kinds.id): each non-empty piece, else the default
            pieces = [p for p in r[f.column].split(f.params.get("separator", "\x1d")) if p]
            if not pieces and f.mapping.default_value is not None:
                pieces = [f.mapping.default_value]
            pieces = pieces[: f.params.get("value_dim") or None]
            per_key[f.name] = [map_id(p, f.mapping, f.column, f.zch) for p in pieces]
        else:
            i = map_id(r[f.column], f.mapping, f.column, f.zch)
            per_key[f.name] = [] if i is None else [i]
    for s in spec.sequences:
        text = r.get(s.column)
        text = "" if _missing(text) else str(_id_value(text))
        items = text.split(s.delimiter) if text else []
        items = items[: s.max_length]
        subs = [[] for _ in s.sub_features]
        for item in items:
            parts = item.split(s.sub_delimiter)
            if len(parts) != len(s.sub_features) or (len(parts) == 1 and item == ""):
                raise RowError(s.column, "sub-values")
            for j, key in enumerate(s.sub_features):
                feature = spec.feature(key)
                mapping = feature.mapping
                value = parts[j]
                if value == "":
                    if mapping.default_value is None:
                        raise RowError(s.column, "non-empty sub-value")
                    value = mapping.default_value
                subs[j].append(map_id(value, mapping, s.column, feature.zch))
        for j, key in enumerate(s.sub_features):
            per_key[key] = subs[j]
    dense = []
    for d in spec.dense:
        x = to_float(r[d.column], d.default, d.column)
        if d.log_offset is not None:
            if x + d.log_offset <= 0:
                raise RowError(d.column, "log domain")
            x = math.log(x + d.log_offset)
        dense.append((x - d.mean) / d.std)
    labels = [0.0] * len(spec.labels)
    weight = None
    if with_labels:
        for t, column in enumerate(spec.labels):
            y = r[column]
            if _missing(y) or (isinstance(y, str) and not _FLOAT.match(y)):
                raise RowError(column, "label")
            labels[t] = float(y)
            if labels[t] not in (0.0, 1.0):
                raise RowError(column, "label")
        if spec.weight:
            weight = to_float(r[spec.weight], 1.0, spec.weight)
    return [per_key[k] for k in spec.sparse_keys()], dense, labels if spec.extra_labels else labels[0], weight


def rowwise_fg(
    spec: FeatureSpec, batch: pa.RecordBatch | pa.Table, with_labels: bool = True
) -> tuple[FGOutput, int]:
    """FG one row at a time; bad rows are skipped. Returns ``(output, rows_skipped)``."""
    keys = spec.sparse_keys()
    vals: list[list[int]] = [[] for _ in keys]
    lens: list[list[int]] = [[] for _ in keys]
    dense_rows, labels, weights = [], [], []
    skipped = 0
    for r in batch.to_pylist():
        try:
            per_key, dense, label, weight = _row(spec, r, with_labels)
        except RowError:
            skipped += 1
            continue
        for k, v in enumerate(per_key):
            vals[k].extend(v)
            lens[k].append(len(v))
        dense_rows.append(dense)
        labels.append(label)
        weights.append(weight)
    n = len(labels)
    out = FGOutput(
        dense=np.asarray(dense_rows, np.float32).reshape(n, len(spec.dense)),
        values=[np.asarray(v, np.int64) for v in vals],
        lengths=[np.asarray(v, np.int32) for v in lens],
        labels=np.asarray(labels, np.float32).reshape((n, len(spec.labels)) if spec.extra_labels else n),
        weights=np.asarray(weights, np.float32) if spec.weight else None,
    )
    return out, skipped
