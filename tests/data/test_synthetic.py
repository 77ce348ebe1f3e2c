"""Synthetic Taobao and Criteo generators: schema, determinism, label model, chunking, raw TSV."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import recpipe.data.synthetic.common as common
from recpipe.data import CsvSource, ParquetSource, criteo_csv_options
from recpipe.data.csv import CRITEO_COLUMNS
from recpipe.data.synthetic import GenerateReport, generate
from recpipe.data.synthetic import criteo as criteo_gen
from recpipe.data.synthetic import taobao as taobao_gen
from recpipe.data.synthetic.criteo import CARDINALITIES, TERABYTE_BUCKETS, hex_strings
from recpipe.data.synthetic.taobao import FIRST_DAY, NUM_BUCKETS, PIDS

TAOBAO_SCHEMA = pa.schema(
    [(c, pa.int64()) for c in NUM_BUCKETS]
    + [
        ("price", pa.float64()),
        ("pid", pa.string()),
        ("clk", pa.int64()),
        ("time_stamp", pa.int64()),
        ("click_50_seq", pa.string()),
        ("true_prob", pa.float64()),
        ("buy", pa.int64()),
        ("true_buy_prob", pa.float64()),
    ]
)


@pytest.fixture(scope="module")
def taobao(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerateReport, pa.Table]:
    report = generate("taobao", 20_000, tmp_path_factory.mktemp("taobao"), seed=3, chunk_rows=8_000)
    return report, pq.read_table(Path(report.files[0]).parent)


@pytest.fixture(scope="module")
def criteo(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerateReport, pa.Table]:
    report = generate("criteo", 20_000, tmp_path_factory.mktemp("criteo"), seed=3, chunk_rows=8_000)
    return report, pq.read_table(Path(report.files[0]).parent)


def _history_lengths(seq: pa.ChunkedArray) -> np.ndarray:
    lengths = pc.list_value_length(pc.split_pattern(seq, "|")).to_numpy()
    return np.where(pc.equal(seq, "").to_numpy(), 0, lengths)


def test_taobao_schema_files_and_meta(taobao: tuple[GenerateReport, pa.Table]) -> None:
    report, table = taobao
    assert table.schema == TAOBAO_SCHEMA
    assert report.rows == table.num_rows == 20_000
    assert [Path(f).name for f in report.files] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    meta = json.loads(Path(report.meta).read_text())
    assert meta["kind"] == "taobao" and meta["rows"] == 20_000 and meta["seed"] == 3
    assert meta["positive_rate"] == report.positive_rate and meta["oracle_auc"] == report.oracle_auc
    assert [c["name"] for c in meta["columns"]] == TAOBAO_SCHEMA.names


def test_taobao_label_model(taobao: tuple[GenerateReport, pa.Table]) -> None:
    report, table = taobao
    clk, prob = table["clk"].to_numpy(), table["true_prob"].to_numpy()
    assert report.positive_rate == pytest.approx(clk.mean())
    assert 0.04 <= report.positive_rate <= 0.06
    assert 0.72 <= report.oracle_auc <= 0.82
    assert prob.mean() == pytest.approx(0.05, abs=0.006)
    assert ((prob > 0) & (prob < 1)).all()


def test_taobao_history_effect_needs_the_candidate(taobao: tuple[GenerateReport, pa.Table]) -> None:
    _, table = taobao
    seq, cate = table["click_50_seq"].to_pylist(), table["cate_id"].to_pylist()
    in_history = np.array([f"\x03{c}\x03" in s for s, c in zip(seq, cate)])
    prob = table["true_prob"].to_numpy()
    assert 0.1 < in_history.mean() < 0.4
    assert prob[in_history].mean() > 2 * prob[~in_history].mean()


def test_taobao_buy_label_model(tmp_path: Path) -> None:
    """The buy label (TorchEasyRec's taobao_multitask_sample has clk and buy): only after a click, ~12% of
    clicks, true_buy_prob = P(click) * P(buy | click), its own oracle AUC in the report and _meta.json."""
    report = generate("taobao", 60_000, tmp_path, seed=5, users=2_000, ads=1_000)
    table = pq.read_table(tmp_path)
    clk, buy = table["clk"].to_numpy(), table["buy"].to_numpy()
    prob, buy_prob = table["true_prob"].to_numpy(), table["true_buy_prob"].to_numpy()
    assert (buy <= clk).all() and buy.sum() > 0
    assert 0.09 <= buy[clk == 1].mean() <= 0.15
    assert ((buy_prob > 0) & (buy_prob < prob)).all()
    assert buy_prob[clk == 1].sum() / prob[clk == 1].sum() == pytest.approx(0.12, abs=0.02)
    assert set(report.tasks) == {"clk", "buy"} and report.tasks["clk"]["oracle_auc"] == report.oracle_auc
    assert report.tasks["buy"]["positive_rate"] == pytest.approx(buy.mean())
    # Buying has effects of its own, so the buy oracle is not the click oracle's ranking.
    assert report.tasks["buy"]["oracle_auc"] > report.oracle_auc + 0.02
    assert np.corrcoef(np.log(prob), np.log(buy_prob / prob))[0, 1] < 0.6
    meta = json.loads(Path(report.meta).read_text())
    assert meta["tasks"] == report.tasks


def test_taobao_buy_label_leaves_the_click_columns_as_they_were(
    taobao: tuple[GenerateReport, pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversion effects and draws come after every click column: without them (the conversion
    stream replaced), every other column is unchanged."""
    _, table = taobao
    monkeypatch.setattr(
        taobao_gen,
        "_conversion_effects",
        lambda rng, u, a: {"user_buy_effect": np.zeros(u), "ad_cvr_effect": np.zeros(a)},
    )
    other = pq.read_table(generate("taobao", 20_000, tmp_path, seed=3, chunk_rows=8_000).files[0])
    first = table.slice(0, other.num_rows)
    for column in first.column_names:
        if column not in ("buy", "true_buy_prob"):
            assert other[column].equals(first[column]), column


def test_taobao_history_lengths_and_format(taobao: tuple[GenerateReport, pa.Table]) -> None:
    _, table = taobao
    lengths = _history_lengths(table["click_50_seq"])
    assert 3.0 <= lengths.mean() <= 5.0
    assert lengths.max() <= 100 and lengths.max() >= 40
    assert 0.15 <= (lengths == 0).mean() <= 0.21
    items = [
        item.split("\x03") for s in table["click_50_seq"].to_pylist()[:2000] if s for item in s.split("|")
    ]
    assert all(
        len(i) == 3 and i[0].isdigit() and i[1].isdigit() and (i[2] == "" or i[2].isdigit()) for i in items
    )


def test_taobao_ids_and_ranges(taobao: tuple[GenerateReport, pa.Table]) -> None:
    _, table = taobao
    for column, buckets in NUM_BUCKETS.items():
        values = table[column].drop_null().to_numpy()
        assert values.min() >= 0 and values.max() < buckets, column
    assert set(table["final_gender_code"].to_pylist()) == {1, 2}
    assert set(table["shopping_level"].to_pylist()) == {1, 2, 3}
    assert set(table["occupation"].to_pylist()) == {0, 1}
    assert set(table["new_user_class_level"].to_pylist()) == {1, 2, 3, 4}
    assert set(table["pid"].to_pylist()) == set(PIDS)
    assert 0.1 < table["brand"].null_count / table.num_rows < 0.4
    days = (table["time_stamp"].to_numpy() - FIRST_DAY) // 86_400
    assert sorted(set(days.tolist())) == list(range(8))
    price = table["price"].to_numpy()
    assert price.min() > 0 and 40 < np.median(price) < 160


def test_taobao_ad_attributes_are_a_function_of_the_ad(taobao: tuple[GenerateReport, pa.Table]) -> None:
    _, table = taobao
    grouped = table.group_by("adgroup_id").aggregate(
        [
            (c, "count_distinct", pc.CountOptions("all"))
            for c in ("cate_id", "brand", "campaign_id", "customer", "price")
        ]
    )
    for c in ("cate_id", "brand", "campaign_id", "customer", "price"):
        assert pc.max(grouped[f"{c}_count_distinct"]).as_py() == 1, c
    counts = table.group_by("adgroup_id").aggregate([("clk", "count")])["clk_count"].to_numpy()
    top = np.sort(counts)[::-1][: counts.size // 100].sum() / counts.sum()
    assert counts.max() > 50 * np.median(counts) and top > 0.15  # Zipf: a hot head and a long tail


def test_generators_are_deterministic_per_seed(tmp_path: Path) -> None:
    for kind in ("taobao", "criteo"):
        a = pq.read_table(
            Path(generate(kind, 3000, tmp_path / f"{kind}a", seed=7, chunk_rows=1000).meta).parent
        )
        b = pq.read_table(
            Path(generate(kind, 3000, tmp_path / f"{kind}b", seed=7, chunk_rows=1000).meta).parent
        )
        c = pq.read_table(
            Path(generate(kind, 3000, tmp_path / f"{kind}c", seed=8, chunk_rows=1000).meta).parent
        )
        assert a.equals(b), kind
        assert not a.equals(c), kind


def test_chunking_bounds_files_and_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "ROW_GROUP_ROWS", 300)
    report = generate("taobao", 5000, tmp_path, seed=0, chunk_rows=1000)
    assert len(report.files) == 5
    metas = [pq.read_metadata(f) for f in report.files]
    assert [m.num_rows for m in metas] == [1000] * 5
    assert [m.num_row_groups for m in metas] == [4] * 5
    assert report.seconds > 0
    again = generate("taobao", 2000, tmp_path, seed=0, chunk_rows=1000)  # stale parts are removed
    assert sorted(p.name for p in tmp_path.glob("part-*.parquet")) == [Path(f).name for f in again.files]


def test_generate_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown synthetic data kind 'movielens'"):
        generate("movielens", 10, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rows must be >= 1"):
        generate("criteo", 0, tmp_path)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        generate("criteo", 10, tmp_path, seed=-1)


def test_criteo_schema_and_label_model(criteo: tuple[GenerateReport, pa.Table]) -> None:
    report, table = criteo
    expected = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)] + ["true_prob"]
    assert table.schema.names == expected
    assert all(table.schema.field(f"I{i}").type == pa.int64() for i in range(1, 14))
    assert all(table.schema.field(f"C{i}").type == pa.string() for i in range(1, 27))
    assert 0.23 <= report.positive_rate <= 0.27
    assert 0.74 <= report.oracle_auc <= 0.81


