"""Step-ordered input for synchronous training: global batch ``k`` is rows ``[s + kB, s + (k+1)B)`` of the
dataset for every world size, split between the ranks.

Why not contiguous per-rank shards of the rows: with DistributedModelParallel every rank must run
the same number of steps (each step is an all-to-all), and resuming on another world size must
neither repeat nor skip rows. Defining the step by global row positions gives all of that at once:

- every rank runs exactly ``ceil((N - s) / B)`` steps, whatever ``N``, ``B`` and ``W`` are;
- a 2-rank run sees the same global batches as a 1-rank run with the same ``B`` (rank ``r`` takes
  rows ``[lo + r·R//W, lo + (r+1)·R//W)`` of the step's ``R`` rows);
- the data position is one number, the global row where the next step starts.

The price: each rank decodes the Arrow columns of every row of its steps and runs FG only on its own
rows. Parquet cannot decode part of a row group, and a step is a slice of one, so on 2 ranks every rank
decodes twice its rows: measured on the benchmark's Taobao data, ~0.3 µs of CPU per extra row against
~0.8 µs/row for FG and ~16 µs/row for the whole training step, i.e. under 2% of a rank's time.

With ``num_workers > 0`` worker ``w`` (a thread, or a forked process) reads the source and runs FG for
steps ``w, w + n, ...`` ahead of the trainer, at most ``prefetch_steps`` finished steps each; the
trainer takes them in step order (:mod:`recpipe.train.prefetch`), so the batches, the FG counts, the
resume position and the errors (file, row, column) are those of ``num_workers=0``. Each worker decodes
the whole source; only FG and ``to_batch`` are divided between them.

:func:`normalize_step_weights` scales each step's ``weights`` to sum to 1 over all ranks, so
``sum(weights * bce)`` on every rank, summed over ranks, is the step's weighted mean loss.
A rank whose share of a step is empty (``R < W``, or every row dropped by ``on_bad_row="skip"``) gets
one padding row of weight 0 (TorchRec's all-to-all cannot take an empty batch).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist

from recpipe.batch import Batch, to_batch
from recpipe.config import CsvOptions
from recpipe.data.sharding import Shard
from recpipe.data.shuffle import ShuffledPiece, ShuffledView
from recpipe.data.sources import open_source
from recpipe.data.types import PartedSource
from recpipe.features.fg import BadRowError, FeatureGenerator, FGOutput, FGStats
from recpipe.features.schema_check import check_schema
from recpipe.features.spec import FeatureSpec, SparseFeature
from recpipe.train.prefetch import WorkerKind, ordered_prefetch

_SOURCE_BATCH_ROWS = 65536


def _rank_share(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Offsets ``[a, b)`` of ``rank``'s part of ``rows`` consecutive rows: the one place a global batch is
    split between ranks."""
    return rank * rows // world_size, (rank + 1) * rows // world_size


@dataclass(frozen=True)
class StepPlan:
    """Which global rows each step and rank read.

    Args:
        num_rows (int): ``N``, rows in the dataset.
        global_batch_size (int): ``B``, rows per step over all ranks.
        world_size (int): ``W``.
        start_row (int): ``s``, the first row of this pass (0, or the resume position).

    Example::

        >>> p = StepPlan(num_rows=10, global_batch_size=4, world_size=2)
        >>> p.num_steps, [p.rank_range(k, 1) for k in range(p.num_steps)], p.rows_per_rank(1)
        (3, [(2, 4), (6, 8), (9, 10)], 2)
    """

    num_rows: int
    global_batch_size: int
    world_size: int
    start_row: int = 0

    def __post_init__(self) -> None:
        if self.global_batch_size < 1 or self.world_size < 1:
            raise ValueError(f"need global_batch_size >= 1 and world_size >= 1, got {self}")
        if not 0 <= self.start_row <= self.num_rows:
            raise ValueError(f"start_row {self.start_row} is outside [0, {self.num_rows}]")

    @property
    def num_steps(self) -> int:
        return math.ceil((self.num_rows - self.start_row) / self.global_batch_size)

    def step_range(self, step: int) -> tuple[int, int]:
        """Global rows ``[lo, hi)`` of step ``step`` (0-based within this pass)."""
        lo = self.start_row + step * self.global_batch_size
        return lo, min(lo + self.global_batch_size, self.num_rows)

    def rank_range(self, step: int, rank: int) -> tuple[int, int]:
        """The part of step ``step`` that ``rank`` reads."""
        lo, hi = self.step_range(step)
        a, b = _rank_share(hi - lo, rank, self.world_size)
        return lo + a, lo + b

    def rows_per_rank(self, rank: int) -> int:
        """Rows ``rank`` reads of a full step: ``B // W`` or one more (the last step may hold fewer)."""
        a, b = _rank_share(self.global_batch_size, rank, self.world_size)
        return b - a

    def position_after(self, steps: int) -> int:
        """The global row where the next step starts after ``steps`` steps of this pass."""
        return min(self.start_row + steps * self.global_batch_size, self.num_rows)


