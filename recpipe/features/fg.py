"""Vectorized feature generation (FG): Arrow rows → ids, jagged histories and dense floats → Batch.

Everything is pyarrow.compute / numpy over whole columns; there is no Python loop over rows. The
same code runs at training and serving (``recpipe.export.rtp`` reuses it with ``fg.json``).

Bad input: column-level problems (a missing column, a column of the wrong type) always raise.
Row-level problems (text in a numeric column, NaN/inf in a raw feature, negative or overflowing ids,
malformed ``\\x03`` groups, labels other than 0/1) raise :class:`BadRowError` naming file, row,
column and what was expected — or, under ``on_bad_row="skip"``, the row is dropped and counted.
Empty or null histories are zero items; histories longer than ``max_length`` keep their first
(most recent) ``max_length`` items and are counted as truncated.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.data.types import DataError
from recpipe.features.columns import BadRows, as_numpy, to_float
from recpipe.features.hashing import fnv1a64, to_string_array
from recpipe.features.kinds.base import FeatureKind, HistoryOut
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.outputs import outputs_of, with_feature_outputs
from recpipe.features.raw import ColumnContract, column_kinds, history_delimiters, normalize
from recpipe.features.spec import DenseFeature, FeatureSpec, FeatureSpecError, SequenceFeature, SparseFeature

# The FeatureKind field that computes each sort of FeatureSpec entry.
_PART = {SparseFeature: "sparse", DenseFeature: "dense", SequenceFeature: "sequence"}


class BadRowError(DataError):
    """A row failed FG; carries ``file``, ``row`` (0-based in that file), ``column`` and ``expected``."""

    def __init__(self, file: str, row: int, column: str, expected: str, got: object = None):
        self.file, self.row, self.column, self.expected, self.got = file, row, column, expected, got
        msg = f"{file}, row {row}, column {column!r}: expected {expected}"
        if got is not None:
            msg += f", got {str(got)[:80]!r}"
        super().__init__(msg)


@dataclass
class FGStats:
    """Counts for one pass: ``rows_read == rows_emitted + rows_skipped`` always."""

    rows_read: int = 0
    rows_emitted: int = 0
    rows_skipped: int = 0
    skipped_by_column: dict[str, int] = field(default_factory=dict)
    truncated_histories: int = 0

    def add(self, other: FGStats) -> None:
        self.rows_read += other.rows_read
        self.rows_emitted += other.rows_emitted
        self.rows_skipped += other.rows_skipped
        self.truncated_histories += other.truncated_histories
        for k, v in other.skipped_by_column.items():
            self.skipped_by_column[k] = self.skipped_by_column.get(k, 0) + v

    def summary(self) -> str:
        s = f"rows_read={self.rows_read} rows_emitted={self.rows_emitted} rows_skipped={self.rows_skipped}"
        if self.skipped_by_column:
            s += f" skipped_by_column={dict(sorted(self.skipped_by_column.items()))}"
        return s + f" truncated_histories={self.truncated_histories}"


@dataclass
class FGOutput:
    """FG result for ``num_rows`` rows: numpy arrays, one values/lengths pair per sparse key."""

    dense: np.ndarray  # (B, D) float32
    values: list[np.ndarray]  # per key (N_k,) int64
    lengths: list[np.ndarray]  # per key (B,) int32
    labels: np.ndarray  # (B,) float32; (B, T) for a spec with T > 1 labels (FeatureSpec.labels order)
    weights: np.ndarray | None = None
    groups: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return int(self.labels.shape[0])

    def slice(self, start: int, stop: int) -> FGOutput:
        vals = []
        for v, ln in zip(self.values, self.lengths):
            off = np.concatenate(([0], np.cumsum(ln, dtype=np.int64)))
            vals.append(v[off[start] : off[stop]])
        return FGOutput(
            dense=self.dense[start:stop],
            values=vals,
            lengths=[ln[start:stop] for ln in self.lengths],
            labels=self.labels[start:stop],
            weights=None if self.weights is None else self.weights[start:stop],
            groups=None if self.groups is None else self.groups[start:stop],
        )

    @staticmethod
    def concat(parts: list[FGOutput]) -> FGOutput:
        if len(parts) == 1:
            return parts[0]

        def cat(xs: list[np.ndarray | None]) -> np.ndarray | None:
            return None if xs[0] is None else np.concatenate(xs)

        nkeys = len(parts[0].values)
        return FGOutput(
            dense=np.concatenate([p.dense for p in parts]),
            values=[np.concatenate([p.values[k] for p in parts]) for k in range(nkeys)],
            lengths=[np.concatenate([p.lengths[k] for p in parts]) for k in range(nkeys)],
            labels=np.concatenate([p.labels for p in parts]),
            weights=cat([p.weights for p in parts]),
            groups=cat([p.groups for p in parts]),
        )


class FeatureGenerator:
    """Applies a FeatureSpec to RecordBatches.

    Args:
        spec (FeatureSpec): what to compute.
        on_bad_row (str): ``"error"`` raises :class:`BadRowError`; ``"skip"`` drops and counts the row.
        with_labels (bool): read the label (and weight) columns; False at serving.
        dictionary_columns (Collection[str]): columns read only as hashed ids that may come dictionary-encoded
            (a shuffled training window's, :func:`recpipe.train.data.hashed_id_columns`): kept encoded, so each
            distinct value is hashed once per dictionary. Any other dictionary column is decoded first.

    Example::

        fg = FeatureGenerator(spec, on_bad_row="skip")
        out = fg(record_batch, file="part-00000.parquet", first_row=0)
        batch = to_batch(out, spec.sparse_keys())   # recpipe.batch: Batch(dense, sparse KJT, labels)
        fg.stats.summary()                           # 'rows_read=... rows_emitted=... rows_skipped=...'
    """

    def __init__(
        self,
        spec: FeatureSpec,
        on_bad_row: Literal["error", "skip"] = "error",
        with_labels: bool = True,
        dictionary_columns: Collection[str] = (),
    ):
        if on_bad_row not in ("error", "skip"):
            raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
        self.spec = spec
        self.on_bad_row = on_bad_row
        self.with_labels = with_labels
        self.keys = spec.sparse_keys()
        # Keys whose ids another key already computes (a wide group's <feature>__wide): computed once.
        self._repeats: dict[str, str] = {}
        first: dict[str, str] = {}
        for f in spec.sparse:
            if f.sequence is None and f.weights_of is None:
                how = repr(
                    (f.kind, f.column, f.inputs, f.params, f.mapping, f.boundaries, f.raw_default, f.zch)
                )
                self._repeats[f.name] = first.setdefault(how, f.name)
        self._repeats = {k: v for k, v in self._repeats.items() if k != v}
        # Every entry's kind, checked once: the kind must compute that sort of entry.
        self._kind: dict[str, FeatureKind] = {}
        for e in spec.fg_entries():
            kind = feature_kind(e.kind)
            part = _PART[type(e)]
            if getattr(kind, part) is None:
                raise FeatureSpecError(f"feature {e.name!r}: kind {e.kind!r} computes no {part} entries")
            self._kind[e.name] = kind
        # The histories a sequence group reads item by item together (TorchEasyRec's standalone and pre-encoded
        # sequences in one group): (group, first history key, another parent's key), lengths checked per row.
        self._aligned: list[tuple[str, str, str]] = []
        for g in spec.groups:
            if g.type == "sequence":
                first_of: dict[str | None, str] = {}
                for h in g.history:  # a multi-value key's items are counted by its id counts key
                    first_of.setdefault(spec.feature(h).sequence, spec.feature(h).item_lengths_key or h)
                firsts = list(first_of.values())
                self._aligned += [(g.name, firsts[0], other) for other in firsts[1:]]
        # The feature outputs other features read ("feature:X" → X's entry), derived first in every batch.
        self._outputs = outputs_of(spec)
        # What every call reads of the spec, computed once (``contract`` is the scorer's too, for its prepared
        # rows): per call, label_only_columns ran once per needed column (a 4-row serving call's FG 2.3 -> 1.85 ms).
        label_only = spec.label_only_columns()
        self.contract = ColumnContract(
            column_kinds(spec, with_labels),
            label_only,
            frozenset(dictionary_columns),
            history_delimiters(spec),
        )
        need = spec.input_columns()
        self._need = need if with_labels else [c for c in need if c not in label_only]
        self.stats = FGStats()
        # Rows of the last call that were emitted (None: all of them), to line up outputs with inputs.
        self.last_kept: np.ndarray | None = None

    def __call__(
        self,
        batch: pa.RecordBatch | pa.Table,
        file: str = "<memory>",
        first_row: int = 0,
        normalized: bool = False,
        skip: frozenset[str] = frozenset(),
    ) -> FGOutput:
        """FG of ``batch`` (rows ``first_row`` … of ``file``, for error messages); ``normalized``: its columns are
        already read by the raw-value contract (:func:`~recpipe.features.raw.normalize`, as a scorer's prepared
        rows are), so they are not read again. ``skip``: sparse keys and dense names not computed, for a caller
        that fills them itself (:class:`~recpipe.features.tile.TiledFG`'s context keys): their ids empty, their
        lengths and dense columns zeros. A history is skipped with all its sub-feature keys, a weighted id with
        its weights key."""
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0]
                if batch.num_rows
                else pa.RecordBatch.from_pylist([], schema=batch.schema)
            )
        if not normalized:
            batch = normalize(batch, self.spec, self.with_labels, self.contract)
        self._check_columns(batch, file)
        try:
            out, bads, truncated = self._compute(batch, skip)
        except (
            DataError
        ) as err:  # a column FG cannot read at all (its type): named with its file, as every FG error
            raise DataError(f"{file}: {err}") from None
        n = batch.num_rows
        stats = FGStats(rows_read=n)
        self.last_kept = None
        if bads:
            if self.on_bad_row == "error":
                raise self._first_error(bads, file, first_row)
            drop = np.zeros(n, bool)
            for b in bads:
                newly = b.rows[~drop[b.rows]]
                stats.skipped_by_column[b.column] = stats.skipped_by_column.get(b.column, 0) + len(
                    np.unique(newly)
                )
                drop[b.rows] = True
            batch = batch.filter(pa.array(~drop))
            out, bads, truncated = self._compute(batch, skip)
            assert not bads, "rows left after skipping must be clean"
            stats.rows_skipped = int(drop.sum())
            self.last_kept = ~drop
        stats.rows_emitted = out.num_rows
        stats.truncated_histories = truncated
        self.stats.add(stats)
        return out

    # ---------------------------------------------------------------------------------- internals
    def _check_columns(self, batch: pa.RecordBatch, file: str) -> None:
        missing = [c for c in self._need if batch.schema.get_field_index(c) < 0]
        if missing:
            raise DataError(f"{file}: missing columns {missing}; the file has {batch.schema.names}")

    @staticmethod
    def _first_error(bads: list[BadRows], file: str, first_row: int) -> BadRowError:
        best = min(bads, key=lambda b: int(b.rows.min()))
        i = int(np.argmin(best.rows))
        row = int(best.rows[i])
        got = None
        if best.arr is not None:
            pos = row if best.arr_rows is None else int(best.arr_rows[i])
            got = best.arr[pos].as_py()
        return BadRowError(file, first_row + row, best.column, best.expected, got)

    def _compute(
        self, batch: pa.RecordBatch, skip: frozenset[str] = frozenset()
    ) -> tuple[FGOutput, list[BadRows], int]:
        n = batch.num_rows
        batch = with_feature_outputs(batch, self._outputs)
        bads: list[BadRows] = []
        values: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        truncated = 0
        if skip:
            for key in skip:
                values[key], lengths[key] = np.zeros(0, np.int64), np.zeros(n, np.int32)
        for f in self.spec.sparse:
            if f.sequence is not None or f.name in self._repeats or f.weights_of is not None:
                continue
            if f.name in skip:
                if f.weights_key is not None:
                    values[f.weights_key], lengths[f.weights_key] = values[f.name], lengths[f.name]
                continue
            out = self._kind[f.name].sparse(f, batch)
            values[f.name], lengths[f.name], bad = out[:3]
            if len(out) == 4 and f.weights_key is not None:  # a weighted id: its weights key, id by id
                values[f.weights_key], lengths[f.weights_key] = out[3], lengths[f.name]
            if bad is not None:
                bads.append(bad)
        for key, same in self._repeats.items():
            if key not in values:
                values[key], lengths[key] = values[same], lengths[same]
        histories = HistoryOut(values, lengths, bads)
        for s in self.spec.sequences:
            if skip and all(k in values for k in s.sub_features):
                continue
            feats = [self.spec.feature(k) for k in s.sub_features]
            truncated += self._kind[s.name].sequence(s, feats, batch, histories)
        for group, first, other in self._aligned:
            differ = lengths[first] != lengths[other]
            if differ.any():
                col, ref = self.spec.feature(other).column, self.spec.feature(first).column
                expected = f"as many items as column {ref!r} (sequence group {group!r} reads its histories item by item)"
                bads.append(BadRows(np.flatnonzero(differ), col, expected, batch.column(col)))
        dense = np.empty((n, len(self.spec.dense)), np.float32)
        for j, d in enumerate(self.spec.dense):
            if d.name in skip:
                dense[:, j] = 0.0
                continue
            dense[:, j], found = self._kind[d.name].dense(d, batch)
            bads.extend(found)
        labels = np.zeros(n if not self.spec.extra_labels else (n, len(self.spec.labels)), np.float32)
        weights = groups = None
        if self.with_labels:
            columns = [
                self._domain(col, batch.column(col), bads)
                if col == self.spec.domain_label
                else self._label(col, batch.column(col), bads)
                for col in self.spec.labels
            ]
            labels = columns[0] if len(columns) == 1 else np.stack(columns, axis=1)
            if self.spec.weight:
                w, bad = to_float(batch.column(self.spec.weight), 1.0, self.spec.weight)
                if bad is not None:
                    bads.append(bad)
                weights = w.astype(np.float32)
        if self.spec.group_column and batch.schema.get_field_index(self.spec.group_column) >= 0:
            g = batch.column(self.spec.group_column)
            if pa.types.is_integer(g.type):
                groups = as_numpy(pc.fill_null(g, -1)).astype(np.int64)
            else:
                groups = fnv1a64(to_string_array(g)).view(np.int64)
        out = FGOutput(
            dense=dense,
            values=[values[k] for k in self.keys],
            lengths=[lengths[k] for k in self.keys],
            labels=labels,
            weights=weights,
            groups=groups,
        )
        return out, bads, truncated

    def _label(self, col: str, arr: pa.Array, bads: list[BadRows]) -> np.ndarray:
        y, bad = to_float(arr, np.nan, col)
        notbin = ~((y == 0) | (y == 1))
        if bad is not None:
            notbin[bad.rows] = True
        if notbin.any():
            bads.append(BadRows(np.flatnonzero(notbin), col, "a label of 0 or 1", arr))
            y = np.where(notbin, 0.0, y)
        return y.astype(np.float32)

    def _domain(self, col: str, arr: pa.Array, bads: list[BadRows]) -> np.ndarray:
        """The domain label's column: each row's domain, an integer in ``[0, domain_num)`` (a row outside is
        bad, never clamped: its loss would read another domain's tower)."""
        d, bad = to_float(arr, np.nan, col)
        outside = ~((d == np.floor(d)) & (d >= 0) & (d < self.spec.domain_num))
        if bad is not None:
            outside[bad.rows] = True
        if outside.any():
            expected = f"a domain index, an integer in [0, {self.spec.domain_num}) (the model's domain_label)"
            bads.append(BadRows(np.flatnonzero(outside), col, expected, arr))
            d = np.where(outside, 0.0, d)
        return d.astype(np.float32)
