"""The FAISS index of a retrieval model's catalogue: an exact (flat, inner product) index always, and an HNSW
index when the catalogue is large enough for exact search to cost, its recall against exact measured at export
and its search depth raised until it reaches the floor.

Inner product for both similarities: a cosine model's embeddings are L2-normalised by its towers already, so
its inner product is its cosine, and a model's score is ``u·v / temperature`` (a positive scale: the same
order).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

FLAT_FILE = "flat.faiss"
HNSW_FILE = "hnsw.faiss"
# Below this many items an exact search is a few microseconds a query: no approximate index is built.
ANN_MIN_ITEMS = 20_000
MIN_ANN_RECALL = 0.95
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
# Search depths tried, shallowest first, until the recall against exact reaches the floor.
HNSW_EF_SEARCH = (16, 32, 64, 128, 256, 512, 1024, 2048)


class AnnRecallError(RuntimeError):
    """The approximate index cannot reach the recall floor against exact search."""


@dataclass(frozen=True)
class AnnReport:
    """How an approximate index did against the exact one.

    Args:
        kind (str): ``hnsw``.
        file (str): its file in the index folder.
        k (int): the cut-off the recall is measured at.
        queries (int): queries measured (held-out users' embeddings).
        recall_vs_exact (float): ``|ANN top-k ∩ exact top-k| / k``, averaged over the queries.
        min_recall (float): the floor it had to reach.
        params (dict): ``M``, ``ef_construction``, ``ef_search`` (the depth that reached the floor).
    """

    kind: str
    file: str
    k: int
    queries: int
    recall_vs_exact: float
    min_recall: float
    params: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _faiss() -> Any:
    import faiss

    return faiss


def flat_index(items: np.ndarray) -> Any:
    """The exact inner-product index of ``items`` ``(N, D)`` float32 (row ``j`` is catalogue item ``j``)."""
    faiss = _faiss()
    index = faiss.IndexFlatIP(items.shape[1])
    index.add(np.ascontiguousarray(items, dtype=np.float32))
    return index


def search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` ``(Q, k)`` of ``index``'s top ``k`` for each query, best first. An HNSW index searches
    at least ``k`` deep (its recorded ``ef_search`` was tuned for the recall metric's K; a server asking for 500
    candidates must not get them from a 64-deep search), through per-call parameters: the index is not changed."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None and hnsw.efSearch < k:
        params = _faiss().SearchParametersHNSW()
        params.efSearch = k
        return index.search(queries, k, params=params)
    return index.search(queries, k)


def recall_vs_exact(exact_rows: np.ndarray, ann_rows: np.ndarray) -> float:
    """The mean share of each query's exact top ``k`` that the approximate top ``k`` holds.

    Example::

        recall_vs_exact(np.array([[1, 2], [3, 4]]), np.array([[2, 9], [3, 4]]))   # (0.5 + 1.0) / 2 = 0.75
    """
    if exact_rows.shape != ann_rows.shape:
        raise ValueError(f"exact {exact_rows.shape} and approximate {ann_rows.shape} results differ in shape")
    k = exact_rows.shape[1]
    found = [np.intersect1d(e, a[a >= 0]).size for e, a in zip(exact_rows, ann_rows)]
    return float(np.mean(found) / k) if found else 1.0


def hnsw_index(
    items: np.ndarray,
    queries: np.ndarray,
    k: int,
    exact_rows: np.ndarray,
    min_recall: float = MIN_ANN_RECALL,
) -> tuple[Any, AnnReport]:
    """An HNSW inner-product index of ``items`` whose recall@k against ``exact_rows`` (the flat index's top
    ``k`` of ``queries``) reaches ``min_recall``, at the shallowest search depth that does.

    Raises:
        AnnRecallError: no depth of :data:`HNSW_EF_SEARCH` reaches ``min_recall`` (the numbers named).
    """
    faiss = _faiss()
    # faiss draws HNSW's levels from its own fixed-seed generator: the same items build the same graph
    index = faiss.IndexHNSWFlat(items.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.add(np.ascontiguousarray(items, dtype=np.float32))
    tried = []
    for ef in HNSW_EF_SEARCH:
        index.hnsw.efSearch = ef
        _, rows = search(index, queries, k)
        recall = recall_vs_exact(exact_rows, rows)
        tried.append(f"ef_search {ef}: {recall:.4f}")
        if recall >= min_recall:
            params = {"M": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": ef}
            return index, AnnReport("hnsw", HNSW_FILE, k, len(queries), recall, min_recall, params)
    raise AnnRecallError(
        f"the HNSW index of {items.shape[0]} items does not reach recall@{k} {min_recall} against exact search "
        f"({'; '.join(tried)})"
    )


def write_index(index: Any, path: Path) -> None:
    _faiss().write_index(index, str(path))


def read_index(path: Path, ef_search: int | None = None) -> Any:
    """An index file (its folder verified by the caller); an HNSW index at the recorded search depth."""
    index = _faiss().read_index(str(path))
    if ef_search is not None:
        index.hnsw.efSearch = int(ef_search)
    return index
