"""Kind ``expr`` (TorchEasyRec's expr_feature): TorchEasyRec's examples (tzrec/features/expr_feature_test.py inputs
and outputs, written here), every documented operator, function and constant, the parser's refusals, the
raw-value contract, fg.json and a hypothesis check against Python arithmetic row by row."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, dense, every_representation, fg, ids, round_trip, spec_of

from recpipe.config import ConfigError
from recpipe.config.expr import FUNCTIONS, VECTOR_FUNCTIONS, describe, parse_expression
from recpipe.features.fg import BadRowError


def expr(expression: str, **kw) -> dict:
    return {"kind": "expr", "name": "ex", "expression": expression, **kw}


def one(expression: str, **columns) -> float:
    """The value of ``expression`` over one row of scalar columns (default_value NaN-free: "-999")."""
    rows = {k: [v] for k, v in columns.items()} or {"x": [0.0]}
    names = parse_expression(expression).variables
    if not names:
        expression = f"({expression}) + x * 0"
    return dense(spec_of(expr(expression, default_value="-999")), rows)[0]


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (["0.2", "", "0.3", None], [0.2] * 4, [0.4, 0.1, 0.5, 0.1]),  # a missing input: default_value
        ([0.2, 0.1, 0.3, None], [0.2] * 4, [0.4, 0.3, 0.5, 0.1]),
    ],
)
def test_a_plus_b_with_its_default(a, b, want) -> None:
    spec = spec_of(expr("a+b", variables=["a", "b"], default_value="0.1"))
    np.testing.assert_allclose(dense(spec, {"a": a, "b": b}), want, atol=1e-6)


def test_boundaries_bucketize_the_value() -> None:
    spec = spec_of(expr("a+b", default_value="0.1", boundaries=[0.15, 0.25, 0.35]))
    assert spec.feature("ex").mapping.size == 4
    assert ids(spec, {"a": [0.2, 0.1, 0.3, None], "b": [0.2] * 4}) == [[3], [2], [3], [0]]
    spec = spec_of(expr("a+b", default_value=None, boundaries=[0.15, 0.25, 0.35]))
    assert ids(spec, {"a": ["0.2", "", "0.3"], "b": [0.2] * 3}) == [[3], [], [3]]


def test_dot_of_two_vectors() -> None:
    bounds = [0.05, 0.10, 0.15]
    spec = spec_of(expr("dot(a,b)", default_value="0.1", boundaries=bounds))
    a = pa.array([[0.2, 0.3], [0.1, 0.2], [0.3, 0.4], []])
    assert ids(spec, {"a": a, "b": pa.array([[0.2, 0.2]] * 4)}) == [[2], [1], [2], [2]]  # [] is missing
    spec = spec_of(expr("dot(a,b)", default_value=None, boundaries=bounds))
    rows = {"a": ["0.2\x1d0.2", "", "0.3\x1d0.4"], "b": ["0.2\x1d0.2"] * 3}
    assert ids(spec, rows) == [[1], [], [2]]
    spec = spec_of(expr("dot(a,b)", default_value=None, boundaries=bounds, separator=","))
    assert ids(spec, {k: [v.replace("\x1d", ",") for v in vs] for k, vs in rows.items()}) == [[1], [], [2]]


def test_the_documented_example() -> None:
    spec = spec_of(expr("u_age == i_age ? 1 : 0", variables=["u_age", "i_age"], boundaries=[0.5]))
    assert ids(spec, {"u_age": [18, 20], "i_age": [18, 19]}) == [[1], [0]]


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("2 ^ 3 ^ 2", 512),  # right-associative
        ("-2 ^ 2", -4),  # unary minus binds weaker than ^
        ("7 / 2", 3.5),
        ("1 < 2", 1),
        ("2 <= 2", 1),
        ("3 > 4", 0),
        ("3 >= 4", 0),
        ("1 == 1", 1),
        ("1 != 1", 0),
        ("1 && 0", 0),
        ("1 || 0", 1),
        ("6 | 3", 7),
        ("6 & 3", 2),
        ("1 + 1 == 2 && 3 > 2", 1),  # precedence: + over == over &&
        ("0 ? 1 : 2", 2),
        ("1 ? 0 ? 5 : 6 : 7", 6),
        ("_pi", math.pi),
        ("_e", math.e),
        ("sin(1) + cos(1) + tan(1)", math.sin(1) + math.cos(1) + math.tan(1)),
        ("asin(0.5) + acos(0.5) + atan(2)", math.asin(0.5) + math.acos(0.5) + math.atan(2)),
        ("sinh(1) + cosh(1) + tanh(1)", math.sinh(1) + math.cosh(1) + math.tanh(1)),
        ("asinh(1) + acosh(2) + atanh(0.5)", math.asinh(1) + math.acosh(2) + math.atanh(0.5)),
        ("log2(8) + log10(100) + log(_e) + ln(1)", 6),
        ("exp(1) + sqrt(16)", math.e + 4),
        ("sign(-3) + sign(0) + sign(2)", 0),
        ("abs(-2.5)", 2.5),
        ("rint(2.5) + rint(3.5)", 6),  # half to even
        ("round(2.5) + round(-2.5)", 0),  # half away from zero
        ("round(2.4)", 2),
        ("floor(-1.5) + ceil(-1.5) + trunc(-1.7)", -4),
        ("roundp(3.14159, 2)", 3.14),
        ("mod(7, 3) + mod(-7, 3)", 0),  # C fmod: the sign of the dividend
        ("sigmoid(0)", 0.5),
        ("min(3, 1, 2) + max(3, 1, 2) + sum(1, 2, 3) + avg(1, 2, 3)", 12),
        ("isnan(0/0) + isnan(1)", 1),  # an intermediate NaN is a value isnan sees
        ("haversine(0, 0, 0, 1)", 6371 * math.pi / 180),
        ("sphere_dist(0, 0, 1, 0)", 6371 * math.pi / 180),
    ],
)
def test_operators_functions_and_constants(expression: str, want: float) -> None:
    assert one(expression) == pytest.approx(want, abs=1e-4)


def test_every_documented_function_is_known() -> None:
    documented = (
        "isnan sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh log2 log10 log ln exp sqrt sign abs "
        "rint floor ceil trunc round roundp mod sigmoid sphere_dist haversine min max sum avg"
    ).split()
    vectors = (
        "len l2_norm squared_norm dot euclid_dist corr std_dev pop_std_dev variance pop_variance reduce_min "
        "reduce_max reduce_sum reduce_mean reduce_prod"
    ).split()
    assert sorted(FUNCTIONS) == sorted(documented) and sorted(VECTOR_FUNCTIONS) == sorted(vectors)


def test_vector_functions() -> None:
    rows = {"v": ["1\x1d2\x1d3"], "w": ["1\x1d0\x1d1"]}

    def value(e: str) -> float:
        return dense(spec_of(expr(e)), rows)[0]

    assert value("len(v)") == 3
    assert value("reduce_sum(v) + reduce_mean(v)") == 8
    assert value("reduce_min(v) * 10 + reduce_max(v)") == 13
    assert value("reduce_prod(v)") == 6
    assert value("squared_norm(v)") == 14
    assert value("l2_norm(v)") == pytest.approx(math.sqrt(14), abs=1e-5)
    assert value("variance(v)") == pytest.approx(2 / 3, abs=1e-5)  # the doc's variance divides by n
    assert value("pop_variance(v)") == pytest.approx(1, abs=1e-5)  # and pop_variance by n - 1
    assert value("std_dev(v)") == pytest.approx(math.sqrt(2 / 3), abs=1e-5)
    assert value("pop_std_dev(v)") == pytest.approx(1, abs=1e-5)
    assert value("dot(v, w)") == 4
    assert value("euclid_dist(v, w)") == pytest.approx(math.sqrt(0 + 4 + 4), abs=1e-5)
    assert value("corr(v, w)") == pytest.approx(float(np.corrcoef([1, 2, 3], [1, 0, 1])[0, 1]), abs=1e-5)


def test_vectors_of_different_lengths() -> None:
    rows = {"a": [[1.0, 2.0], [1.0]], "b": [[3.0, 4.0], [3.0, 4.0]]}
    assert dense(spec_of(expr("dot(a, b)", default_value="-1")), rows) == [11, -1]
    assert dense(spec_of(expr("dot(a, b)", fill_missing=2.0)), rows) == [11, 11]


def test_non_finite_results_take_the_default() -> None:
    spec = spec_of(expr("log(x) + 1 / y", default_value="-7"))
    assert dense(spec, {"x": [1.0, 0.0, -1.0, 1.0], "y": [1.0, 1.0, 1.0, 0.0]}) == [1, -7, -7, -7]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("foo(x)", "unknown function 'foo'; known: abs, acos"),
        ("rnd() + x", "function 'rnd' is not supported: rnd\\(\\) is a random number"),
        ("x +", "the expression ends early"),
        ("x $ 2", "unexpected character '\\$'"),
        ("(x + 1", "the expression ends early; expected '\\)'"),
        ("min()", "function 'min' takes one or more argument"),
        ("sqrt(x, 2)", "function 'sqrt' takes 1 argument"),
        ("dot(x + 1, y)", "the arguments of vector function 'dot' are variables"),
        ("len(x) + x", "variables \\['x'\\] are used both as vectors"),
        ("1 + 2", "names no column: it is a constant"),
        ("x x", "unexpected 'x' at token 2"),
    ],
)
def test_the_parser_refuses_with_a_message(expression: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(expr(expression))


def test_variables_must_match_the_expression() -> None:
    with pytest.raises(ConfigError, match=r"names \['b'\], not among variables \['a'\]"):
        config(expr("a + b", variables=["a"]))
    with pytest.raises(ConfigError, match=r"variables \['c'\] are not used"):
        config(expr("a + b", variables=["a", "b", "c"]))


def test_the_tree_is_parsed_not_evaluated() -> None:
    assert describe(parse_expression("a + b * 2").root) == [
        "+",
        ["var", "a"],
        ["*", ["var", "b"], ["num", 2.0]],
    ]
    assert describe(parse_expression("-x ^ 2").root) == ["neg", ["^", ["var", "x"], ["num", 2.0]]]


def test_python_is_never_evaluated() -> None:
    with pytest.raises(ConfigError, match="unknown function '__import__'"):
        config(expr("__import__(os)"))
    with pytest.raises(ConfigError, match="unexpected character"):
        config(expr("x.real"))


def test_bad_rows_and_a_missing_variable_column() -> None:
    spec = spec_of(expr("a + b"))
    with pytest.raises(BadRowError, match="row 1, column 'b': expected a finite number, got 'x'"):
        fg(spec, {"a": [1.0, 2.0], "b": ["1", "x"]})
    with pytest.raises(BadRowError, match="column 'v': expected a finite number as an item of vector 'v'"):
        fg(spec_of(expr("len(v)")), {"v": ["1\x1dy"]})
    from recpipe.features.schema_check import schema_problems

    problems = schema_problems(spec, pa.schema([("a", pa.float64()), ("label", pa.int64())]))
    assert any("'b'" in p for p in problems), problems


def test_the_raw_value_contract(tmp_path: Path) -> None:
    cfg = config(expr("a * 2 + b", default_value="-1"), expr("len(v)", default_value="0") | {"name": "n"})
    rows = [
        {"a": 1.5, "b": 1, "v": "1\x1d2"},
        {"a": None, "b": 1, "v": ""},
        {"a": float("nan"), "b": 2, "v": None},
        {"a": "2", "b": "3", "v": "4"},
    ]
    out = every_representation(cfg, rows, tmp_path)
    assert out.dense[:, 0].tolist() == [4, -1, -1, 7] and out.dense[:, 1].tolist() == [2, 0, 0, 1]
    assert dense(spec_of(expr("a + b", default_value="5")), {"a": [1.0]}) == [5]  # b absent at serving


def test_fg_json_round_trip() -> None:
    spec = spec_of(expr("dot(a, b) + c", boundaries=[0.5], fill_missing=0.0))
    entry = spec.feature("ex")
    assert (entry.kind, entry.column, entry.inputs) == ("expr", "a", ["b", "c"])
    round_trip(spec, pa.table({"a": ["1\x1d2"], "b": ["3\x1d4"], "c": [0.5]}))
    dense_spec = spec_of(expr("a / b", normalizer="log(x+1)"))
    round_trip(dense_spec, pa.table({"a": [1.0], "b": [2.0]}))


_NUM = st.floats(-100, 100, allow_nan=False).map(lambda v: round(v, 2))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_NUM, _NUM, _NUM), min_size=1, max_size=10))
def test_matches_python_arithmetic_row_by_row(rows) -> None:
    expression = "a * b - c / (1 + abs(b)) + (a > c ? a : c) + max(a, b, c) ^ 2 / 100"
    want = [a * b - c / (1 + abs(b)) + (a if a > c else c) + max(a, b, c) ** 2 / 100 for a, b, c in rows]
    a, b, c = (list(col) for col in zip(*rows))
    got = dense(spec_of(expr(expression)), {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(got, np.float32(want), rtol=1e-5, atol=1e-3)


def test_zscore_is_fitted_on_the_expression_value(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from recpipe.data.sources import open_source
    from recpipe.features.fit import fit_feature_spec

    pq.write_table(
        pa.table({"a": [1.0, 2.0, 3.0, None], "b": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1]}),
        tmp_path / "t.parquet",
    )
    cfg = config(expr("a + b", normalizer="zscore", default_value="0"))
    spec = fit_feature_spec(cfg, open_source(str(tmp_path / "t.parquet")))
    values = np.array([2.0, 4.0, 6.0, 0.0])  # the null row takes the default, as FG computes it
    assert spec.dense[0].mean == pytest.approx(values.mean()) and spec.dense[0].std == pytest.approx(
        values.std()
    )
    np.testing.assert_allclose(
        fg(spec, {"a": [2.0], "b": [2.0]}).dense[0, 0], (4 - values.mean()) / values.std(), rtol=1e-6
    )
