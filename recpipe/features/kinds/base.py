"""What every feature kind declares (:class:`FeatureKind`), and the parts it works with.

A kind turns its config section into FeatureSpec entries (:class:`SpecParts`: KJT keys, dense columns,
histories), says what the training split must be scanned for (:class:`FitNeeds`) and computes its entries
from Arrow columns, vectorized: ``sparse`` gives a pooled key's ids, ``dense`` one column of
``Batch.dense``, ``sequence`` every sub-feature key of a history. Each entry records the kind that made it
(``SparseFeature.kind`` …), so FG at training and at serving runs the same kind's code from ``fg.json``.
numpy and pyarrow only.

Example::

    KIND = FeatureKind(name="id", build=build, needs=needs, sparse=ids, column=column)
    feature_kind("id").sparse(spec.feature("user_id"), record_batch)   # (values, lengths (B,), bad rows)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from recpipe.features.columns import BadRows
from recpipe.features.spec import DenseFeature, IdMapping, SequenceFeature, SparseFeature

# How FG reads a raw input column (recpipe.features.raw.normalize: the raw-value contract): ids, numbers, a
# history string, any other text.
ColumnKind = Literal["id", "float", "sequence", "text"]
# What a column must hold for FG to read it (recpipe.features.schema_check).
NUMERIC = "a numeric (or numeric text) column"
IDS = "an integer or string column for ids"
TEXT = "a string column"
# A history: its text, or a list column of its items (each a value, a list of its sub-values, or a struct of them).
HISTORY = "a string column (or a list column of items)"
ANY = "any column"
# Appended to a need: a list column of such values is read too (a multi-value feature's Parquet lists).
LIST_OF = " (or a list column of them)"


@dataclass
class SpecParts:
    """The FeatureSpec entries kinds append to, in config order.

    Args:
        encoded (bool): the input is pre-encoded (``data.fg_encoded``: columns hold FG's output).
    """

    encoded: bool
    sparse: list[SparseFeature] = field(default_factory=list)
    dense: list[DenseFeature] = field(default_factory=list)
    sequences: list[SequenceFeature] = field(default_factory=list)

    def add_table(self, f: Any, column: str, mapping: IdMapping, kind: str, **fields: Any) -> None:
        """Append the sparse entry of config ``f`` (a feature, or a history's sub-feature) read from
        ``column``: named after it, in its table (shared by ``embedding_name``) of its ``embedding_dim``;
        ``fields`` are the other :class:`~recpipe.features.spec.SparseFeature` fields."""
        self.sparse.append(
            SparseFeature(
                name=f.name,
                column=column,
                mapping=mapping,
                table=f.embedding_name or f.name,
                embedding_dim=f.embedding_dim,
                kind=kind,
                **fields,
            )
        )


@dataclass
class FitNeeds:
    """What fitting must learn from the training split for one feature.

    Args:
        vocab (dict[str, int]): sparse key → ``min_freq`` of the vocabulary to count.
        quantiles (dict[str, int]): sparse key → buckets whose boundaries to fit.
        zscore (dict[str, float | None]): dense column → its ``log(x+C)`` offset before the statistics.
    """

    vocab: dict[str, int] = field(default_factory=dict)
    quantiles: dict[str, int] = field(default_factory=dict)
    zscore: dict[str, float | None] = field(default_factory=dict)

    def add(self, other: FitNeeds) -> None:
        self.vocab.update(other.vocab)
        self.quantiles.update(other.quantiles)
        self.zscore.update(other.zscore)

    def __bool__(self) -> bool:
        return bool(self.vocab or self.quantiles or self.zscore)


# (values (N,) int64, lengths (B,) int32, bad rows or None) of one pooled key over a batch of B rows.
# A weighted id adds a 4th: its weights key's values, one float64 bit pattern per id.
SparseOut = (
    tuple[np.ndarray, np.ndarray, BadRows | None] | tuple[np.ndarray, np.ndarray, BadRows | None, np.ndarray]
)
# (values (B,) float64 as Batch.dense takes them, bad rows) of one dense column.
DenseOut = tuple[np.ndarray, list[BadRows]]


def no_needs(section: Any) -> FitNeeds:
    return FitNeeds()


@dataclass
class HistoryOut:
    """Where a kind's ``sequence`` hook writes a batch's histories: ``values`` / ``lengths`` by sub-feature key
    (the jagged ids or numbers, and the items a row), and ``bads``, the bad rows it found."""

    values: dict[str, np.ndarray]
    lengths: dict[str, np.ndarray]
    bads: list[BadRows]


@dataclass(frozen=True)
class FeatureKind:
    """One feature kind.

    Args:
        name (str): its catalogue name (the config's ``kind:``).
        build (Callable): ``build(section, parts)`` appends the section's entries to a :class:`SpecParts`.
        column (Callable): ``column(entry) -> (ColumnKind, need)``: how FG reads the input column of one of its
            entries, and what the column must hold (for the schema check).
        inputs (Callable | None): ``inputs(entry) -> {column: (ColumnKind, need)}`` for a kind that reads more
            columns than ``entry.column`` (``entry.inputs``); None: ``column`` of ``entry.column`` alone.
        needs (Callable): ``needs(section) -> FitNeeds``.
        sparse (Callable | None): ``sparse(entry, batch) -> SparseOut`` for its pooled keys.
        dense (Callable | None): ``dense(entry, batch) -> DenseOut`` for its dense columns.
        sequence (Callable | None): ``sequence(entry, sub_features, batch, out) -> truncated rows`` for its
            histories: fills ``out`` (a :class:`HistoryOut`) for every sub-feature key.
        fit_values (Callable | None): ``fit_values(entry, batch) -> pa.Array``: the text values a fitted
            vocabulary (``min_freq``) of one of its pooled keys counts; None: the column as text.
    """

    name: str
    build: Callable[[Any, SpecParts], None]
    column: Callable[[Any], tuple[ColumnKind, str]]
    needs: Callable[[Any], FitNeeds] = no_needs
    inputs: Callable[[Any], dict[str, tuple[ColumnKind, str]]] | None = None
    sparse: Callable[[SparseFeature, pa.RecordBatch], SparseOut] | None = None
    dense: Callable[[DenseFeature, pa.RecordBatch], DenseOut] | None = None
    sequence: Callable[[SequenceFeature, list[SparseFeature], pa.RecordBatch, HistoryOut], int] | None = None
    fit_values: Callable[[SparseFeature, pa.RecordBatch], pa.Array] | None = None

    def columns(self, entry: Any) -> dict[str, tuple[ColumnKind, str]]:
        """Every input column one of its entries reads → (how FG reads it, what it must hold)."""
        if self.inputs is not None:
            return self.inputs(entry)
        return {entry.column: self.column(entry)}