def test_criteo_values(criteo: tuple[GenerateReport, pa.Table]) -> None:
    _, table = criteo
    n = table.num_rows
    hex8 = re.compile(r"^[0-9a-f]{8}$")
    for i, card in enumerate(CARDINALITIES, start=1):
        column = table[f"C{i}"]
        assert all(hex8.match(v) for v in column.drop_null().to_pylist()[:500]), i
        assert pc.count_distinct(column).as_py() <= card
    assert pc.count_distinct(table["C9"]).as_py() == 3
    assert table["C19"].null_count / n == pytest.approx(0.4, abs=0.03)
    assert table["C1"].null_count == 0
    for i in range(1, 14):
        rate = table[f"I{i}"].null_count / n
        assert 0.03 <= rate <= 0.43, i
    assert pc.min(table["I2"]).as_py() == -2
    assert all(pc.min(table[f"I{i}"]).as_py() >= 0 for i in range(1, 14) if i != 2)
    assert pc.max(table["I5"]).as_py() > 10_000  # heavy tail


def test_criteo_pair_effects_are_low_rank_with_the_stated_spread() -> None:
    model = criteo_gen.build_model(0, max_vocab=300)
    assert criteo_gen.cardinalities(300) == tuple(min(c, 300) for c in CARDINALITIES)
    for (a, b), (u, v) in zip(criteo_gen.PAIRS, model.pair_factors):
        assert u.shape == (min(CARDINALITIES[a], 300), criteo_gen.PAIR_RANK)
        assert v.shape == (min(CARDINALITIES[b], 300), criteo_gen.PAIR_RANK)
        table = u @ v.T  # every pair's effect
        assert np.linalg.matrix_rank(table) == criteo_gen.PAIR_RANK
        assert table.std() == pytest.approx(criteo_gen.PAIR_EFFECT_SD, rel=0.25)
    with pytest.raises(ValueError, match="max_vocab must be >= 2"):
        criteo_gen.cardinalities(1)


