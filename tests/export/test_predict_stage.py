"""``recpipe predict`` / ``stages.predict``: streamed batch scoring of any source with an export folder —
row count and order kept, skipped rows counted, the same probabilities as the loaded backend, bounded memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from one_user import USER_COLUMNS

from recpipe.export.loaders import load_backend
from recpipe.stages import predict


def _multi_file(rows: pa.Table, folder: Path, parts: int) -> Path:
    folder.mkdir()
    step = -(-rows.num_rows // parts)
    for i in range(parts):
        pq.write_table(rows.slice(i * step, step), folder / f"part-{i:05d}.parquet")
    return folder


def test_predict_a_multi_file_parquet_source_keeps_order_and_scores_like_the_backend(dlrm_export, tmp_path):
    trained, result = dlrm_export
    rows = trained.held_out
    src = _multi_file(rows, tmp_path / "src", 3)
    out = tmp_path / "scores.parquet"
    r = predict.run(str(Path(result.out_dir)), str(src), str(out), keep=["C1"], batch_rows=97)
    assert (r.rows_read, r.rows_scored, r.rows_skipped) == (rows.num_rows, rows.num_rows, 0)
    assert Path(r.model).name == "rtp"  # the backend the registered model serves
    got = pq.read_table(out)
    assert got.column_names == ["row", "C1", "probability"]
    assert got.column("row").to_pylist() == list(range(rows.num_rows))
    assert got.column("C1").to_pylist() == rows.column("C1").to_pylist()
    want = load_backend(Path(result.out_dir) / "rtp").predict(rows)
    np.testing.assert_allclose(got.column("probability").to_numpy(), want, rtol=0, atol=1e-6)
    # Probabilities are the sigmoid of the eager model's logits (no negative sampling in this config).
    eager = 1.0 / (1.0 + np.exp(-trained.eager_logits(rows).astype(np.float64)))
    np.testing.assert_allclose(want, eager, atol=1e-5)


def test_predict_a_csv_with_bad_rows_skips_and_counts_them(dlrm_export, tmp_path):
    trained, result = dlrm_export
    rows = trained.held_out.slice(0, 300).drop_columns(["label"])
    text = rows.cast(pa.schema([(f.name, pa.string()) for f in rows.schema]))
    bad = text.column("I3").to_pylist()
    for i in (5, 77, 201):
        bad[i] = "abc"  # text in a count column: a bad row
    text = text.set_column(text.schema.get_field_index("I3"), "I3", pa.array(bad))
    pacsv.write_csv(text, tmp_path / "rows.csv")
    out = tmp_path / "scores.parquet"
    r = predict.run(
        str(Path(result.out_dir) / "onnx"), str(tmp_path / "rows.csv"), str(out), on_bad_row="skip"
    )
    assert (r.rows_read, r.rows_scored, r.rows_skipped) == (300, 297, 3) and r.skipped_by_column == {"I3": 3}
    assert pq.read_table(out).column("row").to_pylist() == [i for i in range(300) if i not in (5, 77, 201)]
    with pytest.raises(
        ValueError, match=r"rows\.csv, row 5, column 'I3': expected a finite number, got 'abc'"
    ):
        predict.run(str(Path(result.out_dir) / "onnx"), str(tmp_path / "rows.csv"), str(out))


def _peak_mb(export_dir: str, source: Path, out: Path) -> tuple[float, str]:
    """``recpipe predict`` in a fresh process; its peak RSS in MB and its output line."""
    code = (
        "import resource, sys; from recpipe.cli.main import main; rc = main(sys.argv[1:]); "
        "print('peak_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )
    args = [
        "predict",
        "--model",
        export_dir,
        "--data",
        str(source),
        "--out",
        str(out),
        "--batch-rows",
        "4096",
    ]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("peak_kb")[1].split()[0]) / 1024, done.stdout


def test_predict_cli_streams_in_bounded_memory(dlrm_export, tmp_path):
    """Ten times the rows cost the process far less memory than those rows take in Arrow: they are
    streamed in 4,096-row batches, never held."""
    trained, result = dlrm_export
    unit = pa.concat_tables([trained.held_out] * max(1, 20_000 // trained.held_out.num_rows))
    small, big = pa.concat_tables([unit] * 1), pa.concat_tables([unit] * 10)
    peak_small, _ = _peak_mb(
        result.out_dir, _multi_file(small, tmp_path / "small", 2), tmp_path / "a.parquet"
    )
    peak_big, line = _peak_mb(result.out_dir, _multi_file(big, tmp_path / "big", 8), tmp_path / "b.parquet")
    assert f"rows_read={big.num_rows} rows_scored={big.num_rows} rows_skipped=0" in line
    assert pq.read_metadata(tmp_path / "b.parquet").num_rows == big.num_rows
    extra_rows_mb = (big.nbytes - small.nbytes) / 2**20
    print(f"peak RSS {peak_small:.0f} MB for {small.num_rows} rows, {peak_big:.0f} MB for {big.num_rows} rows "
          f"({extra_rows_mb:.0f} MB more rows in Arrow)")  # fmt: skip
    assert peak_big - peak_small < 0.25 * extra_rows_mb, (peak_small, peak_big, extra_rows_mb)


def test_predict_refuses_a_source_without_any_column_of_the_model(dlrm_export, tmp_path):
    """A file whose columns were all renamed would be scored as all-missing rows: refused, naming both sides."""
    trained, result = dlrm_export
    rows = trained.held_out.slice(0, 20).drop_columns(["label"])
    renamed = rows.rename_columns([f"x_{c}" for c in rows.column_names])
    pq.write_table(renamed, tmp_path / "renamed.parquet")
    with pytest.raises(ValueError, match="none of its columns is an input column") as err:
        predict.run(str(Path(result.out_dir)), str(tmp_path / "renamed.parquet"), str(tmp_path / "o.parquet"))
    assert "['C1', 'C2'" in str(err.value) and "got ['x_I1', 'x_I2'" in str(err.value)
    assert not (tmp_path / "o.parquet").exists()
    # One known column and the rest absent is the raw contract: scored, the absent ones missing.
    pq.write_table(renamed.append_column("C1", rows.column("C1")), tmp_path / "one.parquet")
    r = predict.run(str(Path(result.out_dir)), str(tmp_path / "one.parquet"), str(tmp_path / "o.parquet"))
    want = load_backend(Path(result.out_dir) / "rtp").predict(rows.select(["C1"]))
    got = pq.read_table(tmp_path / "o.parquet").column("probability").to_numpy()
    assert r.rows_scored == 20
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


# --------------------------------------------------------------- one user x N candidates: --request-key


def _requests(trained, sizes: list[int], keys: list[int] | None = None) -> pa.Table:
    """Held-out DIN rows as requests of ``sizes`` rows each (``request_id`` the ``keys``, default 0, 1, ...):
    every row of a request holds its first row's user columns (profile and history)."""
    rows = trained.held_out.slice(0, sum(sizes))
    rows = rows.drop_columns([c for c in rows.column_names if c in trained.spec.labels])
    first = np.repeat(np.cumsum([0, *sizes[:-1]]), sizes)
    for c in USER_COLUMNS:
        rows = rows.set_column(rows.schema.get_field_index(c), c, rows.column(c).take(pa.array(first)))
    ids = np.repeat(keys if keys is not None else np.arange(len(sizes)), sizes)
    return rows.append_column("request_id", pa.array(ids, pa.int64()))


