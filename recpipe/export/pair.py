"""Retrieve then rank in one request (issue 30): a retrieval export's top-K items for a user, scored by a ranking
export in the one-user × K-candidates form, answered best first.

A request is the retrieval server's: user rows (``dataframe_records`` / ``dataframe_split``), with ``params``
``k`` (the candidates retrieved, default :data:`DEFAULT_K`, at most the catalogue) and ``n`` (the items answered,
default :data:`DEFAULT_N`, at most ``k``). For each user row:

1. the user tower embeds the row and the index (HNSW or flat, as :class:`~recpipe.export.retriever.Retriever`
   searches) finds its ``k`` best catalogue rows;
2. those rows' columns that the ranker reads (the item's id and attributes, from the catalogue the retrieval
   export keeps: ``item_attributes.parquet``) are the ranker's candidate rows; the request row's columns that the
   ranker reads are its context, sent once (``Scorer.predict_raw(candidates, context)``: FG'd once, the shared
   history program where the backend has one);
3. the answer is the ``n`` items of highest ranker probability: ``{"item_ids": [...], "scores": [ranker
   probabilities], "retrieval_scores": [the index's scores of the same items]}``.

Refused when it is probably a mistake: at load, a ranker that reads none of the catalogue's columns (every
candidate would score alike) or a multi-task ranker (no single order); per request, a row without any of the user
tower's columns, an unknown parameter, ``k`` or ``n`` out of range.

Example::

    invoker = PairInvoker(Retriever("retriever/export"), load_backend("ranker/export/rtp"))
    app = ScoringApp(invoker)      # POST {"dataframe_records": [{"user_id": 7, ...}], "params": {"k": 500}}
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from recpipe.data.types import DataError
from recpipe.export.compute import run_scoring
from recpipe.export.manifest import ArtifactError
from recpipe.export.requests import JSON, bad_request, file_table, read_json_body, read_params, whole_param
from recpipe.export.retriever import Retriever
from recpipe.export.scorer import Scorer

DEFAULT_K = 500  # candidates retrieved per user
DEFAULT_N = 50  # items answered per user
PAIR_PARAMS = ("k", "n")


def split_ranker_columns(retriever: Retriever, ranker: Scorer) -> tuple[list[str], list[str]]:
    """The ranker's input columns read from the catalogue (each candidate's) and from the request (the user's,
    sent once as the context).

    Raises:
        ArtifactError: the ranker reads none of the catalogue's columns, or is a multi-task model.
    """
    catalogue = set(retriever.attributes().column_names)
    inputs = ranker.input_columns
    items = [c for c in inputs if c in catalogue]
    users = [c for c in inputs if c not in catalogue]
    if not items:
        raise ArtifactError(
            f"the ranker {ranker.folder} reads none of the catalogue's columns {sorted(catalogue)} (it reads "
            f"{inputs}): every retrieved item would get the same score"
        )
    if len(ranker.output_columns()) != 1:
        raise ArtifactError(
            f"the ranker {ranker.folder} is multi-task ({ranker.output_columns()}): retrieve-then-rank needs "
            "one probability to order the candidates"
        )
    return items, users


class PairInvoker:
    """The scoring server's :class:`~recpipe.export.server.Invoker` for a retriever and a ranker served together.

    Args:
        retriever (Retriever): the verified, loaded retrieval export (with its catalogue's attributes).
        ranker (Scorer): the verified, loaded ranking backend (:func:`~recpipe.export.loaders.load_backend`).

    Raises:
        ArtifactError: as :func:`split_ranker_columns`, or a retrieval export without its catalogue's attributes.
    """

    def __init__(self, retriever: Retriever, ranker: Scorer) -> None:
        self.retriever = retriever
        self.ranker = ranker
        self.item_columns, self.user_columns = split_ranker_columns(retriever, ranker)
        self._candidates = retriever.attributes().select(self.item_columns)
        self.default_k = min(DEFAULT_K, retriever.items)
        self.default_n = min(DEFAULT_N, self.default_k)

    def parse(self, body: bytes, mime: str) -> tuple[pa.Table, int, int]:
        if mime != JSON:
            return file_table(body, mime), self.default_k, self.default_n
        rows, params = read_json_body(body)
        return (rows, *self._k_n(params))

    def _k_n(self, params: Any) -> tuple[int, int]:
        params = read_params(params, PAIR_PARAMS, "retrieve-then-rank")
        k = whole_param(
            params, "k", self.default_k, self.retriever.items, "the catalogue", "candidates retrieved"
        )
        n = whole_param(params, "n", min(self.default_n, k), k, "params.k", "items answered")
        return k, n

    def score(self, parsed: tuple[pa.Table, int, int]) -> list[dict[str, list]]:
        rows, k, n = parsed
        try:
            return run_scoring(self.rank, rows, k, n)
        except DataError as err:
            raise bad_request(str(err)) from None

    def rank(self, rows: Any, k: int, n: int) -> list[dict[str, list]]:
        """Each user row's ``n`` best of its ``k`` retrieved items by the ranker, as the answer's objects.

        Raises:
            DataError: rows without any of the user tower's columns, or a bad value (naming its row and column).
        """
        from recpipe.features.raw import to_arrow

        table = to_arrow(rows)
        if not table.num_rows:
            return []
        self.retriever.check_columns(table.column_names)
        found, retrieval = self.retriever.search_rows(self.retriever.embed_rows(table), k)
        context_columns = [c for c in self.user_columns if c in table.column_names]
        users = table.select(context_columns).to_pylist()
        answer = []
        for b, user in enumerate(users):
            candidates = self._candidates.take(pa.array(found[b]))
            try:
                logits = self.ranker.predict_raw(candidates, user)
            except DataError as err:
                raise DataError(f"row {b}: {err}") from None
            probs = self.ranker.to_output(logits, "probability").reshape(-1)
            best = np.argsort(-probs, kind="stable")[:n]
            answer.append(
                {
                    "item_ids": self.retriever.item_ids.take(pa.array(found[b][best])).to_pylist(),
                    "scores": probs[best].tolist(),
                    "retrieval_scores": retrieval[b][best].tolist(),
                }
            )
        return answer

    def encode(self, scored: list[dict[str, list]]) -> bytes:
        return json.dumps({"predictions": scored}).encode()
