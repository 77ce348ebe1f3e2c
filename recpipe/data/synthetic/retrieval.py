"""Synthetic retrieval data: users and items with latent vectors, rows that are a user's positive item (a click;
TorchEasyRec's DSSM trains on positives only), an item table to draw negatives from, and the oracle recall@K.

The world (one per seed): ``cates`` topic centres in ``R^dim``; each item a topic (its ``cate_id``), a vector
``centre + 0.6·noise`` and a Zipf popularity; each user a favourite topic (its ``user_segment``) and a vector
``centre + 0.6·noise``. A row draws a user (mildly Zipf) and then its item from

    P(item j | user u) ∝ exp(AFFINITY · u·v_j + log pop_j)

so an item is found by the user's taste and by its popularity. The item table (``_items.parquet``, one row per
item: ``item_id``, ``weight``, ``cate_id``) weights each item by its marginal probability of being a row's item,
the sampling probability of the in-batch log-Q correction. The **oracle** ranks every item for a user by the true
``log P(j | u)``; its recall@K over the rows (each row's item among the user's top K) is the ceiling a learned
two-tower model approaches, recorded in ``_meta.json`` for K in :data:`ORACLE_KS`.

The same world also gives a **ranker's** rows (``ranking=True``): impressions, each a user and a shown item (half
drawn as a row's item is, from ``P(j | u)``: what a retriever would surface; half by popularity alone) with a click
``clk ~ Bernoulli(sigmoid(AFFINITY · u·v_j + brand_bias_j + CLICK_BIAS))``. Every item has a ``brand_id`` (one per
10 items) whose bias the clicks see and the retrieval rows do not: an attribute only a ranker uses, carried by the
item table, so the ranked candidates' attributes must travel with the retriever's catalogue. The oracle AUC of the
true click probabilities is recorded. A retriever and a ranker trained on the two datasets of one world
(``seed``, ``users``, ``items``, ``dim`` the same) are a pair: the item table is the same file content.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recpipe.auc import binary_auc
from recpipe.data.synthetic.common import (
    META_FILE,
    ROW_GROUP_ROWS,
    GenerateReport,
    ZipfSampler,
    distinct_ids,
    zipf_weights,
)

NUM_BUCKETS = {"user_id": 100_000, "user_segment": 1_000, "item_id": 100_000, "cate_id": 1_000}
ITEMS_FILE = "_items.parquet"  # a leading "_": a folder read as training data skips it
LABEL = "clk"
ORACLE_KS = (1, 5, 10, 50, 100)
AFFINITY = 3.0  # weight of u·v in the item logit
NOISE = 0.6  # spread of users and items around their topic's centre
ITEM_POP_EXPONENT = 0.8
ITEMS_PER_BRAND = 10
BRAND_BIAS_SCALE = 0.7  # standard deviation of a brand's click bias
CLICK_BIAS = -2.0  # the click logit's intercept (a click rate of roughly 0.35 among the shown items)
USER_POP_EXPONENT = 0.5
_BLOCK = 4096  # rows whose item logits are drawn at once (block × items floats)
_TAG = 0x2E7121  # separates this generator's random streams from the others'
_BRAND_TAG = 0xB2A4D  # the brands' own stream: adding them left every earlier draw of a world unchanged
_RANKING_TAG = 0x2A4C  # the impressions' stream (a ranking chunk's draws are not a retrieval chunk's)


@dataclass
class RetrievalWorld:
    """Users, items and their latent vectors for one seed (indices inside, ids on output).

    Args:
        user_id (np.ndarray): ``(U,)`` distinct ids.
        user_segment (np.ndarray): ``(U,)`` each user's favourite topic.
        user_vec (np.ndarray): ``(U, dim)``.
        user_pop (ZipfSampler): how often each user has a row.
        item_id (np.ndarray): ``(N,)`` distinct ids.
        item_cate (np.ndarray): ``(N,)`` each item's topic.
        item_vec (np.ndarray): ``(N, dim)``.
        item_log_pop (np.ndarray): ``(N,)`` log popularity (the logit's item term).
        item_brand (np.ndarray): ``(N,)`` each item's brand (one per :data:`ITEMS_PER_BRAND` items).
        brand_bias (np.ndarray): ``(brands,)`` each brand's term in the click logit (impressions only).
    """

    user_id: np.ndarray
    user_segment: np.ndarray
    user_vec: np.ndarray
    user_pop: ZipfSampler
    item_id: np.ndarray
    item_cate: np.ndarray
    item_vec: np.ndarray
    item_log_pop: np.ndarray
    item_brand: np.ndarray
    brand_bias: np.ndarray

    def logits(self, users: np.ndarray) -> np.ndarray:
        """``(len(users), N)`` the true ``log P(j | u)`` up to a per-user constant (the oracle's scores)."""
        return AFFINITY * self.user_vec[users] @ self.item_vec.T + self.item_log_pop

    def click_logits(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """``(n,)`` the true click logit of each (user, shown item) pair of an impression."""
        affinity = np.einsum("nd,nd->n", self.user_vec[users], self.item_vec[items])
        return AFFINITY * affinity + self.brand_bias[self.item_brand[items]] + CLICK_BIAS

    def item_marginal(self) -> np.ndarray:
        """``(N,)`` every item's probability of being a row's item: ``Σ_u P(u) P(j | u)``."""
        p_user = np.diff(np.concatenate([[0.0], self.user_pop._cdf]))
        out = np.zeros(self.item_id.size)
        for start in range(0, self.user_id.size, _BLOCK):
            users = np.arange(start, min(start + _BLOCK, self.user_id.size))
            out += p_user[users] @ _softmax(self.logits(users))
        return out / out.sum()


def build_world(
    seed: int, rows: int, users: int | None = None, items: int | None = None, dim: int = 8
) -> RetrievalWorld:
    """The world of ``seed``: ``users`` (default one per 20 rows, at least 10) and ``items`` (default one per
    50 rows, at least 10), ``dim``-dimensional latent vectors, one topic per 25 items (at least 4).

    Raises:
        ValueError: a size below 2 or above the id space (:data:`NUM_BUCKETS`).
    """
    n_users = users if users is not None else max(10, rows // 20)
    n_items = items if items is not None else max(10, rows // 50)
    for what, n, key in (("users", n_users, "user_id"), ("items", n_items, "item_id")):
        if not 2 <= n < NUM_BUCKETS[key]:
            raise ValueError(f"synthetic retrieval: {what} must be in [2, {NUM_BUCKETS[key]}), got {n}")
    if dim < 1:
        raise ValueError(f"synthetic retrieval: dim must be >= 1, got {dim}")
    rng = np.random.default_rng([seed, _TAG])
    cates = max(4, n_items // 25)
    centres = rng.standard_normal((cates, dim)) / np.sqrt(dim)
    item_cate = rng.integers(0, cates, n_items)
    item_vec = centres[item_cate] + NOISE * rng.standard_normal((n_items, dim)) / np.sqrt(dim)
    item_log_pop = np.log(zipf_weights(rng.permutation(n_items), ITEM_POP_EXPONENT))
    user_segment = rng.integers(0, cates, n_users)
    user_vec = centres[user_segment] + NOISE * rng.standard_normal((n_users, dim)) / np.sqrt(dim)
    brand_rng = np.random.default_rng([seed, _TAG, _BRAND_TAG])
    brands = max(2, n_items // ITEMS_PER_BRAND)
    return RetrievalWorld(
        user_id=distinct_ids(rng, n_users, NUM_BUCKETS["user_id"]),
        user_segment=user_segment.astype(np.int64),
        user_vec=user_vec,
        user_pop=ZipfSampler(n_users, USER_POP_EXPONENT),
        item_id=distinct_ids(rng, n_items, NUM_BUCKETS["item_id"]),
        item_cate=item_cate.astype(np.int64),
        item_vec=item_vec,
        item_log_pop=item_log_pop,
        item_brand=brand_rng.integers(0, brands, n_items).astype(np.int64),
        brand_bias=BRAND_BIAS_SCALE * brand_rng.standard_normal(brands),
    )


def draw_rows(
    world: RetrievalWorld, seed: int, chunk: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` rows of chunk ``chunk``: user indices, item indices (Gumbel-max from ``P(j | u)``), and each item's
    oracle rank (how many items the oracle scores above it for that user; 0: its first choice)."""
    rng = np.random.default_rng([seed, _TAG, chunk])
    users = world.user_pop.sample(rng, n)
    items = np.empty(n, dtype=np.int64)
    ranks = np.empty(n, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        block = users[start : start + _BLOCK]
        logits = world.logits(block)
        chosen = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
        items[start : start + block.size] = chosen
        ranks[start : start + block.size] = (logits > logits[np.arange(block.size), chosen][:, None]).sum(
            axis=1
        )
    return users, items, ranks


def draw_impressions(
    world: RetrievalWorld, seed: int, chunk: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``n`` impressions of chunk ``chunk``: user indices, shown item indices (each half the time from ``P(j | u)``,
    else by popularity alone), the true click probabilities and the drawn clicks."""
    rng = np.random.default_rng([seed, _TAG, _RANKING_TAG, chunk])
    users = world.user_pop.sample(rng, n)
    items = np.empty(n, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        block = users[start : start + _BLOCK]
        logits = world.logits(block)
        by_pop = rng.random(block.size) < 0.5
        logits[by_pop] = world.item_log_pop
        items[start : start + block.size] = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    prob = 1.0 / (1.0 + np.exp(-world.click_logits(users, items)))
    clicks = (rng.random(n) < prob).astype(np.int8)
    return users, items, prob, clicks


def rows_table(
    world: RetrievalWorld,
    users: np.ndarray,
    items: np.ndarray,
    clicks: np.ndarray | None = None,
    prob: np.ndarray | None = None,
) -> pa.Table:
    """The rows as written: ``user_id``, ``user_segment``, ``item_id``, ``cate_id``, then impressions'
    ``brand_id``, and ``clk`` (retrieval rows: 1; impressions: ``clicks``, then ``true_prob``, the oracle's)."""
    columns = {
        "user_id": pa.array(world.user_id[users]),
        "user_segment": pa.array(world.user_segment[users]),
        "item_id": pa.array(world.item_id[items]),
        "cate_id": pa.array(world.item_cate[items]),
    }
    if clicks is not None:
        columns["brand_id"] = pa.array(world.item_brand[items])
    columns[LABEL] = pa.array(np.ones(users.size, dtype=np.int8) if clicks is None else clicks)
    if prob is not None:
        columns["true_prob"] = pa.array(prob.astype(np.float32))
    return pa.table(columns)


def item_table(world: RetrievalWorld) -> pa.Table:
    """One row per item: ``item_id``, ``weight`` (its marginal probability of being a row's item), ``cate_id``,
    ``brand_id`` (the ranker's attribute)."""
    return pa.table(
        {
            "item_id": pa.array(world.item_id),
            "weight": pa.array(world.item_marginal()),
            "cate_id": pa.array(world.item_cate),
            "brand_id": pa.array(world.item_brand),
        }
    )


def oracle_recall(ranks: np.ndarray, k: int) -> float:
    """The oracle's recall@``k`` of rows whose items have these oracle ranks: the share ranked below ``k``."""
    return float((np.asarray(ranks) < k).mean())


def generate_retrieval(
    rows: int,
    out: str | Path,
    seed: int = 0,
    chunk_rows: int = 200_000,
    users: int | None = None,
    items: int | None = None,
    dim: int | None = None,
    ranking: bool = False,
) -> GenerateReport:
    """Write ``rows`` rows into ``out/part-*.parquet``, the item table ``out/_items.parquet`` and ``_meta.json``
    (with ``oracle_recall``: K → the oracle's recall@K over all the rows; impressions: ``oracle_auc``).

    Args:
        ranking (bool): the ranker's rows of the same world (impressions with 0/1 clicks, ``brand_id``)
            instead of the retriever's positives.

    Example::

        >>> r = generate_retrieval(20_000, tmp / "ret", users=500, items=400)
        >>> sorted(r.oracle_recall)          # [1, 5, 10, 50, 100]; r.oracle_recall[50] ≈ 0.6
        >>> r = generate_retrieval(20_000, tmp / "rank", users=500, items=400, ranking=True)
        >>> round(r.oracle_auc, 2), round(r.positive_rate, 2)   # ≈ 0.8, ≈ 0.3; the same _items.parquet
    """
    if rows < 1 or chunk_rows < 1:
        raise ValueError(f"rows and chunk_rows must be >= 1, got {rows} and {chunk_rows}")
    start = time.perf_counter()
    world = build_world(seed, rows, users, items, 8 if dim is None else dim)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("part-*.parquet"), *out.glob("dt=*/part-*.parquet")]:
        stale.unlink()
    files, all_ranks, all_probs, all_clicks = [], [], [], []
    schema = None
    for c, offset in enumerate(range(0, rows, chunk_rows)):
        n = min(chunk_rows, rows - offset)
        if ranking:
            u, it, prob, clicks = draw_impressions(world, seed, c, n)
            table = rows_table(world, u, it, clicks, prob)
            all_probs.append(prob)
            all_clicks.append(clicks)
        else:
            u, it, ranks = draw_rows(world, seed, c, n)
            table = rows_table(world, u, it)
            all_ranks.append(ranks)
        schema = table.schema
        path = out / f"part-{c:05d}.parquet"
        pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)
        files.append(str(path))
    pq.write_table(item_table(world), out / ITEMS_FILE)
    n_items = world.item_id.size
    recall: dict[int, float] = {}
    if ranking:
        clicks = np.concatenate(all_clicks)
        positive_rate = float(clicks.mean())
        oracle_auc = binary_auc(clicks, np.concatenate(all_probs))
    else:
        ranks = np.concatenate(all_ranks)
        recall = {k: oracle_recall(ranks, k) for k in ORACLE_KS if k <= n_items}
        positive_rate, oracle_auc = 1.0, float("nan")
    assert schema is not None
    meta = {
        "kind": "retrieval",
        "ranking": ranking,
        "rows": rows,
        "seed": seed,
        "chunk_rows": chunk_rows,
        "files": [Path(f).relative_to(out).as_posix() for f in files],
        "items_file": ITEMS_FILE,
        "positive_rate": positive_rate,
        "columns": [{"name": f.name, "type": str(f.type)} for f in schema],
        "params": {"users": int(world.user_id.size), "items": n_items, "dim": int(world.user_vec.shape[1])},
    }
    if ranking:
        meta["oracle_auc"] = oracle_auc
    else:
        meta["oracle_recall"] = {str(k): v for k, v in recall.items()}
    meta_path = out / META_FILE
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return GenerateReport(
        "retrieval",
        rows,
        files,
        positive_rate,
        oracle_auc,
        time.perf_counter() - start,
        str(meta_path),
        {LABEL: {"positive_rate": positive_rate, "oracle_auc": oracle_auc}}
        if ranking
        else {LABEL: {"positive_rate": 1.0}},
        recall,
    )


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
