"""synthetic:retrieval: deterministic rows of positives, the item table's weights, the oracle recall@K."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from recpipe.data.sources import SyntheticSource, parse_synthetic
from recpipe.data.synthetic import generate
from recpipe.data.synthetic.retrieval import ITEMS_FILE, build_world, draw_rows, oracle_recall


def test_rows_items_and_oracle(tmp_path) -> None:
    r = generate("retrieval", 3000, tmp_path / "a", seed=1, users=50, items=80, chunk_rows=1000)
    again = generate("retrieval", 3000, tmp_path / "b", seed=1, users=50, items=80, chunk_rows=1000)
    rows = pq.read_table(r.files[0])
    assert rows.column_names == ["user_id", "user_segment", "item_id", "cate_id", "clk"]
    assert rows.equals(pq.read_table(again.files[0])) and len(r.files) == 3
    assert set(rows.column("clk").to_pylist()) == {1}
    items = pq.read_table(tmp_path / "a" / ITEMS_FILE)
    assert items.num_rows == 80 and items.column_names == ["item_id", "weight", "cate_id"]
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
    with pytest.raises(ValueError, match="items and dim are options of synthetic retrieval data"):
        generate("taobao", 100, tmp_path, items=5)
    with pytest.raises(ValueError, match=r"items must be in \[2, 100000\)"):
        generate("retrieval", 100, tmp_path, items=1)
