"""Retrieval metrics over the whole item catalogue, by exact brute force: every query's scores against every
item (``user @ items.T`` in chunks), its top ``K``, and how many of its target items are among them.

- ``recall@K``: found targets over all targets (micro; TorchEasyRec's ``RecallAtK``, tzrec/metrics/recall_at_k.py,
  counts ``Σ true positives / Σ targets`` alike, but over each row's ``[positive | sampled negatives]`` and not
  over the catalogue);
- ``hit_rate@K``: the share of queries with at least one target in their top ``K``.

With one target per query (one row per positive), the two are equal. :func:`evaluate_retrieval` scores a
trained model's evaluation rows so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pyarrow as pa

    from recpipe.config import RecpipeConfig
    from recpipe.data.negative_sampler import ItemTable
    from recpipe.features.spec import FeatureSpec

DEFAULT_CHUNK = 4096


@dataclass(frozen=True)
class RetrievalScores:
    """recall@K and hit-rate@K of a set of queries.

    Args:
        k (int): the cut-off.
        recall (float): found targets / targets.
        hit_rate (float): queries with a target found / queries.
        queries (int): queries scored (those with at least one target).
        targets (int): their targets in all.
    """

    k: int
    recall: float
    hit_rate: float
    queries: int
    targets: int


def top_k_items(
    queries: torch.Tensor,
    items: torch.Tensor,
    k: int,
    chunk: int = DEFAULT_CHUNK,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(Q, k)`` int64 catalogue rows of every query's ``k`` highest scores ``queries @ items.T``, best first;
    with several interests per query (MIND), an item's score is its best inner product with the query's real
    interests.

    Args:
        queries (torch.Tensor): ``(Q, D)`` user embeddings, or ``(Q, K, D)`` interests with ``mask``.
        items (torch.Tensor): ``(N, D)`` every item's embedding.
        k (int): how many (``1 <= k <= N``).
        chunk (int): queries scored at once (memory ``chunk × N`` floats; ``× K`` with interests).
        mask (torch.Tensor | None): ``(Q, K)`` bool, the real interests (each query needs one).

    Example::

        top_k_items(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0]]), 2)
        # tensor([[1, 2]])
        top_k_items(torch.tensor([[[1.0, 0.0], [0.0, 3.0]]]), torch.tensor([[0.0, 1.0], [2.0, 0.0]]), 1,
                    mask=torch.tensor([[True, True]]))
        # tensor([[0]]): item 0 scores max(0, 3) = 3, item 1 max(2, 0) = 2
    """
    interests = mask is not None
    if interests:
        assert mask is not None
        if queries.dim() != 3 or mask.shape != queries.shape[:2]:
            raise ValueError(
                f"interests (Q, K, D) and mask (Q, K) must agree, got {tuple(queries.shape)} and "
                f"{tuple(mask.shape)}"
            )
        if mask.shape[0] and not bool(mask.any(dim=1).all()):
            raise ValueError("every query needs at least one real interest in mask")
    if queries.dim() != (3 if interests else 2) or items.dim() != 2 or queries.shape[-1] != items.shape[1]:
        raise ValueError(
            f"queries (Q, D) (or interests (Q, K, D) with a mask) and items (N, D) must share D, got "
            f"{tuple(queries.shape)} and {tuple(items.shape)}"
        )
    if not 1 <= k <= items.shape[0]:
        raise ValueError(f"k must be in [1, {items.shape[0]}] (the catalogue's size), got {k}")
    if interests:  # the (chunk, K, N) scores stay the size of a single-interest chunk's
        chunk = max(1, chunk // queries.shape[1])
    out = []
    for start in range(0, queries.shape[0], chunk):
        if mask is not None:
            per = torch.einsum("qkd,nd->qkn", queries[start : start + chunk], items)
            closed = ~mask[start : start + chunk].unsqueeze(2)
            scores = per.masked_fill(closed, float("-inf")).amax(dim=1)
        else:
            scores = queries[start : start + chunk] @ items.T
        out.append(torch.topk(scores, k, dim=1).indices)
    if not out:
        return torch.zeros(0, k, dtype=torch.int64)
    return torch.cat(out)


def recall_at_k(
    queries: torch.Tensor,
    items: torch.Tensor,
    targets: Sequence[np.ndarray | Sequence[int]],
    k: int,
    chunk: int = DEFAULT_CHUNK,
    mask: torch.Tensor | None = None,
) -> RetrievalScores:
    """recall@K and hit-rate@K of ``queries`` over the catalogue ``items``, exactly.

    Args:
        queries (torch.Tensor): ``(Q, D)`` user embeddings, or ``(Q, K, D)`` interests with ``mask``
            (:func:`top_k_items`).
        items (torch.Tensor): ``(N, D)`` the catalogue's item embeddings (row ``j`` is item ``j``).
        targets (Sequence): per query, the catalogue rows of its relevant items (distinct); a query without
            any is not counted.
        k (int): the cut-off.
        chunk (int): queries scored at once.
        mask (torch.Tensor | None): ``(Q, K)`` the real interests of interest queries.

    Example::

        # query 0 ranks items 1, 2, 0; its targets {2, 0}: at K = 2 one of two is found
        recall_at_k(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0]]), [[2, 0]], 2)
        # RetrievalScores(k=2, recall=0.5, hit_rate=1.0, queries=1, targets=2)
    """
    if len(targets) != queries.shape[0]:
        raise ValueError(f"{queries.shape[0]} queries but {len(targets)} target lists")
    top = top_k_items(queries, items, k, chunk, mask).cpu().numpy()
    found = total = hit = counted = 0
    for row, want in zip(top, targets):
        want = np.asarray(want, dtype=np.int64)
        if want.size == 0:
            continue
        if np.unique(want).size != want.size:
            raise ValueError(f"a query's targets must be distinct, got {want.tolist()}")
        if want.min() < 0 or want.max() >= items.shape[0]:
            raise ValueError(f"target rows must be in [0, {items.shape[0]}), got {want.tolist()}")
        n = int(np.isin(want, row).sum())
        found += n
        total += want.size
        hit += n > 0
        counted += 1
    if counted == 0:
        raise ValueError("no query has a target: recall is undefined")
    return RetrievalScores(k, found / total, hit / counted, counted, total)


def targets_by_query(query_ids: np.ndarray, item_rows: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Group rows ``(query id, item row)`` into one query per distinct id and its distinct items (a user's
    positives together: recall then counts each of them, hit-rate the user once).

    Returns:
        tuple: the distinct query ids (sorted), and each one's item rows.

    Example::

        targets_by_query(np.array([7, 3, 7]), np.array([0, 2, 1]))   # (array([3, 7]), [array([2]), array([0, 1])])
    """
    order = np.lexsort((item_rows, query_ids))
    q, it = np.asarray(query_ids)[order], np.asarray(item_rows)[order]
    keys, starts = np.unique(q, return_index=True)
    groups = [np.unique(part) for part in np.split(it, starts[1:])]
    return keys, groups


@torch.no_grad()
def evaluate_retrieval(
    model: torch.nn.Module, spec: FeatureSpec, rows: pa.Table, items: ItemTable, ks: tuple[int, ...]
) -> dict[int, RetrievalScores]:
    """recall@K and hit-rate@K of every row (its user against the whole catalogue ``items``, its item the
    target), for each ``k`` of ``ks``, by exact brute force; a multi-interest model's user scores an item by
    its best real interest.

    Args:
        model (torch.nn.Module): a :class:`~recpipe.models.protocol.RetrievalModel` or a
            :class:`~recpipe.models.protocol.MultiInterestModel`.
        spec (FeatureSpec): its FeatureSpec.
        rows (pa.Table): the evaluation rows (positives).
        items (ItemTable): the whole catalogue.
        ks (tuple[int, ...]): the cut-offs.
    """
    from recpipe.features.fg import FeatureGenerator
    from recpipe.models.protocol import MultiInterestModel
    from recpipe.train.retrieval import item_rows, rows_batch

    fg = FeatureGenerator(spec)
    model.eval()
    batch = rows_batch(fg, rows)
    mask = None
    if isinstance(model, MultiInterestModel):
        users, mask = model.user_interests(batch.dense, batch.sparse)
    else:
        users = model.user_embedding(batch.dense, batch.sparse)
    catalogue = rows_batch(fg, item_rows(items.attrs, rows.schema, tuple(spec.labels)))
    item_emb = model.item_embedding(catalogue.dense, catalogue.sparse)
    targets = [[r] for r in items.rows_of(rows.column(items.item_id_field).combine_chunks())]
    return {k: recall_at_k(users, item_emb, targets, k, mask=mask) for k in ks}


def evaluate_retrieval_from_config(
    cfg: RecpipeConfig,
    model: torch.nn.Module,
    spec: FeatureSpec,
    rows: pa.Table,
    items: ItemTable | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[int, RetrievalScores]:
    """:func:`evaluate_retrieval` at the config's cut-offs ``eval.recall_at_k``, over the catalogue of
    ``data.negative_sampler`` (its item table, read whole) unless ``items`` is given.

    Raises:
        ValueError: no ``items`` and no ``data.negative_sampler``.

    Example::

        run = train_retrieval(cfg, spec, rows)
        evaluate_retrieval_from_config(cfg, run.model, spec, eval_rows)   # {10: RetrievalScores, 50: ...}
    """
    from recpipe.data.negative_sampler import load_item_table

    if items is None:
        if cfg.data.negative_sampler is None:
            raise ValueError(
                "retrieval evaluation needs the catalogue: give data.negative_sampler (the item table)"
            )
        items = load_item_table(cfg.data.negative_sampler, cfg.data.params, environ)
    return evaluate_retrieval(model, spec, rows, items, tuple(cfg.eval.recall_at_k))


def retrieval_metrics(
    model: torch.nn.Module, spec: FeatureSpec, rows: pa.Table, items: ItemTable, ks: tuple[int, ...]
) -> dict[str, float | int]:
    """:func:`evaluate_retrieval` flattened into named metrics: ``recall_at_<k>``, ``hit_rate_at_<k>`` for each
    ``k``, and ``queries`` (what a training run's ``train_result.json`` and the evaluate stage's report hold).

    Example::

        retrieval_metrics(model, spec, eval_rows, items, (10, 50))
        # {"recall_at_10": 0.31, "hit_rate_at_10": 0.31, "recall_at_50": 0.66, ..., "queries": 4000}
    """
    scores = evaluate_retrieval(model, spec, rows, items, ks)
    out: dict[str, float | int] = {}
    for k, s in scores.items():
        out[f"recall_at_{k}"] = s.recall
        out[f"hit_rate_at_{k}"] = s.hit_rate
    out["queries"] = next(iter(scores.values())).queries
    return out
