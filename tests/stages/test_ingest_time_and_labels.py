"""ingest's time split and label over the column types warehouses and log pipelines write: the time as epoch
seconds or milliseconds, TIMESTAMP (with a zone or without), DATE, ISO-8601 or numeric text; the label as
integers, floats, booleans or numeric text. Every form gives the same split as epoch seconds; what is no time
or no label is an error naming the column."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from recpipe.config import SplitConfig
from recpipe.data.types import DataError
from recpipe.stages import ingest
from recpipe.stages.ingest import epoch_seconds

DAY = 86_400
START = 1_767_225_600  # 2026-01-01 00:00:00 UTC


def _table(n: int = 600) -> pa.Table:
    """Rows over 3 UTC days (a few on each midnight), a label and an oracle probability."""
    rng = np.random.default_rng(7)
    seconds = START + rng.integers(0, 3 * DAY, n)
    seconds[:6] = [
        START,
        START + DAY - 1,
        START + DAY,
        START + 2 * DAY - 1,
        START + 2 * DAY,
        START + 3 * DAY - 1,
    ]
    p = rng.random(n)
    return pa.table(
        {
            "row": np.arange(n),
            "time_stamp": seconds,
            "clk": (rng.random(n) < p).astype(np.int64),
            "true_prob": p,
        }
    )


def _with(table: pa.Table, column: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, values)


def _ingest(tmp_path: Path, table: pa.Table, name: str, **split: object) -> ingest.IngestResult:
    (tmp_path / name).mkdir()
    pq.write_table(table, tmp_path / name / "part-0.parquet")
    return ingest.run(str(tmp_path / name), tmp_path / f"out-{name}", "clk", split=SplitConfig(**split))


def _eval_rows(r: ingest.IngestResult) -> list[int]:
    return sorted(pq.read_table(r.eval_dir).column("row").to_pylist())


def _iso(seconds: pa.Array, fmt: str) -> pa.Array:
    return pc.strftime(pc.cast(pc.multiply(seconds, 1_000_000), pa.timestamp("us")), fmt)


def _shanghai_text(seconds: pa.Array) -> pa.Array:
    local = pc.cast(pc.multiply(pc.add(seconds, 8 * 3600), 1_000_000), pa.timestamp("us"))
    return pc.binary_join_element_wise(pc.strftime(local, "%Y-%m-%dT%H:%M:%S"), "+08:00", "")


TIME_FORMS: dict[str, tuple[Callable[[pa.Array], pa.Array], dict]] = {
    "timestamp[s]": (lambda s: s.cast(pa.timestamp("s")), {}),
    "timestamp[ms] in Asia/Shanghai": (
        lambda s: pc.multiply(s, 1000).cast(pa.timestamp("ms", tz="Asia/Shanghai")),
        {},
    ),
    "timestamp[ns]": (lambda s: pc.multiply(s, 10**9).cast(pa.timestamp("ns")), {}),
    "ISO text": (lambda s: _iso(s, "%Y-%m-%d %H:%M:%S"), {}),
    "ISO text with an offset": (_shanghai_text, {}),
    "numeric text": (lambda s: s.cast(pa.string()), {}),
    "dictionary-encoded ISO text": (lambda s: pc.dictionary_encode(_iso(s, "%Y-%m-%dT%H:%M:%S")), {}),
    "epoch milliseconds": (lambda s: pc.multiply(s, 1000), {"time_unit": "ms"}),
    "epoch microseconds as floats": (lambda s: pc.multiply(s.cast(pa.float64()), 1e6), {"time_unit": "us"}),
}


@pytest.mark.parametrize("form", list(TIME_FORMS))
def test_every_time_form_splits_as_epoch_seconds(tmp_path: Path, form: str) -> None:
    table = _table()
    want = _ingest(tmp_path, table, "seconds")
    make, split = TIME_FORMS[form]
    got = _ingest(tmp_path, _with(table, "time_stamp", make(table.column("time_stamp").combine_chunks())),
                  "form", **split)  # fmt: skip
    assert (got.train_rows, got.eval_rows) == (want.train_rows, want.eval_rows)
    assert _eval_rows(got) == _eval_rows(want)
    # The last UTC day only: rows 4 and 5 are its first and last second, row 3 the second before it.
    assert {4, 5} <= set(_eval_rows(want)) and not {0, 1, 2, 3} & set(_eval_rows(want))


def test_dates_split_by_day(tmp_path: Path) -> None:
    table = _table()
    seconds = table.column("time_stamp").combine_chunks()
    dates = pc.cast(pc.cast(pc.multiply(seconds, 1000), pa.timestamp("ms")), pa.date32())
    got = _ingest(tmp_path, _with(table, "time_stamp", dates), "dates", eval_last_days=2)
    want = _ingest(tmp_path, table, "seconds", eval_last_days=2)
    assert _eval_rows(got) == _eval_rows(want) and got.oracle_auc == want.oracle_auc


def test_epoch_seconds_of_each_form() -> None:
    assert epoch_seconds(pa.array(["2026-01-07T08:00:00+08:00"]), "ts", "x").to_pylist() == [1767744000.0]
    assert epoch_seconds(pa.array(["2026-01-07", None]), "ts", "x").to_pylist() == [1767744000.0, None]
    assert epoch_seconds(pa.array([1767744000123], pa.int64()), "ts", "x", unit="ms").to_pylist() == [
        1767744000.123
    ]
    assert epoch_seconds(pa.array([20460], pa.date32()), "ts", "x").to_pylist() == [20460 * DAY]


@pytest.mark.parametrize(
    ("values", "unit", "match"),
    [
        (pa.array([1767744000123]), "s", r"1767744000123 is no time in 's'.*set data.split.time_unit: ms"),
        (pa.array([1767744000123456]), "s", r"set data.split.time_unit: us"),
        (pa.array([1767744000123456]), "ms", r"no time in 'ms'.*set data.split.time_unit: us"),
        (pa.array(["2026-01-07", "yesterday"]), "s", r"'yesterday'.*neither a number nor an ISO-8601 time"),
        (pa.array(["07/01/2026 10:00"]), "s", r"'07/01/2026 10:00'"),
        (
            pa.array(["2026-01-07 10:00:00", "2026-01-07T10:00:00+08:00"]),
            "s",
            r"with a UTC offset and without one",
        ),
        (pa.array([[1, 2]]), "s", r"is list<item: int64>; expected seconds since the epoch"),
        (pa.array([True]), "s", r"is bool; expected"),
    ],
)
def test_what_is_no_time_is_an_error_naming_the_column(values: pa.Array, unit: str, match: str) -> None:
    with pytest.raises(
        DataError, match=rf"data source 'logs/', time column 'ts' \(data.split.time_column\).*{match}"
    ):
        epoch_seconds(values, "ts", "logs/", unit)


def test_milliseconds_read_as_seconds_are_refused_at_ingest(tmp_path: Path) -> None:
    """Before, the time split took them as seconds: the "last day" lay in the year 58,000 and one row was eval."""
    table = _table()
    millis = _with(table, "time_stamp", pc.multiply(table.column("time_stamp"), 1000))
    with pytest.raises(DataError, match=r"time column 'time_stamp'.*set data.split.time_unit: ms"):
        _ingest(tmp_path, millis, "millis")
    assert not list((tmp_path / "out-millis").glob("**/*.parquet"))


LABEL_FORMS = {
    "bool": lambda y: y.cast(pa.bool_()),
    "float64": lambda y: y.cast(pa.float64()),
    "int8": lambda y: y.cast(pa.int8()),
    "numeric text": lambda y: y.cast(pa.string()),
    "float text": lambda y: pc.binary_join_element_wise(y.cast(pa.string()), ".0", ""),
}


@pytest.mark.parametrize("form", list(LABEL_FORMS))
def test_every_label_form_splits_samples_and_scores_as_integers(tmp_path: Path, form: str) -> None:
    table = _table()
    table = _with(table, "clk", pa.array(np.where(np.arange(600) == 5, None, table.column("clk").to_numpy())))

    def run(t: pa.Table, name: str) -> ingest.IngestResult:
        (tmp_path / name).mkdir()
        pq.write_table(t, tmp_path / name / "p.parquet")
        return ingest.run(str(tmp_path / name), tmp_path / f"out-{name}", "clk", neg_sample_rate=0.5)

    want = run(table, "ints")
    got = run(_with(table, "clk", LABEL_FORMS[form](table.column("clk"))), "form")
    assert (got.train_rows, got.eval_rows, got.negatives_dropped) == (
        want.train_rows,
        want.eval_rows,
        want.negatives_dropped,
    )
    assert got.oracle_auc == want.oracle_auc is not None
    assert sorted(pq.read_table(got.train_dir).column("row").to_pylist()) == sorted(
        pq.read_table(want.train_dir).column("row").to_pylist()
    )


def test_a_label_that_is_no_number_is_an_error_naming_it(tmp_path: Path) -> None:
    table = _table()
    words = _with(table, "clk", pa.array(np.where(table.column("clk").to_numpy() == 1, "click", "no")))
    with pytest.raises(
        DataError, match=r"label column 'clk': string that is not numbers.*expected 0/1 numbers"
    ):
        _ingest(tmp_path, words, "words")


@pytest.mark.parametrize("form", list(LABEL_FORMS))
def test_the_evaluation_oracle_auc_reads_every_label_form(tmp_path: Path, form: str) -> None:
    """The eval step's oracle AUC reads the eval split's label as FG does (it failed on text and booleans)."""
    from recpipe.eval.checkpoint import _oracle_auc

    table = _table()
    pq.write_table(table, tmp_path / "ints.parquet")
    pq.write_table(_with(table, "clk", LABEL_FORMS[form](table.column("clk"))), tmp_path / "form.parquet")
    want = _oracle_auc(str(tmp_path / "ints.parquet"), "clk", "true_prob", 600)
    assert want is not None and _oracle_auc(str(tmp_path / "form.parquet"), "clk", "true_prob", 600) == want
