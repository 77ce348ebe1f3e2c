"""Candidate generation from a verified retrieval export: raw user rows → FG (the user tower's ``fg.json``) → the
exported user tower → the FAISS index over the catalogue's embeddings → each row's top-K item ids and scores.

The export (:mod:`recpipe.export.retrieval`) is three sealed parts under one ``export.json``; every part is read
back verified (each file's sha256) before anything is loaded. The index searched is the HNSW one at its recorded
search depth where the export built one (a large catalogue; its recall against exact in the manifest), else the
exact flat one. Scores are the tower's inner products with the item embeddings (the model's similarity before
its temperature).

Example::

    retriever = Retriever("runs/ret/export")
    ids, scores = retriever.top_k(user_rows, 50)   # (B, 50) item ids (Arrow list column), (B, 50) float32
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from recpipe.export import faiss_index
from recpipe.export.layout import is_retrieval_export
from recpipe.export.manifest import ArtifactError, read_manifest
from recpipe.export.retrieval import (
    INDEX,
    ITEM_EMBEDDINGS,
    USER_TOWER,
    load_item_attributes,
    load_item_embeddings,
    load_user_tower,
)
from recpipe.export.scorer import check_known_columns
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import to_arrow
from recpipe.features.spec import FG_JSON, FeatureSpec

# Items per row when a caller names no k (``recpipe predict --k``, the scoring server's ``params.k``).
DEFAULT_K = 50


def _require_retrieval_export(folder: str | Path) -> None:
    if not is_retrieval_export(folder):
        raise ArtifactError(f"{folder}: not a retrieval export (no export.json of kind 'retrieval')")


def verify_retrieval_export(folder: str | Path) -> None:
    """Verify every part of a retrieval export (each file's sha256 against its manifest).

    Raises:
        ArtifactError: not a retrieval export, or a part fails verification (named).
    """
    _require_retrieval_export(folder)
    for part in (USER_TOWER, ITEM_EMBEDDINGS, INDEX):
        read_manifest(Path(folder) / part, verify=True)


class Retriever:
    """A verified, loaded retrieval export.

    Args:
        folder (str | Path): the export folder (``export.json`` and its parts).

    Raises:
        ArtifactError: a part fails verification, or the tower was compiled with another torch.
    """

    def __init__(self, folder: str | Path) -> None:
        from recpipe.export.layout import backend_folder

        self.folder = Path(folder)
        _require_retrieval_export(self.folder)  # each part is verified by its loader below
        self._tower = load_user_tower(self.folder / USER_TOWER)
        self.spec = FeatureSpec.load(backend_folder(self.folder / USER_TOWER) / FG_JSON)
        self._fg = FeatureGenerator(self.spec, on_bad_row="error", with_labels=False)
        # The user side's input columns (an export from before they were recorded: every column of the spec).
        user_columns = read_manifest(self.folder / USER_TOWER).extra.get("user_columns")
        self._inputs = list(user_columns) if user_columns else list(self._fg.contract.kinds)
        _, self.item_ids = load_item_embeddings(self.folder / ITEM_EMBEDDINGS)
        self._attributes: pa.Table | None = None
        manifest = read_manifest(self.folder / INDEX, verify=True)
        ann = manifest.extra.get("ann") or {}
        index_folder = backend_folder(self.folder / INDEX)
        if ann.get("kind"):
            self.index_kind = str(ann["kind"])
            self._index = faiss_index.read_index(index_folder / ann["file"], ann["params"]["ef_search"])
        else:
            self.index_kind = "flat"
            self._index = faiss_index.read_index(index_folder / manifest.extra["flat"])

    @property
    def items(self) -> int:
        """The catalogue's size."""
        return len(self.item_ids)

    def check_columns(self, columns: list[str], where: str = "request") -> None:
        """Refuse rows none of whose columns is an input column of the user tower (:func:`check_known_columns`).

        Raises:
            DataError: no column of ``columns`` is one the tower reads.
        """
        check_known_columns(self.spec, columns, where, self._inputs)

    def check_k(self, k: int) -> None:
        """Refuse ``k`` outside ``1..items``.

        Raises:
            ValueError: naming the catalogue's size.
        """
        if not 1 <= k <= self.items:
            raise ValueError(f"k must be in 1..{self.items} (the catalogue's size), got {k}")

    def embed(self, out: FGOutput) -> np.ndarray:
        """``(B, D)`` float32 user embeddings of FG output (of :attr:`spec`)."""
        from recpipe.export.tables import fg_to_kjt_arrays

        values, lengths = fg_to_kjt_arrays(out.values, out.lengths)
        with torch.inference_mode():
            users = self._tower(
                torch.from_numpy(np.ascontiguousarray(out.dense, np.float32)), values, lengths
            )
        return users.detach().to("cpu", torch.float32).numpy()

    def search_rows(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each user embedding's ``k`` best catalogue rows, best first: ``(B, k)`` int64 rows (of :attr:`item_ids`
        and :meth:`attributes`) and ``(B, k)`` float32 scores.

        Raises:
            ValueError: ``k`` not in ``1..items``.
            RuntimeError: the approximate index reached fewer than ``k`` items (never a silent short list).
        """
        self.check_k(k)
        if users.shape[0] == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        scores, found = faiss_index.search(self._index, users, k)
        if (found < 0).any():
            raise RuntimeError(f"{self.folder}: the {self.index_kind} index returned fewer than {k} items")
        return found.astype(np.int64, copy=False), scores.astype(np.float32, copy=False)

    def search(self, users: np.ndarray, k: int) -> tuple[pa.ListArray, np.ndarray]:
        """Each user embedding's ``k`` best items, best first: their ids (a list column) and scores ``(B, k)``.

        Raises:
            ValueError: ``k`` not in ``1..items``.
        """
        found, scores = self.search_rows(users, k)
        ids = self.item_ids.take(pa.array(found.reshape(-1)))
        offsets = pa.array(np.arange(0, found.size + 1, k, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, ids), scores

    def attributes(self) -> pa.Table:
        """The catalogue's columns, row ``j`` the item of :attr:`item_ids` row ``j`` (read verified once).

        Raises:
            ArtifactError: an export from before the attributes were kept, or one that fails verification.
        """
        if self._attributes is None:
            self._attributes = load_item_attributes(self.folder / ITEM_EMBEDDINGS)
        return self._attributes

    def top_k(self, rows: Any, k: int) -> tuple[pa.ListArray, np.ndarray]:
        """Each raw user row's ``k`` best items (a DataFrame, an Arrow table or JSON records), as :meth:`search`.

        Raises:
            ValueError: ``k`` not in ``1..items``.
            DataError: rows without any of the tower's input columns, or a bad value (naming its row and column).
        """
        table = to_arrow(rows)
        if table.num_rows:
            self.check_columns(table.column_names)
        return self.search(self.embed_rows(table) if table.num_rows else np.zeros((0, 0), np.float32), k)

    def embed_rows(self, table: pa.Table) -> np.ndarray:
        """``(B, D)`` float32 user embeddings of raw user rows (FG with the tower's ``fg.json``, then the tower).

        Raises:
            DataError: a bad value, naming its row and column.
        """
        return self.embed(self._fg(table))
