"""``on_bad_row: skip`` skips a bad number wherever it is in a CSV: in a later 4 MiB block than the one
types were inferred from, or in a later file (Arrow's typed parser would fail the whole pass there)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.data.types import DataError
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.train.data import StepBatches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def csv_folder(tmp_path_factory) -> tuple[Path, int]:
    """Two CSV files of generated Taobao rows; 'price' is text in row 60000 of file 0 (past its first
    block) and in row 5 of file 1 (whose types are those of file 0)."""
    tmp = tmp_path_factory.mktemp("csv_skip")
    generate("taobao", 70_000, tmp / "pq", seed=5, chunk_rows=70_000)
    table = pq.read_table(tmp / "pq")
    price = table.column("price").cast(pa.string()).to_pylist()
    price[60_000], price[60_006] = "abc", "n/a"
    table = table.set_column(table.schema.get_field_index("price"), "price", pa.array(price, pa.string()))
    out = tmp / "csv"
    out.mkdir()
    pacsv.write_csv(table.slice(0, 60_001), out / "part-0.csv")
    pacsv.write_csv(table.slice(60_001), out / "part-1.csv")
    assert (out / "part-0.csv").stat().st_size > 4 << 20  # the bad value is past the first block
    return out, table.num_rows


def _pass(folder: Path, policy: str):
    cfg = load_config(ROOT / "configs" / "din_taobao_small.yaml", {"data.on_bad_row": policy})
    spec = build_feature_spec(cfg)
    reader = StepBatches(str(folder), spec, 8192, on_bad_row=policy, csv=cfg.csv_options())
    rows = sum(sb.real_rows for sb in reader)
    return rows, reader.stats


def test_skip_skips_late_type_errors_and_counts_them(csv_folder):
    folder, total = csv_folder
    rows, stats = _pass(folder, "skip")
    assert stats.rows_skipped == 2 and stats.skipped_by_column == {"price": 2}
    assert rows == stats.rows_emitted == total - 2 and stats.rows_read == total


def test_error_names_the_file_row_and_column(csv_folder):
    folder, _ = csv_folder
    with pytest.raises((DataError, BadRowError), match=r"part-0.csv.*(row|line) 6000[01].*'price'.*'abc'"):
        _pass(folder, "error")


def test_fg_reads_numbers_given_as_text_like_typed_ones(csv_folder, tmp_path):
    """What skip relies on: the raw and label columns read as text give FG's typed result."""
    spec = build_feature_spec(load_config(ROOT / "configs" / "din_taobao_small.yaml"))
    generate("taobao", 500, tmp_path, seed=6, chunk_rows=500)
    typed = pq.read_table(tmp_path)
    text = pa.table({c: typed.column(c).cast(pa.string()) if c in ("price", "clk") else typed.column(c)
                     for c in typed.column_names})  # fmt: skip
    a = FeatureGenerator(spec)(typed, file="t.parquet")
    b = FeatureGenerator(spec)(text, file="t.csv")
    assert (a.dense == b.dense).all() and (a.labels == b.labels).all()
