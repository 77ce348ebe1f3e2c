"""recall@K and hit-rate@K over the catalogue, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recpipe.eval.retrieval import RetrievalScores, recall_at_k, targets_by_query, top_k_items

ITEMS = torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0], [-1.0, -1.0]])
# query 0 = (1, 0) scores items [0, 2, 1, -1]: order 1, 2, 0, 3; query 1 = (0, 1) scores [1, 0, 0, -1]: 0 first, 3 last
QUERIES = torch.tensor([[1.0, 0.0], [0.0, 1.0]])


def test_top_k_by_hand() -> None:
    assert top_k_items(QUERIES[:1], ITEMS, 3).tolist() == [[1, 2, 0]]
    assert top_k_items(QUERIES, ITEMS, 1, chunk=1).tolist() == [[1], [0]]


def test_recall_and_hit_rate_by_hand() -> None:
    # query 0 wants {0, 2}: at K=2 it finds 2 only; query 1 wants {3}: its last
    got = recall_at_k(QUERIES, ITEMS, [[0, 2], [3]], k=2)
    assert got == RetrievalScores(k=2, recall=1 / 3, hit_rate=0.5, queries=2, targets=3)
    got = recall_at_k(QUERIES, ITEMS, [[0, 2], []], k=3)  # a query without targets is not counted
    assert got == RetrievalScores(k=3, recall=1.0, hit_rate=1.0, queries=1, targets=2)


def test_refusals() -> None:
    with pytest.raises(ValueError, match=r"k must be in \[1, 4\]"):
        recall_at_k(QUERIES, ITEMS, [[0], [1]], k=5)
    with pytest.raises(ValueError, match="distinct"):
        recall_at_k(QUERIES, ITEMS, [[0, 0], [1]], k=1)
    with pytest.raises(ValueError, match=r"target rows must be in \[0, 4\)"):
        recall_at_k(QUERIES, ITEMS, [[4], [1]], k=1)
    with pytest.raises(ValueError, match="2 queries but 1"):
        recall_at_k(QUERIES, ITEMS, [[0]], k=1)


def test_targets_by_query() -> None:
    keys, groups = targets_by_query(np.array([7, 3, 7, 7]), np.array([0, 2, 1, 0]))
    assert keys.tolist() == [3, 7] and [g.tolist() for g in groups] == [[2], [0, 1]]