def _run(
    export_dir: str, src: Path, out: Path, grouped: bool, **kw
) -> tuple[predict.PredictResult, pa.Table]:
    by = {"request_key": "request_id", "context_columns": USER_COLUMNS} if grouped else {}
    r = predict.run(export_dir, str(src), str(out), keep=["request_id", "adgroup_id"], **by, **kw)
    return r, pq.read_table(out)


def _assert_same(
    a: tuple[predict.PredictResult, pa.Table], b: tuple[predict.PredictResult, pa.Table]
) -> None:
    (ra, ta), (rb, tb) = a, b
    assert (ra.rows_read, ra.rows_scored, ra.rows_skipped) == (rb.rows_read, rb.rows_scored, rb.rows_skipped)
    assert ra.skipped_by_column == rb.skipped_by_column
    assert ta.column_names == tb.column_names == ["row", "request_id", "adgroup_id", "probability"]
    for c in ("row", "request_id", "adgroup_id"):
        assert ta.column(c).to_pylist() == tb.column(c).to_pylist(), c
    np.testing.assert_allclose(
        ta.column("probability").to_numpy(), tb.column("probability").to_numpy(), atol=1e-6
    )


def test_predict_by_request_scores_like_the_row_form(din_export, tmp_path):
    """Requests crossing batch boundaries (batch_rows=32) and a file boundary, one longer than a batch (scored in
    pieces), one of a single row, and a key that comes back later (another request): the same rows, order,
    kept columns and probabilities as the rows one by one."""
    trained, result = din_export
    sizes, keys = [5, 40, 1, 97, 30, 3, 60], [7, 8, 9, 10, 7, 11, 12]
    rows = _requests(trained, sizes, keys)
    src = _multi_file(rows, tmp_path / "src", 2)  # the 97-row request spans both files
    plain = _run(result.out_dir, src, tmp_path / "a.parquet", False, batch_rows=32)
    grouped = _run(result.out_dir, src, tmp_path / "b.parquet", True, batch_rows=32)
    assert grouped[0].rows_scored == sum(sizes)
    _assert_same(grouped, plain)
    assert len(set(np.round(grouped[1].column("probability").to_numpy(), 6))) > 100  # real, varied scores
    # A request key that is a context column too (each user one request here) is the same.
    r = predict.run(result.out_dir, str(src), str(tmp_path / "c.parquet"), request_key="user_id",
                    context_columns=USER_COLUMNS, batch_rows=32)  # fmt: skip
    np.testing.assert_allclose(
        pq.read_table(tmp_path / "c.parquet").column("probability").to_numpy(),
        plain[1].column("probability").to_numpy(), atol=1e-6,
    )  # fmt: skip
    assert r.rows_scored == sum(sizes)