def test_dense_taobao_catalogue() -> None:
    cat = taobao_gen.build_catalogue(0, 1_000_000, users=300, ads=500)
    assert cat.user_id.size == 300 and cat.ad_id.size == 500
    assert taobao_gen.build_catalogue(0, 1_000_000).user_id.size == 1_000_000 // 12
    with pytest.raises(ValueError, match=r"ads must be in \[1, 846812\]"):
        taobao_gen.build_catalogue(0, 1000, ads=0)
    with pytest.raises(ValueError, match="max_vocab, hashed and pairs are options of synthetic criteo data"):
        generate("taobao", 10, Path("unused"), max_vocab=5)


def write_criteo_tsv(src_dir: str | Path, out_path: str | Path, batch_rows: int = 65536) -> int:
    """Write generated Criteo Parquet data in the raw Criteo layout: no header, tab-separated,
    ``label, I1..I13, C1..C26``, empty fields for missing values (``true_prob`` is dropped).

    Args:
        src_dir (str | Path): a folder written by ``generate("criteo", ...)``.
        out_path (str | Path): the text file to write (``.gz`` compresses).
        batch_rows (int): rows converted at a time.

    Returns:
        int: rows written.

    """
    source = ParquetSource(str(src_dir))
    schema = pa.schema([source.schema().field(c) for c in CRITEO_COLUMNS])
    options = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    rows = 0
    with (
        pa.output_stream(str(out_path), compression="detect") as sink,
        pacsv.CSVWriter(sink, schema, write_options=options) as writer,
    ):
        for sb in source.iter_batches(batch_rows=batch_rows, columns=list(CRITEO_COLUMNS)):
            writer.write_batch(sb.batch)
            rows += sb.num_rows
    return rows


