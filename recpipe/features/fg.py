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

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from recpipe.data.types import DataError
from recpipe.features.hashing import fnv1a64, to_string_array, zch_keys_from_hashes, zch_keys_from_ints
from recpipe.features.spec import FeatureSpec, IdMapping, SequenceFeature, SparseFeature

UINT_EXPECTED = "a non-negative integer id below 1e18"
_FLOAT_RE = r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"


class BadRowError(DataError):
    """A row failed FG; carries ``file``, ``row`` (0-based in that file), ``column`` and ``expected``."""

    def __init__(self, file: str, row: int, column: str, expected: str, got: object = None):
        self.file, self.row, self.column, self.expected, self.got = file, row, column, expected, got
        msg = f"{file}, row {row}, column {column!r}: expected {expected}"
        if got is not None:
            msg += f", got {str(got)[:80]!r}"
        super().__init__(msg)


@dataclass
class _Bad:
    rows: np.ndarray  # 0-based row indices within the batch
    column: str
    expected: str
    arr: pa.Array | None = None  # values aligned with rows, for the message
    arr_rows: np.ndarray | None = None  # position in ``arr`` of each bad row (default: the row itself)


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
    labels: np.ndarray  # (B,) float32
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


# ------------------------------------------------------------------------------------- primitives
def _np(arr: pa.Array) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


def _is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _present(arr: pa.Array) -> np.ndarray:
    return np.ones(len(arr), bool) if arr.null_count == 0 else ~_np(arr.is_null())


