"""Synthetic Taobao display-ad and Criteo data, rows for any recpipe config (``config``), with a known click
model (so the oracle AUC is known), and retrieval data (``retrieval``: users and items with latent vectors, so
the oracle recall@K is known; :mod:`recpipe.data.synthetic.retrieval`).

``generate`` streams chunks to ``out/part-00000.parquet``, ... and writes ``out/_meta.json``; with ``days``,
to ``out/dt=YYYYMMDD/part-00000.parquet``, ... (data with time: :mod:`recpipe.data.synthetic.daily`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from recpipe.config import RecpipeConfig, load_config
from recpipe.data.synthetic import config as config_gen
from recpipe.data.synthetic import criteo, daily, retrieval, taobao
from recpipe.data.synthetic.common import GenerateReport, write_chunks
from recpipe.data.synthetic.daily import daily_oracle_auc

__all__ = ["GenerateReport", "daily_oracle_auc", "generate"]

DEFAULT_CHUNK_ROWS = 200_000


def generate(
    kind: Literal["taobao", "criteo", "config", "retrieval"],
    rows: int,
    out: str | Path,
    seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    users: int | None = None,
    ads: int | None = None,
    max_vocab: int | None = None,
    hashed: int | bool = False,
    pairs: int | bool = True,
    config: str | Path | RecpipeConfig | None = None,
    nulls: float | None = None,
    vocab: int | None = None,
    lists: int | bool = False,
    days: int | None = None,
    start: int | str | None = None,
    items: int | None = None,
    dim: int | None = None,
    ranking: int | bool = False,
) -> GenerateReport:
    """Generate ``rows`` synthetic rows of ``kind`` into the folder ``out``, one Parquet file per chunk.

    Memory stays bounded by one chunk plus 5 bytes per row (labels and true probabilities, kept for
    the oracle AUC). Output is deterministic for ``(kind, rows, seed, chunk_rows)``.

    Args:
        kind (str): ``"taobao"`` (MultiTowerDIN's wide table with ``click_50_seq``) or ``"criteo"``
            (``label``, ``I1..I13``, ``C1..C26``).
        rows (int): rows to write.
        out (str | Path): output folder; earlier ``part-*.parquet`` files in it are replaced.
        seed (int): random seed (>= 0).
        chunk_rows (int): rows per Parquet file (row groups of 65536 rows inside).
        users (int | None): taobao only: number of users (default: one per 12 rows).
        ads (int | None): taobao only: number of ads (default: one per 25 rows).
        max_vocab (int | None): criteo only: caps every categorical column's vocabulary.
        hashed (int | bool): criteo only: TorchEasyRec's column layout, ``int_0..int_12`` and integer ids
            ``cat_0..cat_25`` (see :func:`recpipe.data.synthetic.criteo.make_chunk`); 0 or 1.
        pairs (int | bool): criteo only: 1 (default) adds the click model's two pair effects, 0 leaves
            first-order effects only, 2 adds a factorization machine's pair effects over every column pair.
        config (str | Path | RecpipeConfig | None): config only: the recpipe config (or its YAML path) whose
            input columns to generate (:mod:`recpipe.data.synthetic.config`).
        nulls (float | None): config only: share of nulls in every feature input column (default 0.01).
        vocab (int | None): config only: values per id space (default one per 20 rows, 20 to 100,000).
        lists (int | bool): config only: 1 writes multi-value ids, vectors and terms as list columns.
        days (int | None): taobao and criteo: data with time (:mod:`recpipe.data.synthetic.daily`): ``rows``
            split evenly over ``days`` days written as hive folders ``out/dt=YYYYMMDD/part-*.parquet``
            (the day is the folder's name, not a column: ``pyarrow.dataset.dataset(out, partitioning="hive")``
            adds it back), ``time_stamp`` in the day; ads are born and retire, popularity shifts, interests
            drift; the catalogue is sized by the rows of one day, so day ``k`` is the same whatever ``days``
            follow at the same rows per day. Default: no time structure.
        start (int | str | None): with ``days``: the first day, ``YYYYMMDD`` (default 20260101).
        items (int | None): retrieval only: the catalogue's size (default one per 50 rows); ``users`` is its
            number of users (default one per 20 rows).
        dim (int | None): retrieval only: the latent vectors' width (default 8).
        ranking (int | bool): retrieval only: 1 writes the same world's impressions for a ranker (0/1 clicks,
            ``brand_id``, an oracle AUC) instead of the retriever's positives.

    Returns:
        GenerateReport: rows, files, positive rate, oracle AUC (of every label: ``tasks``), seconds.

    Example::

        >>> r = generate("taobao", 5000, tmp / "taobao", seed=0, chunk_rows=1000)
        >>> len(r.files), round(r.positive_rate, 2)
        (5, 0.05)
        >>> r = generate("taobao", 14_000, tmp / "days", days=14)   # tmp/days/dt=20260101/part-00000.parquet, ...
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if kind != "retrieval" and (items is not None or dim is not None or ranking):
        raise ValueError(f"items, dim and ranking are options of synthetic retrieval data, not of {kind!r}")
    if ranking not in (0, 1):
        raise ValueError(f"ranking must be 0 or 1, got {ranking!r}")
    if kind == "retrieval":
        if ads is not None or days is not None or start is not None:
            raise ValueError("synthetic retrieval data takes users, items and dim (no ads, days or start)")
        if config is not None or nulls is not None or vocab is not None or lists:
            raise ValueError(
                "config, nulls, vocab and lists are options of synthetic:config data, not of 'retrieval'"
            )
        if max_vocab is not None or hashed or not pairs:
            raise ValueError(
                "max_vocab, hashed and pairs are options of synthetic criteo data, not of 'retrieval'"
            )
        return retrieval.generate_retrieval(
            rows, out, seed, chunk_rows, users=users, items=items, dim=dim, ranking=bool(ranking)
        )
    if kind != "taobao" and (users is not None or ads is not None):
        raise ValueError(f"users and ads are options of synthetic taobao data, not of {kind!r}")
    if kind != "config" and (config is not None or nulls is not None or vocab is not None or lists):
        raise ValueError(
            f"config, nulls, vocab and lists are options of synthetic:config data, not of {kind!r}"
        )
    if kind != "criteo" and (max_vocab is not None or hashed or not pairs):
        raise ValueError(f"max_vocab, hashed and pairs are options of synthetic criteo data, not of {kind!r}")
    if hashed not in (0, 1) or pairs not in (0, 1, 2):
        raise ValueError(f"hashed must be 0 or 1 and pairs 0, 1 or 2, got {hashed!r} and {pairs!r}")
    if start is not None and days is None:
        raise ValueError("start is an option of synthetic data with days; give days too")
    dates = None
    if days is not None:
        if kind == "config":
            raise ValueError("days is an option of synthetic taobao and criteo data, not of 'config'")
        dates = daily.day_dates(days, daily.DEFAULT_START if start is None else start)
        if rows < days:
            raise ValueError(f"synthetic data: {rows} rows cannot fill {days} days")
    make: Callable[[Any, int], Any]
    if kind == "taobao":
        # With days, a day's rows size the catalogue (its ads are those alive on day 0).
        cat = taobao.build_catalogue(seed, rows if days is None else rows // days, users=users, ads=ads)
        params: dict[str, Any] = {
            "base": cat.base,
            "ads": int(cat.ad_id.size),
            "users": int(cat.user_id.size),
        }
        labels: tuple[str, ...] = taobao.LABELS
        make = lambda c, n: taobao.make_chunk(cat, seed, c, n)  # noqa: E731
        if dates is not None:
            make = daily.TaobaoTimeline(cat, seed, dates).make_chunk
    elif kind == "criteo":
        model = criteo.build_model(seed, max_vocab, int(pairs))
        params = {
            "base": model.base,
            "cardinalities": list(criteo.cardinalities(max_vocab)),
            "hashed": bool(hashed),
            "pairs": int(pairs),
        }
        labels = ("label",)
        make = lambda c, n: criteo.make_chunk(model, seed, c, n, bool(hashed))  # noqa: E731
        if dates is not None:
            make = daily.CriteoTimeline(model, seed, dates, bool(hashed)).make_chunk
    elif kind == "config":
        if config is None:
            raise ValueError("synthetic config data needs a config (its YAML path or a RecpipeConfig)")
        cfg = config if isinstance(config, RecpipeConfig) else load_config(config)
        null_rate = config_gen.DEFAULT_NULLS if nulls is None else float(nulls)
        cmodel = config_gen.build_model(cfg, seed, rows, nulls=null_rate, vocab=vocab, lists=bool(lists))
        params = {
            "config": cfg.name if isinstance(config, RecpipeConfig) else str(config),
            "bases": cmodel.bases,
            "nulls": null_rate,
            "lists": bool(lists),
            "spaces": {k: s.size for k, s in sorted(cmodel.spaces.items())},
        }
        labels = cmodel.labels
        make = lambda c, n: config_gen.make_chunk(cmodel, seed, c, n)  # noqa: E731
    else:
        raise ValueError(f"unknown synthetic data kind {kind!r}; use 'taobao', 'criteo' or 'config'")
    if dates is not None:
        params.update(days=len(dates), start=dates[0])
    return write_chunks(kind, rows, out, seed, chunk_rows, make, params, labels, days=dates)
