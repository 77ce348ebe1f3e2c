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