class StepBatches:
    """This rank's Batches, one per global step, in step order.

    Args:
        uri (str): a source URI (Parquet, CSV, ``odps://``).
        spec (FeatureSpec): what FG computes.
        global_batch_size (int): ``B``, rows per step over all ranks.
        rank (int), world_size (int): this process's place.
        start_row (int): global row to start at (a step boundary when resuming).
        on_bad_row (str): FG's ``"error"`` or ``"skip"``.
        csv (CsvOptions | None): CSV options.
        num_workers (int): background workers preparing upcoming steps; 0 prepares each step in this
            thread when the trainer asks for it.
        prefetch_steps (int): finished steps each worker may hold ahead of the trainer.
        worker_kind (str): ``"thread"`` or ``"process"`` (forked).
        shuffle (Shuffle | None): read the rows in this epoch's shuffled order (:mod:`recpipe.data.shuffle`);
            None: in file order. Global positions (``start_row``, the steps) are positions of that order.

    Example::

        it = StepBatches("data/train", spec, 8192, rank=1, world_size=2)
        sb = next(iter(it))        # sb.batch: global rows 4096..8191 (4096 rows), sb.real_rows == 4096
    """

    def __init__(
        self,
        uri: str,
        spec: FeatureSpec,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        start_row: int = 0,
        on_bad_row: Literal["error", "skip"] = "error",
        csv: CsvOptions | None = None,
        num_workers: int = 0,
        prefetch_steps: int = 2,
        worker_kind: WorkerKind = "thread",
        shuffle: Shuffle | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if num_workers < 0 or prefetch_steps < 1:
            raise ValueError(
                f"need num_workers >= 0 and prefetch_steps >= 1, got {num_workers}, {prefetch_steps}"
            )
        self.uri, self.spec, self.csv = uri, spec, csv
        self.rank, self.world_size = rank, world_size
        self.on_bad_row = on_bad_row
        self.num_workers, self.prefetch_steps, self.worker_kind = num_workers, prefetch_steps, worker_kind
        self.source = open_source(uri, csv=csv)
        self.shuffle = shuffle
        if shuffle is not None and not isinstance(self.source, PartedSource):
            raise ValueError(f"{uri}: this source cannot be read shuffled; set data.shuffle: false")
        # The columns a shuffled window dictionary-encodes and FG keeps encoded: one decision for both.
        self._dictionary = hashed_id_columns(spec) if shuffle is not None else set()
        # Here, with the whole schema in hand: FG sees only the projected columns, so its own message would
        # list those as "the file has".
        check_schema(spec, self.source.schema(), uri)
        self.plan = StepPlan(self.source.num_rows(), global_batch_size, world_size, start_row)
        self.stats = FGStats()
        self._template: FGOutput | None = None

    def __len__(self) -> int:
        return self.plan.num_steps

    @staticmethod
    def steps_for(num_rows: int, global_batch_size: int) -> int:
        """Steps in a whole pass over ``num_rows`` rows."""
        return math.ceil(num_rows / global_batch_size)

    def _columns(self) -> list[str]:
        names = set(self.source.schema().names)
        return [c for c in self.spec.input_columns() if c in names]

    def _own_pieces(self) -> Iterator[tuple[int, list[_Piece]]]:
        """(step, this rank's rows of the step: Arrow slices with their file and file row, or shuffled pieces)."""
        plan = self.plan
        if plan.num_steps == 0:
            return
        if self.shuffle is not None:
            yield from self._shuffled_pieces()
            return
        step = 0
        lo, hi = plan.rank_range(0, self.rank)
        pieces: list[tuple[pa.RecordBatch, str, int]] = []
        pos = 0
        batch_rows = min(_SOURCE_BATCH_ROWS, max(plan.global_batch_size, 1024))
        for sb in self.source.iter_batches(Shard(0, 1), batch_rows=batch_rows, columns=self._columns()):
            end = pos + sb.num_rows
            while step < plan.num_steps:
                a, b = max(lo, pos), min(hi, end)
                if a < b:
                    pieces.append((sb.batch.slice(a - pos, b - a), sb.file, sb.first_row + a - pos))
                if hi > end:
                    break  # the rest of this step's rows are in later source batches
                yield step, pieces
                pieces = []
                step += 1
                if step < plan.num_steps:
                    lo, hi = plan.rank_range(step, self.rank)
            if step >= plan.num_steps:
                return
            pos = end
        while step < plan.num_steps:  # empty shares at the very end
            yield step, pieces
            pieces = []
            step += 1

    def _shuffled_pieces(self) -> Iterator[tuple[int, list[_Piece]]]:
        assert isinstance(self.source, PartedSource) and self.shuffle is not None
        view = ShuffledView(
            self.source, self.shuffle.seed, self.shuffle.epoch, self.shuffle.buffer_rows,
            dictionary=self._dictionary,
        )  # fmt: skip
        columns = self._columns()
        for step in range(self.plan.num_steps):
            lo, hi = self.plan.rank_range(step, self.rank)
            yield step, list(view.rows(lo, hi, columns))

    def _template_row(self) -> FGOutput:
        # One real row (weight 0 when used) for padding: the model's shapes stay ordinary.
        if self._template is None:
            probe = FeatureGenerator(self.spec, "skip")
            for sb in self.source.iter_batches(Shard(0, 1), batch_rows=1024, columns=self._columns()):
                out = probe(sb.batch, sb.file, sb.first_row)
                if out.num_rows:
                    self._template = out.slice(0, 1)
                    break
            if self._template is None:
                raise ValueError(f"{self.uri}: no row survives FG; nothing to train on")
        return self._template

    def __iter__(self) -> Iterator[StepBatch]:
        self.stats = FGStats()
        if self.num_workers == 0:
            steps = self._prepare(0, 1)
        else:
            steps = ordered_prefetch(self._prepare, self.num_workers, self.prefetch_steps, self.worker_kind)
        for sb, stats in steps:
            self.stats.add(stats)
            yield sb

    def _prepare(self, worker: int, workers: int) -> Iterator[tuple[StepBatch, FGStats]]:
        """Steps ``worker, worker + workers, ...`` with the FG counts of each (all steps for ``(0, 1)``)."""
        fg = FeatureGenerator(self.spec, self.on_bad_row, dictionary_columns=self._dictionary)
        keys = self.spec.sparse_keys()
        rows_are_weight = self.spec.weight is None and self.on_bad_row == "error"
        for step, pieces in self._own_pieces():
            if step % workers != worker:
                continue
            outs = [_fg_piece(fg, p, self.uri) for p in _join_by_file(pieces)]
            outs = [o for o in outs if o.num_rows]
            real = sum(o.num_rows for o in outs)
            if real:
                out = FGOutput.concat(outs)
                weights = out.weights if out.weights is not None else np.ones(real, np.float32)
            else:
                out = self._template_row()
                weights = np.zeros(1, np.float32)
            lo, hi = self.plan.step_range(step)
            batch = to_batch(dataclasses.replace(out, weights=weights), keys)
            stats, fg.stats = fg.stats, FGStats()
            yield StepBatch(batch, real, step, hi - lo, rows_are_weight), stats


@dataclass(frozen=True)
class Shuffle:
    """How an epoch's rows are shuffled (:class:`~recpipe.data.shuffle.ShuffledView`): ``data.shuffle_buffer_rows``
    and the run's seed, for epoch ``epoch``."""

    seed: int
    epoch: int
    buffer_rows: int


# A step's rows for FG: consecutive rows of one file (batch, file, first file row), or shuffled rows.
_Piece = tuple[pa.RecordBatch, str, int] | ShuffledPiece


def hashed_id_columns(spec: FeatureSpec) -> set[str]:
    """The columns FG reads only as single hashed ids (kind ``id``, a ``hash`` mapping, no other setting; not a
    label, weight or group column): a shuffled window dictionary-encodes them (:class:`ShuffledView`), so a step's
    take copies indices and FG hashes each distinct value once per window."""
    readers: dict[str, list[object]] = {}
    for e in spec.fg_entries():
        for c in (e.column, *getattr(e, "inputs", ())):
            readers.setdefault(c, []).append(e)
    others = {*spec.labels, spec.weight, spec.group_column}
    return {
        c
        for c, entries in readers.items()
        if c not in others
        and all(
            isinstance(e, SparseFeature) and e.kind == "id" and e.mapping.kind == "hash" and e.sequence is None
            and e.weights_key is None and not e.params and not e.inputs
            for e in entries
        )
    }  # fmt: skip


def _fg_piece(fg: FeatureGenerator, piece: _Piece, uri: str) -> FGOutput:
    """FG of one piece; a bad shuffled row is named by its own file and row."""
    if not isinstance(piece, ShuffledPiece):
        return fg(*piece)
    try:
        return fg(piece.batch, uri, 0)
    except BadRowError as err:
        file, row = piece.origin(err.row)
        raise BadRowError(file, row, err.column, err.expected, err.got) from None


def _join_by_file(pieces: list[_Piece]) -> list[_Piece]:
    """One Arrow batch per file of a step's pieces (consecutive rows of that file, in order); shuffled pieces
    as they are.

    A step spans two source batches whenever a file's row count is not a multiple of the batch, i.e.
    on most steps after the first file; FG costs ~0.9 ms per call plus ~0.75 µs per row here, and
    merging the FG outputs afterwards costs more than concatenating the Arrow rows first.
    """
    if any(isinstance(p, ShuffledPiece) for p in pieces):
        return pieces
    joined: list[_Piece] = []
    for file, group in itertools.groupby(pieces, key=lambda p: p[1]):
        parts = list(group)
        batch = parts[0][0] if len(parts) == 1 else pa.concat_batches([p[0] for p in parts])
        joined.append((batch, file, parts[0][2]))
    return joined


class StepBatch(NamedTuple):
    """One rank's share of a step: the Batch, how many of its rows are real (padding follows them),
    the step, its rows over all ranks, and whether those rows are the step's total weight (every row
    weighs 1 and none can be dropped)."""

    batch: Batch
    real_rows: int
    step: int
    step_rows: int
    rows_are_weight: bool


def normalize_step_weights(
    batches: Iterable[StepBatch], world_size: int, group: dist.ProcessGroup | None
) -> Iterator[Batch]:
    """Scale each step's weights so they sum to 1 over all ranks.

    The total is the step's row count when every row weighs 1 and none can be dropped; otherwise (a
    weight column, or ``on_bad_row="skip"``) one scalar all-reduce per step sums it, and every rank
    must call this for every step, in order.
    """
    for sb in batches:
        w = sb.batch.weights
        if sb.rows_are_weight:
            t = float(sb.step_rows)
        else:
            total = torch.tensor([float(w.sum(dtype=torch.float64))], dtype=torch.float64)
            if world_size > 1:
                dist.all_reduce(total, group=group)
            t = float(total.item())
        sb.batch.weights = (w.double() / t).float() if t > 0 else torch.zeros_like(w)
        yield sb.batch
