"""Kind ``expr`` (TorchEasyRec's ``expr_feature``): an arithmetic expression over numeric columns, e.g.
``u_age == i_age ? 1 : 0`` or ``sigmoid(pv / (1 + click))``, as one dense column or, with ``boundaries``, a
bucket id.

The expression is parsed once (:mod:`recpipe.config.expr`: a tree of whitelisted operators, functions and
constants, never ``eval``) and evaluated over whole numpy columns. A variable is a number per row, or, as an
argument of a vector function (``dot(a, b)``, ``len(a)``, ``reduce_sum(a)``…), a vector: a list column or text
split by ``separator``. Intermediate values follow IEEE arithmetic (``1/0`` is ``inf``, ``log(-1)`` NaN,
which ``isnan`` sees), so the choices recpipe makes (TorchEasyRec's docs leave them open) are about the
result: a row with a missing input (null, NaN, ``""``, an empty vector), vectors of different lengths
without ``fill_missing``, or a value that is not finite takes ``default_value`` (None: no id; a dense 0).
Text that is not a number in an input is a bad row of its column.

Example::

    # expression "a+b", a = [0.2, None], b = [0.2, 0.2], default_value "0.1"  →  [0.4, 0.1]
    KIND.dense(spec.dense[0], batch)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from recpipe.config.expr import CONSTANTS, Node, Parsed, parse_expression
from recpipe.config.features import ExprFeatureConfig
from recpipe.features.columns import BadRows, present_mask, to_float
from recpipe.features.kinds import base as kinds
from recpipe.features.kinds import values as vals
from recpipe.features.spec import DenseFeature, SparseFeature

EARTH_RADIUS_KM = 6371.0


@lru_cache(maxsize=256)
def parsed(expression: str) -> Parsed:
    return parse_expression(expression)


def build(f: ExprFeatureConfig, parts: kinds.SpecParts) -> None:
    variables = f.input_columns()
    params = {
        "expression": f.expression,
        "variables": variables,
        "separator": f.separator,
        "fill_missing": f.fill_missing,
    }
    vals.build_value(f, parts, "expr", variables[0], variables[1:], params)


def needs(f: ExprFeatureConfig) -> kinds.FitNeeds:
    return vals.value_needs(f)


class _Vector:
    """A vector variable over ``n`` rows: ``values`` at sorted ``rows``, ``count`` and ``start`` per row."""

    def __init__(self, rows: np.ndarray, values: np.ndarray, n: int) -> None:
        self.rows, self.values = rows, values
        self.count = np.bincount(rows, minlength=n)[:n]
        self.start = np.cumsum(self.count) - self.count


def evaluate(
    e: SparseFeature | DenseFeature, batch: pa.RecordBatch
) -> tuple[np.ndarray, np.ndarray, list[BadRows]]:
    """(value per row, whether the row has one, bad rows) of the entry's expression over ``batch``."""
    p = parsed(e.params["expression"])
    n = batch.num_rows
    missing = np.zeros(n, bool)
    bads: list[BadRows] = []
    scalars: dict[str, np.ndarray] = {}
    vectors: dict[str, _Vector] = {}
    for name in e.params["variables"]:
        arr = batch.column(name)
        if name in p.vectors:
            rows, items = vals.multi_values(arr, e.params["separator"], name)
            x, keep, bad = vals.numbers(items, rows, name, f"an item of vector {name!r}")
            if bad is not None:
                bads.append(bad)
            vec = _Vector(rows[keep], x[keep], n)
            missing |= vec.count == 0
            vectors[name] = vec
        else:
            x, bad = to_float(arr, 0.0, name)
            if bad is not None:
                bads.append(bad)
            missing |= ~present_mask(arr)
            scalars[name] = x
    fill = e.params.get("fill_missing")
    with np.errstate(all="ignore"):
        value, unpaired = _Eval(scalars, vectors, n, fill).run(p.root)
        value = np.broadcast_to(np.asarray(value, np.float64), (n,)).copy()
    has = ~missing & ~unpaired & np.isfinite(value)
    return value, has, bads


