"""The FAISS index's search: an HNSW index tuned for the recall metric's K (a shallow ``ef_search``) still answers a
deeper request (a server's 500 candidates) as deep as it asks, not with a 16-deep search's few hundred items."""

from __future__ import annotations

import numpy as np

from recpipe.export import faiss_index


def test_an_hnsw_index_searches_at_least_k_deep_without_changing_its_depth() -> None:
    rng = np.random.default_rng(0)
    items = rng.normal(size=(20_000, 16)).astype(np.float32)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    queries = rng.normal(size=(100, 16)).astype(np.float32)
    flat = faiss_index.flat_index(items)
    index, report = faiss_index.hnsw_index(items, queries, 50, faiss_index.search(flat, queries, 50)[1])
    depth = report.params["ef_search"]
    assert depth < 500  # tuned for K=50
    index.hnsw.efSearch = depth  # as read back for serving
    _, exact = faiss_index.search(flat, queries, 500)
    scores, rows = faiss_index.search(index, queries, 500)
    assert (rows >= 0).all() and faiss_index.recall_vs_exact(exact, rows) >= 0.99
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    # the raw search at the recorded depth is what the 500 would have been: far from exact
    assert faiss_index.recall_vs_exact(exact, index.search(queries, 500)[1]) < 0.9
    assert index.hnsw.efSearch == depth  # per-call parameters: the index keeps its depth
