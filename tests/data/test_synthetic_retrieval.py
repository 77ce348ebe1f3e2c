"""synthetic:retrieval: deterministic rows of positives, the item table's weights, the oracle recall@K."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from recpipe.auc import binary_auc
from recpipe.data.sources import SyntheticSource, parse_synthetic
from recpipe.data.synthetic import generate
from recpipe.data.synthetic.retrieval import (
    ITEMS_FILE,
    build_world,
    draw_impressions,
    draw_rows,
    oracle_recall,
)


def test_rows_items_and_oracle(tmp_path) -> None:
    r = generate("retrieval", 3000, tmp_path / "a", seed=1, users=50, items=80, chunk_rows=1000)
    again = generate("retrieval", 3000, tmp_path / "b", seed=1, users=50, items=80, chunk_rows=1000)
    rows = pq.read_table(r.files[0])
    assert rows.column_names == ["user_id", "user_segment", "item_id", "cate_id", "clk"]
    assert rows.equals(pq.read_table(again.files[0])) and len(r.files) == 3
    assert set(rows.column("clk").to_pylist()) == {1}
    items = pq.read_table(tmp_path / "a" / ITEMS_FILE)
    assert items.num_rows == 80 and items.column_names == ["item_id", "weight", "cate_id", "brand_id"]
    assert float(np.sum(items.column("weight"))) == pytest.approx(1.0)
    # the oracle: each row's item among the top K of its user's true logits, recomputed here directly
    world = build_world(1, 3000, 50, 80)
    users, chosen, ranks = draw_rows(world, 1, 0, 1000)
    logits = world.logits(users)
    direct = (logits > logits[np.arange(1000), chosen][:, None]).sum(axis=1)
    assert ranks.tolist() == direct.tolist()
    assert oracle_recall(ranks, 5) == pytest.approx(float((direct < 5).mean()))
    meta = json.loads((tmp_path / "a" / "_meta.json").read_text())
    assert sorted(r.oracle_recall) == [1, 5, 10, 50] and meta["oracle_recall"]["5"] == r.oracle_recall[5]
    assert r.oracle_recall[1] < r.oracle_recall[5] < r.oracle_recall[50] < 1.0
    assert r.oracle_recall[10] > 2 * 10 / 80  # latent taste carries signal beyond popularity-free chance
    # an item's weight is its share of the rows: close to its empirical frequency
    freq = np.bincount(
        np.searchsorted(np.sort(world.item_id), rows.column("item_id").to_numpy()), minlength=80
    )
    order = np.argsort(world.item_id)
    assert np.corrcoef(freq / 1000, world.item_marginal()[order])[0, 1] > 0.9


def test_the_uri_and_refusals(tmp_path) -> None:
    assert parse_synthetic("synthetic:retrieval?rows=500&items=40&dim=4") == SyntheticSource(
        "retrieval", 500, 0, {"items": 40, "dim": 4}
    )
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['ads'\]"):
        parse_synthetic("synthetic:retrieval?ads=3")
    with pytest.raises(ValueError, match="items, dim and ranking are options of synthetic retrieval data"):
        generate("taobao", 100, tmp_path, items=5)
    with pytest.raises(ValueError, match=r"items must be in \[2, 100000\)"):
        generate("retrieval", 100, tmp_path, items=1)


def test_ranking_impressions_share_the_world(tmp_path) -> None:
    """ranking=1: the same world's impressions (0/1 clicks, brand_id, true_prob) and the same item table, so a
    retriever and a ranker trained on the two are a pair; the clicks follow the recorded probabilities."""
    ret = generate("retrieval", 4000, tmp_path / "ret", seed=3, users=60, items=90, chunk_rows=2000)
    rank = generate(
        "retrieval", 4000, tmp_path / "rank", seed=3, users=60, items=90, chunk_rows=2000, ranking=1
    )
    assert pq.read_table(tmp_path / "ret" / ITEMS_FILE).equals(pq.read_table(tmp_path / "rank" / ITEMS_FILE))
    rows = pq.read_table(rank.files)
    assert rows.column_names == [
        "user_id",
        "user_segment",
        "item_id",
        "cate_id",
        "brand_id",
        "clk",
        "true_prob",
    ]
    world = build_world(3, 4000, 60, 90)
    # every row's attributes are its item's, and its user's segment is the user's
    item_at = {int(i): k for k, i in enumerate(world.item_id)}
    idx = np.array([item_at[int(i)] for i in rows.column("item_id").to_pylist()])
    assert rows.column("brand_id").to_numpy().tolist() == world.item_brand[idx].tolist()
    assert rows.column("cate_id").to_numpy().tolist() == world.item_cate[idx].tolist()
    users, items, prob, clicks = draw_impressions(world, 3, 0, 2000)
    expect = 1 / (1 + np.exp(-world.click_logits(users, items)))
    assert np.allclose(prob, expect) and rows.column("clk").to_numpy()[:2000].tolist() == clicks.tolist()
    assert 0.15 < rank.positive_rate < 0.6 and abs(clicks.mean() - prob.mean()) < 0.03
    labels = rows.column("clk").to_numpy()
    assert rank.oracle_auc == pytest.approx(binary_auc(labels, rows.column("true_prob").to_numpy()), abs=1e-6)
    assert rank.oracle_auc > 0.7 and np.isnan(ret.oracle_auc) and rank.oracle_recall == {}
    meta = json.loads((tmp_path / "rank" / "_meta.json").read_text())
    assert meta["ranking"] is True and meta["oracle_auc"] == rank.oracle_auc and "oracle_recall" not in meta
    # the brands move the clicks: the same affinity with another brand is another probability
    assert np.std(world.brand_bias) > 0.3
    assert parse_synthetic("synthetic:retrieval?rows=500&ranking=1").options == {"ranking": 1}
    with pytest.raises(ValueError, match="ranking must be 0 or 1"):
        generate("retrieval", 100, tmp_path / "x", ranking=2)