def _with_bad_values(rows: pa.Table) -> pa.Table:
    """``price`` and ``age_level`` as text, with text in rows 3 and 150 (candidates' prices) and in every row of
    the request at rows 46-142 (its user's age level)."""
    price = [None if v is None else str(v) for v in rows.column("price").to_pylist()]
    price[3] = price[150] = "abc"
    age = [str(v) for v in rows.column("age_level").to_pylist()]
    age[46:143] = ["old"] * 97
    rows = rows.set_column(rows.schema.get_field_index("price"), "price", pa.array(price))
    return rows.set_column(rows.schema.get_field_index("age_level"), "age_level", pa.array(age))


def test_predict_by_request_skips_and_names_bad_rows_as_the_row_form(din_export, tmp_path):
    trained, result = din_export
    rows = _with_bad_values(_requests(trained, [5, 40, 1, 97, 30]))
    pq.write_table(rows, tmp_path / "rows.parquet")
    src = tmp_path / "rows.parquet"
    plain = _run(result.out_dir, src, tmp_path / "a.parquet", False, batch_rows=32, on_bad_row="skip")
    grouped = _run(result.out_dir, src, tmp_path / "b.parquet", True, batch_rows=32, on_bad_row="skip")
    assert grouped[0].rows_skipped == 99 and grouped[0].skipped_by_column == {"price": 2, "age_level": 97}
    _assert_same(grouped, plain)
    errors = []
    for grouped_form in (False, True):
        with pytest.raises(ValueError, match=r"rows\.parquet, row 3, column 'price'") as err:
            _run(result.out_dir, src, tmp_path / "c.parquet", grouped_form, batch_rows=32)
        errors.append(str(err.value))
    assert errors[0] == errors[1]


