"""A log sorted by request (one user's row repeated with each of its candidates) FG'd request by request: the
request's shared columns (the *context*: a user's features and history) FG'd once and tiled over its candidates
(:class:`~recpipe.features.tile.TiledFG`), the same FG output as the rows one by one.

A request is a run of consecutive rows with the same request-key value; a key that comes back later is another
request. Every row of a request must hold the same context values (a missing value equals a missing one, read
by the raw-value contract): a row that differs is a contract error of the grouping, raised whatever
``on_bad_row`` says (skipping it would score a row with another row's user). A request that goes on into the
next source batch is carried; one longer than ``max_rows`` is FG'd in pieces (each piece FGs the context again:
the same output), so at most about twice ``max_rows`` rows are held. A request with a bad row is FG'd row by row
with the given FG, which names the row by its file and row as the row form does (or, under ``skip``, leaves it
out and counts it in ``fg.stats``).

Example::

    groups = RequestGroups(FeatureGenerator(spec, with_labels=False), "request_id", ["user_id", "click_50_seq"],
                           columns=source.schema().names, where="logs/", max_rows=65_536)
    done = groups.feed(source_batch, position=0)   # the requests completed in this batch, or None
    last = groups.finish()                         # the request still open at the end
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.data.types import DataError, SourceBatch
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import column_kinds, normalize
from recpipe.features.tile import TiledFG


@dataclass
class Grouped:
    """FG output of whole requests (or pieces of one) and the source rows it is for.

    Args:
        out (FGOutput): FG output, one row per emitted row.
        rows (pa.Table): the emitted rows as read (every column), in source order.
        positions (np.ndarray): ``(B,)`` int64, each emitted row's 0-based position in the source.
    """

    out: FGOutput
    rows: pa.Table
    positions: np.ndarray


@dataclass
class _Segment:
    """Consecutive rows of one request within one source batch."""

    table: pa.Table
    file: str
    first_row: int  # in its file
    position: int  # in the source


def _differs(arr: pa.Array) -> np.ndarray:
    """``(n - 1,)`` bool: row ``i + 1`` holds another value than row ``i`` (missing equals missing)."""
    a, b = arr.slice(1), arr.slice(0, max(len(arr) - 1, 0))
    try:
        ne = pc.fill_null(pc.not_equal(a, b), False)
    except (
        pa.ArrowNotImplementedError,
        pa.ArrowInvalid,
        pa.ArrowTypeError,
    ):  # lists, maps: compared in Python
        vals = arr.to_pylist()
        return np.array([not _same(x, y) for x, y in zip(vals[1:], vals[:-1])], bool)
    one_missing = pc.xor(pc.is_null(a), pc.is_null(b))
    return ne.to_numpy(zero_copy_only=False) | one_missing.to_numpy(zero_copy_only=False)


def _same(x: Any, y: Any) -> bool:
    return x == y or (x != x and y != y)  # NaN is the same as NaN


def _concat(tables: list[pa.Table]) -> pa.Table:
    # Files of one source may differ in width (int32 in one, int64 in the next): promoted, as the row form reads.
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


class RequestGroups:
    """FG of rows grouped by a request key, each request's context columns FG'd once.

    Args:
        fg (FeatureGenerator): the serving FG (``with_labels=False``); its ``on_bad_row`` applies to bad values.
        request_key (str): the column whose runs of equal values are the requests (may be a context column).
        context_columns (list[str]): the columns every row of a request shares; input columns of the model.
        columns (list[str]): the source's columns.
        where (str): the source, for error messages.
        max_rows (int): a request longer than this is FG'd in pieces of about this many rows.

    Raises:
        ValueError: no context column, a column given twice, a column not in the source, or a context column
            that is no input column of the model.
    """

    def __init__(
        self,
        fg: FeatureGenerator,
        request_key: str,
        context_columns: list[str],
        columns: list[str],
        where: str,
        max_rows: int,
    ) -> None:
        ctx = list(context_columns)
        if not ctx:
            raise ValueError("--context-columns is empty; name the columns every row of a request shares")
        twice = sorted({c for c in ctx if ctx.count(c) > 1})
        if twice:
            raise ValueError(f"--context-columns names {twice} twice")
        absent = [c for c in [request_key, *ctx] if c not in columns]
        if absent:
            raise ValueError(
                f"{where}: no column(s) {absent} for --request-key/--context-columns; the data has {columns}"
            )
        known = column_kinds(fg.spec, with_labels=False)
        unknown = [c for c in ctx if c not in known]
        if unknown:
            raise ValueError(
                f"--context-columns {unknown} {'is no' if len(unknown) == 1 else 'are no'} input column of the "
                f"model (a context column is FG'd once per request); expected some of {list(known)[:10]}"
            )
        self.fg, self.key, self.ctx, self.where, self.max_rows = fg, request_key, ctx, where, max_rows
        # The tiled path raises on a bad value (the rows are then FG'd again by ``fg``, which names or skips it).
        self._tiled = TiledFG(FeatureGenerator(fg.spec, on_bad_row="error", with_labels=False))
        self._open: list[_Segment] = []  # the rows of the request still open (it may go on in the next batch)
        self._open_key: Any = None
        self._open_context: dict[str, Any] = {}
        self._open_start = 0

    def feed(self, sb: SourceBatch, position: int) -> Grouped | None:
        """FG of the requests ``sb`` completes (and of a long open request's rows so far), or None.

        Args:
            sb (SourceBatch): the next source batch.
            position (int): the source position of its first row.

        Raises:
            DataError: a null request key, or a row whose context value differs from its request's.
        """
        n = sb.num_rows
        if n == 0:
            return None
        key = sb.batch.column(self.key)
        if key.null_count:
            i = int(np.flatnonzero(key.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataError(
                f"{self._where(sb, position, i)}, column {self.key!r}: the request key is missing; every row "
                f"needs its request's key"
            )
        new = np.r_[True, _differs(key)]
        continues = self._open_key is not None and _same(key[0].as_py(), self._open_key)
        new[0] = not continues
        ctx = self._check_context(sb, position, new)
        starts = np.flatnonzero(np.r_[True, new[1:]])  # each run of the batch (the first may go on a request)
        table = pa.Table.from_batches([sb.batch])
        done: list[list[_Segment]] = []
        for s, e in zip(starts, np.r_[starts[1:], n]):
            seg = _Segment(table.slice(s, e - s), sb.file, sb.first_row + int(s), position + int(s))
            if s == 0 and continues:
                self._open.append(seg)
                continue
            if self._open:
                done.append(self._open)
            self._open, self._open_key, self._open_start = [seg], key[int(s)].as_py(), position + int(s)
            self._open_context = {c: ctx.column(c)[int(s)].as_py() for c in self.ctx}
        if sum(s.table.num_rows for s in self._open) >= self.max_rows:  # bounded memory: FG'd in pieces
            done.append(self._open)
            self._open = []
        return self._emit(done)

    def finish(self) -> Grouped | None:
        """FG of the request still open at the end of the source, or None."""
        done, self._open, self._open_key = ([self._open] if self._open else []), [], None
        return self._emit(done)

    def _where(self, sb: SourceBatch, position: int, i: int) -> str:
        # As the row form names a row (its file and row), with its position in a source of several files.
        at = f"{sb.file}, row {sb.first_row + i}"
        return at if sb.first_row == position else f"{at} (row {position + i} of {self.where})"

    def _check_context(self, sb: SourceBatch, position: int, new: np.ndarray) -> pa.RecordBatch:
        """The context columns as FG reads them, each checked to hold its request's value in every row."""
        # Compared as FG reads them ("" and NaN are missing values): values FG takes for the same are the same.
        ctx = normalize(sb.batch.select(self.ctx), self.fg.spec, with_labels=False)
        first: tuple[int, str, Any] | None = None
        for c in self.ctx:
            col = ctx.column(c)
            bad = np.flatnonzero(_differs(col) & ~new[1:]) + 1
            if not new[0] and not _same(col[0].as_py(), self._open_context[c]):
                bad = np.r_[0, bad]
            if bad.size and (first is None or bad[0] < first[0]):
                i = int(bad[0])
                expected = self._open_context[c] if i == 0 else col[i - 1].as_py()
                first = (i, c, expected)
        if first is None:
            return ctx
        i, c, expected = first
        starts = np.flatnonzero(new[: i + 1])
        start = position + int(starts[-1]) if starts.size else self._open_start
        raise DataError(
            f"{self._where(sb, position, i)}, column {c!r}: expected {str(expected)[:80]!r}, the value of request "
            f"{self.key}={sb.batch.column(self.key)[i].as_py()!r} from its first row {start}, got "
            f"{str(ctx.column(c)[i].as_py())[:80]!r}; a --context-columns column holds one value per request"
        )

    def _emit(self, done: list[list[_Segment]]) -> Grouped | None:
        if not done:
            return None
        outs, rows, positions = [], [], []
        for segments in done:
            full = _concat([s.table for s in segments])
            try:
                outs.append(self._tiled(full.select(self.ctx).slice(0, 1), full.drop_columns(self.ctx)))
                rows.append(full)
                positions += [s.position + np.arange(s.table.num_rows) for s in segments]
            except DataError:  # a bad value: the row form names it by its file and row, or skips it
                for s in segments:
                    outs.append(self.fg(s.table, file=s.file, first_row=s.first_row))
                    kept = (
                        np.arange(s.table.num_rows)
                        if self.fg.last_kept is None
                        else np.flatnonzero(self.fg.last_kept)
                    )
                    rows.append(s.table.take(pa.array(kept)))
                    positions.append(s.position + kept)
        return Grouped(FGOutput.concat(outs), _concat(rows), np.concatenate(positions).astype(np.int64))