class _Eval:
    def __init__(
        self, scalars: dict[str, np.ndarray], vectors: dict[str, _Vector], n: int, fill: float | None
    ):
        self.scalars, self.vectors, self.n, self.fill = scalars, vectors, n, fill
        self.unpaired = np.zeros(n, bool)

    def run(self, node: Node) -> tuple[np.ndarray, np.ndarray]:
        return self.eval(node), self.unpaired

    def eval(self, node: Node) -> np.ndarray:  # noqa: C901 - one branch per operator
        op = node.op
        if op == "num":
            return np.float64(node.value)
        if op == "const":
            return np.float64(CONSTANTS[node.name])
        if op == "var":
            return self.scalars[node.name]
        if op == "call":
            return self.call(node)
        args = [self.eval(a) for a in node.args]
        if op == "neg":
            return -args[0]
        if op == "if":
            return np.where(args[0] != 0, args[1], args[2])
        a, b = args
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return np.divide(a, b)
        if op == "^":
            return np.power(a, b)
        if op in _COMPARE:
            return _COMPARE[op](a, b).astype(np.float64)
        if op == "&&":
            return ((a != 0) & (b != 0)).astype(np.float64)
        if op == "||":
            return ((a != 0) | (b != 0)).astype(np.float64)
        ia, ib = _as_int(a), _as_int(b)
        return (ia | ib if op == "|" else ia & ib).astype(np.float64)

    def call(self, node: Node) -> np.ndarray:
        name = node.name
        if name in _VECTOR_REDUCE or name in ("dot", "euclid_dist", "corr"):
            return self.vector_call(name, [self.vectors[a.name] for a in node.args])
        args = [self.eval(a) for a in node.args]
        if name in _UNARY:
            return _UNARY[name](args[0])
        if name == "roundp":
            scale = np.power(10.0, args[1])
            return _round(args[0] * scale) / scale
        if name == "mod":
            return np.fmod(args[0], args[1])
        if name in ("sphere_dist", "haversine"):
            return _distance(name, *args)
        stacked = np.stack(np.broadcast_arrays(*[np.asarray(a, np.float64) for a in args]))
        if name == "min":
            return stacked.min(axis=0)
        if name == "max":
            return stacked.max(axis=0)
        total = stacked.sum(axis=0)
        return total if name == "sum" else total / len(args)

    def vector_call(self, name: str, vecs: list[_Vector]) -> np.ndarray:
        n = self.n
        if len(vecs) == 1:
            v = vecs[0]
            if name == "len":
                return v.count.astype(np.float64)
            if name in ("reduce_sum", "reduce_mean", "reduce_min", "reduce_max"):
                return vals.reduce_rows(v.rows, v.values, n, name.removeprefix("reduce_"))[0]
            if name == "reduce_prod":
                out = np.ones(n)
                starts = v.start[v.count > 0]
                if starts.size:
                    out[v.count > 0] = np.multiply.reduceat(v.values, starts)
                return out
            total = np.bincount(v.rows, weights=v.values * v.values, minlength=n)[:n]
            if name == "squared_norm":
                return total
            if name == "l2_norm":
                return np.sqrt(total)
            mean = vals.reduce_rows(v.rows, v.values, n, "mean")[0]
            dev = np.bincount(v.rows, weights=(v.values - mean[v.rows]) ** 2, minlength=n)[:n]
            var = dev / (v.count if name in ("variance", "std_dev") else v.count - 1)
            return np.sqrt(var) if name.endswith("std_dev") else var
        a, b, rows = self.paired(*vecs)
        if name == "dot":
            return np.bincount(rows, weights=a * b, minlength=n)[:n]
        if name == "euclid_dist":
            return np.sqrt(np.bincount(rows, weights=(a - b) ** 2, minlength=n)[:n])
        count = np.bincount(rows, minlength=n)[:n]
        ma = np.bincount(rows, weights=a, minlength=n)[:n] / count
        mb = np.bincount(rows, weights=b, minlength=n)[:n] / count
        da, db = a - ma[rows], b - mb[rows]
        cov = np.bincount(rows, weights=da * db, minlength=n)[:n]
        va = np.bincount(rows, weights=da * da, minlength=n)[:n]
        vb = np.bincount(rows, weights=db * db, minlength=n)[:n]
        return cov / np.sqrt(va * vb)

    def paired(self, va: _Vector, vb: _Vector) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The items of two vectors side by side, row by row; the shorter is padded with ``fill_missing``
        (without it, a row whose lengths differ has no value)."""
        if self.fill is None:
            self.unpaired |= va.count != vb.count
        length = np.maximum(va.count, vb.count)
        rows = np.repeat(np.arange(self.n), length)
        k = np.arange(rows.size) - np.repeat(np.cumsum(length) - length, length)
        fill = np.nan if self.fill is None else self.fill

        def side(v: _Vector) -> np.ndarray:
            inside = k < v.count[rows]
            at = np.where(inside, v.start[rows] + k, 0)
            vals = v.values[at] if v.values.size else np.zeros(rows.size)
            return np.where(inside, vals, fill)

        return side(va), side(vb), rows


def _as_int(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return np.where(np.isfinite(x), np.trunc(x), 0).astype(np.int64)


def _round(x: np.ndarray) -> np.ndarray:
    """Round half away from zero (the doc's ``round``; ``rint`` rounds half to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _distance(
    name: str, lng1: np.ndarray, lat1: np.ndarray, lng2: np.ndarray, lat2: np.ndarray
) -> np.ndarray:
    """Great-circle distance in km between (lng, lat) points in degrees: ``haversine`` by the haversine
    formula, ``sphere_dist`` by the spherical law of cosines (TorchEasyRec's docs give no unit; recpipe's
    choice is km on a sphere of radius 6371 km)."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dl = np.radians(np.asarray(lng2) - np.asarray(lng1))
    if name == "haversine":
        h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
        return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
    c = np.sin(p1) * np.sin(p2) + np.cos(p1) * np.cos(p2) * np.cos(dl)
    return EARTH_RADIUS_KM * np.arccos(np.clip(c, -1.0, 1.0))


_COMPARE = {
    "<=": np.less_equal,
    ">=": np.greater_equal,
    "!=": np.not_equal,
    "==": np.equal,
    ">": np.greater,
    "<": np.less,
}
_UNARY = {
    "isnan": lambda x: np.isnan(x).astype(np.float64),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "log2": np.log2,
    "log10": np.log10,
    "log": np.log,
    "ln": np.log,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "sign": np.sign,
    "abs": np.abs,
    "rint": np.rint,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "round": _round,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}
_VECTOR_REDUCE = {
    "len",
    "l2_norm",
    "squared_norm",
    "std_dev",
    "pop_std_dev",
    "variance",
    "pop_variance",
    "reduce_min",
    "reduce_max",
    "reduce_sum",
    "reduce_mean",
    "reduce_prod",
}


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> kinds.SparseOut:
    value, has, bads = evaluate(f, batch)
    return vals.bucket_out(
        f, np.flatnonzero(has), value[has], batch.num_rows, vals.merge_bad_rows(list(bads))
    )


def dense(d: DenseFeature, batch: pa.RecordBatch) -> kinds.DenseOut:
    value, has, bads = evaluate(d, batch)
    return vals.dense_out(d, value, has, bads)


def inputs(e: SparseFeature | DenseFeature) -> dict[str, tuple[kinds.ColumnKind, str]]:
    vectors = parsed(e.params["expression"]).vectors
    return {
        v: (("text", kinds.ANY) if v in vectors else ("float", kinds.NUMERIC)) for v in e.params["variables"]
    }


def column(e: SparseFeature | DenseFeature) -> tuple[kinds.ColumnKind, str]:
    return inputs(e)[e.column]


KIND = kinds.FeatureKind(
    name="expr", build=build, column=column, inputs=inputs, needs=needs, sparse=sparse, dense=dense
)