def test_predict_by_request_refuses_a_row_whose_user_differs_from_its_request(din_export, tmp_path):
    """A context value that changes inside a request is a contract error of the grouping, skip or not: named
    with the file, the row, the column and the request's value (in the next batches too: rows 32, 40)."""
    trained, result = din_export
    rows = _requests(trained, [10, 50])
    ages = rows.column("age_level").to_pylist()
    for changed in (13, 32, 40):  # 32: the first row of the second batch, checked against the carried request
        bad = list(ages)
        bad[changed] = ages[changed] % 7 + 1
        got = rows.set_column(rows.schema.get_field_index("age_level"), "age_level", pa.array(bad))
        pq.write_table(got, tmp_path / "rows.parquet")
        want = (
            rf"rows\.parquet, row {changed}, column 'age_level': expected "
            rf"'{ages[changed]}', the value of request request_id=1 from its first row 10, got '{bad[changed]}'"
        )
        with pytest.raises(ValueError, match=want):
            _run(result.out_dir, tmp_path / "rows.parquet", tmp_path / "o.parquet", True, batch_rows=32,
                 on_bad_row="skip")  # fmt: skip


@pytest.mark.parametrize(
    ("by", "match"),
    [
        ({"request_key": "request_id"}, "request_key .* and context_columns .* go together"),
        ({"context_columns": ["user_id"]}, "request_key .* and context_columns .* go together"),
        ({"request_key": "session", "context_columns": ["user_id"]}, r"no column\(s\) \['session'\] for --request"),
        ({"request_key": "request_id", "context_columns": ["user_id", "age"]}, r"no column\(s\) \['age'\]"),
        ({"request_key": "request_id", "context_columns": ["user_id", "request_id"]},
         r"--context-columns \['request_id'\] is no input column of the model"),
        ({"request_key": "request_id", "context_columns": []}, "--context-columns is empty"),
        ({"request_key": "request_id", "context_columns": ["user_id", "user_id"]}, r"names \['user_id'\] twice"),
    ],
)  # fmt: skip
def test_predict_by_request_refuses_what_cannot_be_meant(din_export, tmp_path, by, match):
    trained, result = din_export
    pq.write_table(_requests(trained, [3, 4]), tmp_path / "rows.parquet")
    with pytest.raises(ValueError, match=match):
        predict.run(result.out_dir, str(tmp_path / "rows.parquet"), str(tmp_path / "o.parquet"), **by)
    assert not (tmp_path / "o.parquet").exists()


def test_predict_by_request_refuses_a_row_without_its_request(din_export, tmp_path):
    trained, result = din_export
    rows = _requests(trained, [3, 4])
    ids = rows.column("request_id").to_pylist()
    ids[5] = None
    pq.write_table(
        rows.set_column(rows.num_columns - 1, "request_id", pa.array(ids, pa.int64())), tmp_path / "r.parquet"
    )
    with pytest.raises(
        ValueError, match=r"r\.parquet, row 5, column 'request_id': the request key is missing"
    ):
        predict.run(result.out_dir, str(tmp_path / "r.parquet"), str(tmp_path / "o.parquet"), request_key="request_id",
                    context_columns=USER_COLUMNS)  # fmt: skip


def test_predict_cli_takes_request_key_and_context_columns(din_export, tmp_path, capsys):
    from recpipe.cli.main import main

    trained, result = din_export
    rows = _requests(trained, [20, 30])
    pq.write_table(rows, tmp_path / "rows.parquet")
    base = [
        "predict",
        "--model",
        result.out_dir,
        "--data",
        str(tmp_path / "rows.parquet"),
        "--batch-rows",
        "16",
    ]
    assert main([*base, "--out", str(tmp_path / "a.parquet")]) == 0
    by = ["--request-key", "request_id", "--context-columns", ",".join(USER_COLUMNS)]
    assert main([*base, "--out", str(tmp_path / "b.parquet"), *by]) == 0
    assert "rows_read=50 rows_scored=50 rows_skipped=0" in capsys.readouterr().out
    a, b = (pq.read_table(tmp_path / f"{x}.parquet") for x in "ab")
    assert b.column("row").to_pylist() == list(range(50))
    np.testing.assert_allclose(
        b.column("probability").to_numpy(), a.column("probability").to_numpy(), atol=1e-6
    )