def test_criteo_tsv_round_trip(criteo: tuple[GenerateReport, pa.Table], tmp_path: Path) -> None:
    report, table = criteo
    out = tmp_path / "day_0.tsv"
    assert write_criteo_tsv(Path(report.meta).parent, out) == table.num_rows
    first = out.read_text().split("\n", 1)[0].split("\t")
    assert len(first) == 40 and first[0] in ("0", "1")
    source = CsvSource(str(out), criteo_csv_options())
    back = pa.Table.from_batches([sb.batch for sb in source.iter_batches()])
    assert back.equals(table.drop_columns(["true_prob"]))


def test_hex_strings() -> None:
    assert hex_strings(np.array([255, 0xDEADBEEF], dtype=np.uint32)).to_pylist() == ["000000ff", "deadbeef"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_generate_shows_progress_on_a_terminal_only(tmp_path, monkeypatch, terminal):
    # Issue 17: `data generate` of millions of rows ran without a sign of life.
    import recpipe.data.types as types

    monkeypatch.setattr(types, "PROGRESS_DELAY_S", 0.0)
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    generate("criteo", 3000, tmp_path / "c", chunk_rows=1000)
    shown = err.getvalue()
    assert ("generate criteo" in shown and "/3.00k" in shown) if terminal else shown == ""


def test_criteo_hashed_is_torcheasyrecs_layout_of_the_same_rows(tmp_path: Path) -> None:
    """TorchEasyRec's Criteo examples read ``criteo_terabyte_*_hashed_v1``: ``int_0..int_12`` and integer
    ids ``cat_0..cat_25`` (its dlrm_criteo.config maps them with ``num_buckets``)."""
    kaggle = pq.read_table(generate("criteo", 500, tmp_path / "k", seed=4).files)
    hashed = pq.read_table(generate("criteo", 500, tmp_path / "h", seed=4, hashed=1).files)
    expected = ["label"] + [f"int_{i}" for i in range(13)] + [f"cat_{i}" for i in range(26)] + ["true_prob"]
    assert hashed.schema.names == expected
    assert all(hashed.schema.field(f"cat_{i}").type == pa.int64() for i in range(26))
    assert hashed["label"].equals(kaggle["label"]) and hashed["int_1"].equals(kaggle["I2"])
    # cat_k is the index of C(k+1)'s value in its vocabulary, hashed into the Terabyte table's buckets: one
    # id per value where the column has no more values than buckets, nulls where it is null.
    for k in (0, 5, 18):
        c, h = kaggle[f"C{k + 1}"].to_pylist(), hashed[f"cat_{k}"].to_pylist()
        assert [x is None for x in c] == [x is None for x in h]
        pairs = {(a, b) for a, b in zip(c, h) if a is not None}
        assert len(pairs) == len({a for a, _ in pairs}) > 1  # one id per value
        buckets = min(CARDINALITIES[k], TERABYTE_BUCKETS[k])
        assert all(0 <= b < buckets for _, b in pairs)
        if CARDINALITIES[k] <= TERABYTE_BUCKETS[k]:
            assert len({b for _, b in pairs}) == len(pairs)  # and one value per id
    # Every id is a row of TorchEasyRec's tables (pre-encoded input uses ids as rows).
    assert all(pc.max(hashed[f"cat_{k}"]).as_py() < n for k, n in enumerate(TERABYTE_BUCKETS))
    assert pc.max(hashed["cat_5"]).as_py() == 2  # 24 Kaggle values into the Terabyte table's 3 buckets
    with pytest.raises(ValueError, match="hashed must be 0 or 1 and pairs 0, 1 or 2"):
        generate("criteo", 10, tmp_path / "x", hashed=2)
    with pytest.raises(ValueError, match="max_vocab, hashed and pairs are options of synthetic criteo"):
        generate("taobao", 10, tmp_path / "x", hashed=1)


def test_criteo_without_pair_effects_keeps_the_rows_and_drops_only_the_pairs(tmp_path: Path) -> None:
    """``pairs=0``: the same draws (columns, values, nulls), a click model of first-order effects only."""
    with_pairs = criteo_gen.build_model(2, max_vocab=50)
    first_order = criteo_gen.build_model(2, max_vocab=50, pairs=False)
    table_a, _, prob_a = criteo_gen.make_chunk(with_pairs, 2, 0, 2000)
    table_b, _, prob_b = criteo_gen.make_chunk(first_order, 2, 0, 2000)
    assert table_a.drop_columns(["label", "true_prob"]).equals(table_b.drop_columns(["label", "true_prob"]))
    # Rows whose pair columns are all present differ by the pair effects (and the recalibrated intercept).
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    diff = logit(prob_a.astype(np.float64)) - logit(prob_b.astype(np.float64))

    def missing(pair: tuple[int, int]) -> np.ndarray:
        return np.logical_or(*(table_a[f"C{k + 1}"].is_null().to_numpy(zero_copy_only=False) for k in pair))

    one, two = (missing(pair) for pair in criteo_gen.PAIRS)
    assert np.std(diff[~one & ~two]) > 0.2  # the pair effects (sd 0.4 each)
    np.testing.assert_allclose(diff[one & two], with_pairs.base - first_order.base, atol=1e-4)
    report = generate("criteo", 500, tmp_path / "f", seed=2, max_vocab=50, pairs=0)
    assert json.loads((tmp_path / "f" / "_meta.json").read_text())["params"]["pairs"] == 0
    assert report.rows == 500


def test_criteo_fm_pair_effects_are_a_factorization_machines(tmp_path: Path) -> None:
    """``pairs=2``: the same first-order draws, plus sum over every column pair of <w_a[C_a], w_b[C_b]> (the
    term TorchEasyRec's DeepFM models, tzrec/modules/fm.py), null columns left out, sd about 0.57."""
    first_order = criteo_gen.build_model(2, max_vocab=50, pairs=0)
    fm = criteo_gen.build_model(2, max_vocab=50, pairs=2)
    table_a, _, prob_a = criteo_gen.make_chunk(first_order, 2, 0, 3000)
    table_b, _, prob_b = criteo_gen.make_chunk(fm, 2, 0, 3000)
    assert table_a.drop_columns(["label", "true_prob"]).equals(table_b.drop_columns(["label", "true_prob"]))
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    diff = logit(prob_b.astype(np.float64)) - logit(prob_a.astype(np.float64)) - (fm.base - first_order.base)
    # The FM term by brute force over the 325 pairs, for a few rows.
    vocab = [{v: i for i, v in enumerate(fm.vocab[c].to_pylist())} for c in range(26)]
    for r in range(5):
        vecs = []
        for c in range(26):
            value = table_b[f"C{c + 1}"][r].as_py()
            vecs.append(np.zeros(criteo_gen.FM_RANK) if value is None else fm.fm_factors[c][vocab[c][value]])
        brute = sum(vecs[a] @ vecs[b] for a in range(26) for b in range(a + 1, 26))
        assert diff[r] == pytest.approx(brute, abs=1e-4)
    assert 0.35 < np.std(diff) < 0.8
