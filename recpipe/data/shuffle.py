"""A seeded shuffle of a :class:`~recpipe.data.types.PartedSource`'s rows: one permutation of the dataset per
epoch that every rank, every world size and every resume computes alike.

Logs come sorted (by time, by user): trained in file order, a model sees one user's or one hour's rows in a
run of steps and ends the epoch on the last ones. The order here is built from what a reader can read
cheaply:

1. **Units**: each part is cut into the pieces it reads whole — a Parquet file's row groups, a CSV file,
   fixed ranges of an ODPS table (:meth:`PartedSource.part_units`).
2. **Unit order**: the units are permuted, anew each epoch (``default_rng([seed, epoch])``); their rows, in
   that order, are the epoch's *stream*.
3. **Buffer**: the stream is cut into windows of ``buffer_rows`` rows, and the rows of each window are
   permuted (``default_rng([seed, epoch, window + 1])``): a shuffle buffer that holds ``buffer_rows`` rows
   drawn from ``buffer_rows / unit`` random places of the data.

Position ``p`` of the shuffled epoch is row ``perm_w[p - w·S]`` of window ``w = p // S`` of the stream, so the
global row position the trainer keeps (:mod:`recpipe.train.data`) still says everything: a resume at ``p``
reads only the windows from ``w`` on, and a 1-rank and a 2-rank run read the same global batches. A reader
decodes each window once (the last one is cached), as many rows as the sequential reader decodes.

numpy and pyarrow only.

Example::

    view = ShuffledView(ParquetSource("data/train"), seed=0, epoch=0, buffer_rows=1_048_576)
    pieces = view.rows(0, 1024, columns=["user_id", "clk"])   # the epoch's first 1024 shuffled rows
    pieces[0].batch.num_rows, pieces[0].origin(0)             # 1024, ('part-00003.parquet', 70211)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.root import SHUFFLE_BUFFER_ROWS
from recpipe.data.sharding import FileSlice
from recpipe.data.types import PartedSource, check_batch_rows, check_columns


@dataclass(frozen=True)
class ShuffledPiece:
    """Consecutive shuffled positions of one window: their rows, and where each came from.

    Args:
        batch (pa.RecordBatch): the rows, in shuffled order.
        parts (np.ndarray): (rows,) int32 part index of each row.
        part_rows (np.ndarray): (rows,) int64 row of each row in its part.
        names (list[str]): the part names, by part index.
    """

    batch: pa.RecordBatch
    parts: np.ndarray
    part_rows: np.ndarray
    names: list[str]

    def origin(self, i: int) -> tuple[str, int]:
        """(part name, row in that part) of row ``i``: what an error about it names."""
        return self.names[int(self.parts[i])], int(self.part_rows[i])


@dataclass
class _Window:
    index: int
    batch: pa.RecordBatch  # the window's rows in stream order
    parts: np.ndarray
    part_rows: np.ndarray
    perm: np.ndarray


class ShuffledView:
    """One epoch's shuffled order of a source's rows.

    Args:
        source (PartedSource): the dataset.
        seed (int): the shuffle's seed (the run's ``train.seed``).
        epoch (int): the epoch: each has its own order.
        buffer_rows (int): rows of the shuffle buffer (a window of the stream).
        dictionary (Collection[str]): string columns to dictionary-encode once per window: every piece of the
            window then holds their indices into one shared dictionary (the take copies 4 bytes a row instead of
            the text, and FG can hash each distinct value once per window, :func:`~recpipe.features.columns.map_ids`).
            A column that is not a string column is read as it is.
    """

    def __init__(
        self,
        source: PartedSource,
        seed: int,
        epoch: int,
        buffer_rows: int = SHUFFLE_BUFFER_ROWS,
        dictionary: Collection[str] = (),
    ):
        check_batch_rows(buffer_rows)
        self.source, self.seed, self.epoch, self.buffer_rows = source, seed, epoch, buffer_rows
        self.dictionary = frozenset(dictionary)
        units = [
            (part, start, start + n)
            for part, _ in enumerate(source.part_rows())
            for start, n in _offsets(source.part_units(part))
            if n
        ]
        order = np.random.default_rng([seed, epoch]).permutation(len(units))
        self.units: list[tuple[int, int, int]] = [units[i] for i in order]
        sizes = np.array([stop - start for _, start, stop in self.units], np.int64)
        self._unit_start = np.concatenate(([0], np.cumsum(sizes)))  # stream position of each unit
        self.num_rows = int(self._unit_start[-1])
        self._names = [source.part_name(i) for i in range(len(source.part_rows()))]
        self._window: _Window | None = None

    def rows(self, lo: int, hi: int, columns: list[str] | None = None) -> list[ShuffledPiece]:
        """The rows at shuffled positions ``[lo, hi)``, one piece per window they span, in order."""
        if not 0 <= lo <= hi <= self.num_rows:
            raise ValueError(f"positions [{lo}, {hi}) are outside the epoch's [0, {self.num_rows})")
        columns = check_columns(self.source.schema(), columns, self.source.uri)
        out = []
        size = self.buffer_rows
        while lo < hi:
            w = lo // size
            stop = min(hi, (w + 1) * size)
            window = self._read_window(w, columns)
            take = window.perm[lo - w * size : stop - w * size]
            out.append(
                ShuffledPiece(
                    window.batch.take(pa.array(take)),
                    window.parts[take],
                    window.part_rows[take],
                    self._names,
                )
            )
            lo = stop
        return out

    def _read_window(self, w: int, columns: list[str] | None) -> _Window:
        if self._window is not None and self._window.index == w:
            return self._window
        lo, hi = w * self.buffer_rows, min((w + 1) * self.buffer_rows, self.num_rows)
        batches, parts, part_rows = [], [], []
        first = int(np.searchsorted(self._unit_start, lo, side="right")) - 1
        for u in range(first, len(self.units)):
            ustart = int(self._unit_start[u])
            if ustart >= hi:
                break
            part, start, stop = self.units[u]
            a, b = start + max(lo - ustart, 0), start + min(hi - ustart, stop - start)
            got = 0
            for rb in self.source.read_part(FileSlice(part, a, b), columns, b - a):
                batches.append(rb)
                got += rb.num_rows
            if got != b - a:
                raise ValueError(f"{self._names[part]}: rows [{a}, {b}) gave {got} rows; the part changed?")
            parts.append(np.full(b - a, part, np.int32))
            part_rows.append(np.arange(a, b, dtype=np.int64))
        if not batches:
            schema = self.source.schema()
            empty = pa.RecordBatch.from_pylist(
                [], schema=schema if columns is None else _project(schema, columns)
            )
            batches = [empty]
        batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        batch = _encode(batch, self.dictionary)
        perm = np.random.default_rng([self.seed, self.epoch, w + 1]).permutation(hi - lo)
        self._window = _Window(w, batch, np.concatenate(parts or [np.zeros(0, np.int32)]),
                               np.concatenate(part_rows or [np.zeros(0, np.int64)]), perm)  # fmt: skip
        return self._window


def _encode(batch: pa.RecordBatch, columns: frozenset[str]) -> pa.RecordBatch:
    """``batch`` with its string columns among ``columns`` dictionary-encoded."""
    fields = [
        i
        for i, f in enumerate(batch.schema)
        if f.name in columns and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
    ]
    if not fields:
        return batch
    arrays = list(batch.columns)
    for i in fields:
        arrays[i] = pc.dictionary_encode(arrays[i])
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _offsets(sizes: list[int]) -> list[tuple[int, int]]:
    """(start, size) of consecutive units of ``sizes`` rows."""
    starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))[:-1]
    return [(int(s), int(n)) for s, n in zip(starts, sizes, strict=True)]


def _project(schema: pa.Schema, columns: list[str]) -> pa.Schema:
    return pa.schema([schema.field(c) for c in columns])