def parse_uint(arr: pa.Array, byte_len: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decimal strings → ``(int64 values, ok)``; ``ok`` is False for nulls, non-digits, empty or > 18 digits."""
    if byte_len is None:
        byte_len = _np(pc.fill_null(pc.binary_length(arr), 0))
    # Empty strings become "0" (callers know them from byte_len) so one cast parses everything valid.
    padded = pc.ascii_lpad(arr, width=1, padding="0")
    if arr.null_count:
        padded = pc.fill_null(padded, "0")
    ok_np = _np(pc.fill_null(pc.ascii_is_decimal(padded), False)).astype(bool, copy=False)
    ok_np &= (byte_len <= 18) & (byte_len > 0)
    if not ok_np.all() and not (ok_np | (byte_len == 0)).all():
        padded = pc.if_else(pa.array(ok_np), arr, "0")
    return _np(pc.cast(padded, pa.int64())).astype(np.int64, copy=False), ok_np


def bucket_ids(raw: np.ndarray, m: IdMapping, zch: bool = False) -> np.ndarray:
    """Integer ids of a ``mod`` mapping: ``raw % size``, or their 63-bit keys for a zch feature (whose
    managed-collision module assigns the rows)."""
    return zch_keys_from_ints(raw) if zch else np.mod(raw, m.size)


def map_ids(
    arr: pa.Array, m: IdMapping, column: str, zch: bool = False
) -> tuple[np.ndarray, np.ndarray, _Bad | None]:
    """Map raw values to table rows. Returns ``(ids int64, present bool, bad or None)``.

    With ``zch`` (``hash`` and ``mod`` mappings) the ids are not reduced to ``m.size`` rows: they are
    63-bit keys (:func:`recpipe.features.hashing.zch_keys_from_ints` / ``zch_keys_from_hashes``) and
    the model's managed-collision module maps them to rows.
    """
    if zch and m.kind not in ("hash", "mod"):
        raise ValueError(f"column {column!r}: a zch feature needs a hash or mod mapping, not {m.kind!r}")
    if m.default_value is not None and arr.null_count:
        fill = pa.scalar(m.default_value).cast(arr.type) if not _is_str(arr.type) else m.default_value
        arr = pc.fill_null(arr, fill)
    present = _present(arr)
    bad = None
    if m.kind == "mod":
        if pa.types.is_integer(arr.type):
            raw = _np(pc.fill_null(arr, 0) if arr.null_count else arr).astype(np.int64, copy=False)
            neg = present & (raw < 0)
            if neg.any():
                bad = _Bad(np.flatnonzero(neg), column, UINT_EXPECTED, arr)
            ids = bucket_ids(raw, m, zch)
        elif _is_str(arr.type):
            parsed, ok = parse_uint(arr)
            wrong = present & ~ok
            if wrong.any():
                bad = _Bad(np.flatnonzero(wrong), column, UINT_EXPECTED, arr)
            ids = bucket_ids(parsed, m, zch)
        else:
            raise DataError(
                f"column {column!r}: expected an integer or string column for ids, got {arr.type}"
            )
    elif m.kind == "hash":
        # Hash each distinct value once: context features like pid have a handful of values.
        enc = pc.dictionary_encode(to_string_array(arr))
        hashes = fnv1a64(enc.dictionary)
        table = zch_keys_from_hashes(hashes) if zch else (hashes % np.uint64(m.size)).astype(np.int64)
        ids = (
            table[_np(pc.fill_null(enc.indices, 0)).astype(np.int64)]
            if len(table)
            else np.zeros(len(arr), np.int64)
        )
    elif m.kind == "vocab":
        s = to_string_array(arr)
        idx = pc.index_in(s, value_set=pa.array(m.vocab or [], type=pa.string()).cast(s.type))
        ids = _np(pc.fill_null(pc.add(idx, 1), m.unk_id)).astype(np.int64)
    else:
        raise ValueError(f"map_ids does not handle mapping kind {m.kind!r}")
    return ids, present, bad


def to_float(arr: pa.Array, default: float, column: str) -> tuple[np.ndarray, _Bad | None]:
    """Raw values as float64 with nulls → ``default``; text that is not a number and NaN/inf are bad."""
    bad_mask = np.zeros(len(arr), bool)
    original = arr
    if _is_str(arr.type):
        ok = _np(pc.fill_null(pc.match_substring_regex(arr, _FLOAT_RE), True))
        bad_mask |= ~ok
        arr = pc.if_else(pa.array(ok), arr, "0")
    elif not (
        pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)
    ):
        raise DataError(f"column {column!r}: expected a numeric column, got {arr.type}")
    x = _np(pc.fill_null(pc.cast(arr, pa.float64()), default)).astype(np.float64, copy=False)
    bad_mask |= ~np.isfinite(x)
    bad = _Bad(np.flatnonzero(bad_mask), column, "a finite number", original) if bad_mask.any() else None
    return x, bad


class FeatureGenerator:
    """Applies a FeatureSpec to RecordBatches.

    Args:
        spec (FeatureSpec): what to compute.
        on_bad_row (str): ``"error"`` raises :class:`BadRowError`; ``"skip"`` drops and counts the row.
        with_labels (bool): read the label (and weight) columns; False at serving.

    Example::

        fg = FeatureGenerator(spec, on_bad_row="skip")
        out = fg(record_batch, file="part-00000.parquet", first_row=0)
        batch = to_batch(out, spec.sparse_keys())   # recpipe.batch: Batch(dense, sparse KJT, labels)
        fg.stats.summary()                           # 'rows_read=... rows_emitted=... rows_skipped=...'
    """

    def __init__(
        self, spec: FeatureSpec, on_bad_row: Literal["error", "skip"] = "error", with_labels: bool = True
    ):
        if on_bad_row not in ("error", "skip"):
            raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
        self.spec = spec
        self.on_bad_row = on_bad_row
        self.with_labels = with_labels
        self.keys = spec.sparse_keys()
        self.stats = FGStats()
        self._seq_by_name = {s.name: s for s in spec.sequences}

    def __call__(
        self, batch: pa.RecordBatch | pa.Table, file: str = "<memory>", first_row: int = 0
    ) -> FGOutput:
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0]
                if batch.num_rows
                else pa.RecordBatch.from_pylist([], schema=batch.schema)
            )
        self._check_columns(batch, file)
        out, bads, truncated = self._compute(batch)
        n = batch.num_rows
        stats = FGStats(rows_read=n)
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
            out, bads, truncated = self._compute(batch)
            assert not bads, "rows left after skipping must be clean"
            stats.rows_skipped = int(drop.sum())
        stats.rows_emitted = out.num_rows
        stats.truncated_histories = truncated
        self.stats.add(stats)
        return out

    # ---------------------------------------------------------------------------------- internals
    def _check_columns(self, batch: pa.RecordBatch, file: str) -> None:
        need = self.spec.input_columns()
        if not self.with_labels:
            need = [c for c in need if c not in (self.spec.label, self.spec.weight)]
        missing = [c for c in need if batch.schema.get_field_index(c) < 0]
        if missing:
            raise DataError(f"{file}: missing columns {missing}; the file has {batch.schema.names}")

    @staticmethod
    def _first_error(bads: list[_Bad], file: str, first_row: int) -> BadRowError:
        best = min(bads, key=lambda b: int(b.rows.min()))
        i = int(np.argmin(best.rows))
        row = int(best.rows[i])
        got = None
        if best.arr is not None:
            pos = row if best.arr_rows is None else int(best.arr_rows[i])
            got = best.arr[pos].as_py()
        return BadRowError(file, first_row + row, best.column, best.expected, got)

    def _compute(self, batch: pa.RecordBatch) -> tuple[FGOutput, list[_Bad], int]:
        n = batch.num_rows
        bads: list[_Bad] = []
        values: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        truncated = 0
        for f in self.spec.sparse:
            if f.sequence is not None:
                continue
            arr = batch.column(f.column)
            if f.boundaries is not None:
                x, bad = to_float(arr, f.raw_default, f.column)
                ids = np.searchsorted(np.asarray(f.boundaries, np.float64), x, side="right").astype(np.int64)
                present = np.ones(n, bool)
            else:
                ids, present, bad = map_ids(arr, f.mapping, f.column, f.zch)
            if bad is not None:
                bads.append(bad)
            values[f.name] = ids if present.all() else ids[present]
            lengths[f.name] = present.astype(np.int32)
        for s in self.spec.sequences:
            t = self._sequence(batch.column(s.column), s, n, values, lengths, bads)
            truncated += t
        dense = np.empty((n, len(self.spec.dense)), np.float32)
        for j, d in enumerate(self.spec.dense):
            x, bad = to_float(batch.column(d.column), d.default, d.column)
            if d.log_offset is not None:
                shifted = x + d.log_offset
                nonpos = shifted <= 0
                if nonpos.any():
                    bads.append(
                        _Bad(
                            np.flatnonzero(nonpos),
                            d.column,
                            f"a value > {-d.log_offset} for log(x+{d.log_offset:g})",
                            batch.column(d.column),
                        )
                    )
                    shifted = np.where(nonpos, 1.0, shifted)
                x = np.log(shifted)
            if bad is not None:
                bads.append(bad)
            dense[:, j] = (x - d.mean) / d.std
        labels = np.zeros(n, np.float32)
        weights = groups = None
        if self.with_labels:
            labels = self._label(batch.column(self.spec.label), bads)
            if self.spec.weight:
                w, bad = to_float(batch.column(self.spec.weight), 1.0, self.spec.weight)
                if bad is not None:
                    bads.append(bad)
                weights = w.astype(np.float32)
        if self.spec.group_column and batch.schema.get_field_index(self.spec.group_column) >= 0:
            g = batch.column(self.spec.group_column)
            if pa.types.is_integer(g.type):
                groups = _np(pc.fill_null(g, -1)).astype(np.int64)
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

    def _label(self, arr: pa.Array, bads: list[_Bad]) -> np.ndarray:
        col = self.spec.label
        y, bad = to_float(arr, np.nan, col)
        notbin = ~((y == 0) | (y == 1))
        if bad is not None:
            notbin[bad.rows] = True
        if notbin.any():
            bads.append(_Bad(np.flatnonzero(notbin), col, "a label of 0 or 1", arr))
            y = np.where(notbin, 0.0, y)
        return y.astype(np.float32)

    def _sequence(
        self,
        arr: pa.Array,
        s: SequenceFeature,
        n: int,
        values: dict[str, np.ndarray],
        lengths: dict[str, np.ndarray],
        bads: list[_Bad],
    ) -> int:
        if not _is_str(arr.type):
            raise DataError(
                f"column {s.column!r}: expected a string column for sequence {s.name!r}, got {arr.type}"
            )
        fast = self._sequence_fast(arr, s, n, values, lengths)
        if fast is not None:
            return fast
        text = pc.fill_null(arr, "") if arr.null_count else arr
        items = pc.split_pattern(text, pattern=s.delimiter)
        counts = _np(pc.list_value_length(items)).astype(np.int64)
        counts[_np(pc.binary_length(text)) == 0] = 0
        kept = np.minimum(counts, s.max_length)
        truncated = int((counts > s.max_length).sum())
        total = int(kept.sum())
        row_of_item = np.repeat(np.arange(n), kept)
        flat_items = items.values
        if len(flat_items) == total:
            kept_items = flat_items
        else:  # drop the items past max_length and the single "" item of each empty row
            starts = np.asarray(items.offsets)[:-1].astype(np.int64)
            first_kept = np.cumsum(kept) - kept
            item_idx = np.repeat(starts, kept) + (np.arange(total) - np.repeat(first_kept, kept))
            kept_items = flat_items.take(pa.array(item_idx))
        subs = pc.split_pattern(kept_items, pattern=s.sub_delimiter)
        nsub = len(s.sub_features)
        sub_counts = _np(pc.list_value_length(subs))
        malformed = sub_counts != nsub
        if nsub == 1:
            malformed |= _np(pc.equal(kept_items, ""))
        if malformed.any():
            bad_items = np.flatnonzero(malformed)
            bads.append(
                _Bad(
                    row_of_item[bad_items],
                    s.column,
                    f"items of {nsub} sub-values separated by {s.sub_delimiter!r}",
                    kept_items,
                    bad_items,
                )
            )
        sub_starts = np.asarray(subs.offsets)[:-1].astype(np.int64)
        flat = subs.values
        last = max(len(flat) - 1, 0)
        feats = [self._feature(k) for k in s.sub_features]
        flat_len = _np(pc.binary_length(flat)) if len(flat) else np.zeros(0, np.int32)
        empty_all = flat_len == 0
        # Integer sub-values (mod mappings) are validated and parsed once for all sub-features.
        uint_all, uint_ok = (
            parse_uint(flat, flat_len) if any(f.mapping.kind == "mod" for f in feats) else (None, None)
        )
        # When every item is well-formed, sub-value j of item i sits at i * nsub + j: strided views.
        regular = len(flat) == total * nsub and not malformed.any()
        for j, (key, f) in enumerate(zip(s.sub_features, feats)):
            if regular:
                take = slice(j, None, nsub)
            else:
                take = np.minimum(sub_starts + j, last) if len(flat) else np.zeros(0, np.int64)
            empty = empty_all[take]
            # An empty sub-value is a missing one: the default keeps items aligned across sub-features.
            fill = f.mapping.default_value
            if empty.any() and fill is None:
                bad_items = np.flatnonzero(empty & ~malformed)
                if bad_items.size:
                    expected = f"a non-empty sub-value for {key!r} (or a default_value for it)"
                    bads.append(_Bad(row_of_item[bad_items], s.column, expected, kept_items, bad_items))
            if f.mapping.kind == "mod":
                ok = uint_ok[take] | empty
                raw = uint_all[take]
                if fill is not None and empty.any():
                    raw = np.where(empty, int(fill), raw)
                wrong = ~ok & ~malformed
                if wrong.any():
                    bad_items = np.flatnonzero(wrong)
                    expected = f"{UINT_EXPECTED} in sub-feature {key!r}"
                    bads.append(_Bad(row_of_item[bad_items], s.column, expected, kept_items, bad_items))
                ids = bucket_ids(raw, f.mapping, f.zch)
            else:
                idx = np.arange(j, len(flat), nsub) if regular else take
                vals = flat.take(pa.array(idx)) if len(flat) else pa.array([], pa.string())
                if fill is not None and empty.any():
                    vals = pc.if_else(pa.array(empty), fill, vals)
                ids, _, bad = map_ids(vals, f.mapping, s.column, f.zch)
                if bad is not None:
                    expected = f"{bad.expected} in sub-feature {key!r}"
                    bads.append(_Bad(row_of_item[bad.rows], s.column, expected, kept_items, bad.rows))
            values[key] = ids
            lengths[key] = kept.astype(np.int32)
        return truncated

    def _sequence_fast(
        self,
        arr: pa.Array,
        s: SequenceFeature,
        n: int,
        values: dict[str, np.ndarray],
        lengths: dict[str, np.ndarray],
    ) -> int | None:
        """The common case in one C++ pass: histories of decimal ids, nothing to truncate or reject.

        Items become lines (``|`` → newline) parsed by Arrow's CSV reader with ``\x03`` as the field
        delimiter. Returns None — and the general path above runs, which finds and names bad rows —
        whenever anything is unusual: other bytes than digits and the two delimiters, empty items,
        a wrong number of sub-values, a history longer than ``max_length``, ids of 19+ digits.
        """
        feats = [self._feature(k) for k in s.sub_features]
        delim, sub = s.delimiter.encode(), s.sub_delimiter.encode()
        if (
            len(delim) != 1
            or len(sub) != 1
            or delim in b'\n\r"0123456789'
            or sub in b'\n\r"0123456789'
            or any(f.mapping.kind != "mod" for f in feats)
            or any(
                f.mapping.default_value is not None and not f.mapping.default_value.isdigit() for f in feats
            )
        ):
            return None
        if pa.types.is_large_string(arr.type):
            offs = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + n + 1]
        else:
            offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + n + 1]
        data = arr.buffers()[2]
        raw = np.frombuffer(data, np.uint8)[offs[0] : offs[-1]] if data is not None else np.zeros(0, np.uint8)
        rel = (offs - offs[0]).astype(np.int64)
        if arr.null_count:
            rel_len = np.diff(rel) * ~_np(arr.is_null())
            if (rel_len != np.diff(rel)).any():
                return None
        d, c = delim[0], sub[0]
        is_delim = raw == d
        if not (((raw - 48) < 10) | is_delim | (raw == c)).all():
            return None
        row_len = np.diff(rel)
        delim_rows = np.searchsorted(rel, np.flatnonzero(is_delim), side="right") - 1
        counts = np.where(row_len > 0, np.bincount(delim_rows, minlength=n)[:n] + 1, 0)
        if (counts > s.max_length).any():
            return None
        total = int(counts.sum())
        text = np.insert(raw, rel[1:], d)  # one item per line, every row ends with a newline
        text[text == d] = 10
        names = [f"s{j}" for j in range(len(feats))]
        try:
            table = pacsv.read_csv(
                pa.BufferReader(pa.py_buffer(text)),
                read_options=pacsv.ReadOptions(
                    column_names=names, use_threads=False, block_size=max(1 << 20, text.size + 2)
                ),
                parse_options=pacsv.ParseOptions(delimiter=chr(c), quote_char=False, escape_char=False),
                convert_options=pacsv.ConvertOptions(
                    column_types=dict.fromkeys(names, pa.int64()), strings_can_be_null=False
                ),
            )
        except pa.ArrowInvalid:
            return None
        if table.num_rows != total:  # empty items were skipped as empty lines
            return None
        out: list[np.ndarray] = []
        for name, f in zip(names, feats):
            col = table.column(name)
            if col.null_count:
                if f.mapping.default_value is None:
                    return None
                col = pc.fill_null(col, int(f.mapping.default_value))
            v = _np(col).astype(np.int64, copy=False)
            if v.size and v.max() >= 10**18:
                return None
            out.append(bucket_ids(v, f.mapping, f.zch))
        kept = counts.astype(np.int32)
        for key, v in zip(s.sub_features, out):
            values[key] = v
            lengths[key] = kept
        return 0

    def _feature(self, key: str) -> SparseFeature:
        return self.spec.feature(key)
