"""IterableDataset + DataLoader: each (rank, worker) reads its own exact shard and yields Batches.

Every worker runs FG on its source batches, re-chunks the results to ``batch_size`` rows and keeps
its last partial batch. At the end of a pass each worker sends its FG counts, which
:class:`BatchLoader` sums into :attr:`BatchLoader.stats` (``rows_read = rows_emitted + rows_skipped``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from recpipe.batch import Batch, to_batch
from recpipe.config import CsvOptions
from recpipe.data.sharding import Shard
from recpipe.data.sources import open_source
from recpipe.features.fg import FeatureGenerator, FGOutput, FGStats
from recpipe.features.spec import FeatureSpec


class FGDataset(IterableDataset):
    """Batches of one (rank, worker) shard of a dataset.

    Args:
        uri (str): a source URI (Parquet file/folder/glob, CSV, ``odps://``).
        spec (FeatureSpec): what FG computes.
        batch_size (int): rows per batch; the last batch of each worker may be smaller.
        rank (int), world_size (int): this process's place among training processes.
        on_bad_row (str): ``"error"`` or ``"skip"``.
        csv (CsvOptions | None): CSV options.
        with_labels (bool): read labels.

    Example::

        ds = FGDataset("runs/x/data/train", spec, batch_size=8192, rank=0, world_size=2)
        batch = next(b for b in ds if isinstance(b, Batch))   # Batch(dense (B, D), sparse KJT, labels (B,))
    """

    def __init__(
        self,
        uri: str,
        spec: FeatureSpec,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        on_bad_row: Literal["error", "skip"] = "error",
        csv: CsvOptions | None = None,
        with_labels: bool = True,
    ):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.uri, self.spec, self.batch_size = uri, spec, batch_size
        self.rank, self.world_size = rank, world_size
        self.on_bad_row, self.csv, self.with_labels = on_bad_row, csv, with_labels

    def shard(self) -> Shard:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 0)
        return Shard.of(self.rank, self.world_size, worker, workers)

    def __iter__(self) -> Iterator[Batch | FGStats]:
        source = open_source(self.uri, csv=self.csv)
        names = set(source.schema().names)
        columns = [c for c in self.spec.input_columns() if c in names]
        fg = FeatureGenerator(self.spec, self.on_bad_row, with_labels=self.with_labels)
        keys = self.spec.sparse_keys()
        pending: list[FGOutput] = []
        pending_rows = 0
        for sb in source.iter_batches(self.shard(), batch_rows=self.batch_size, columns=columns):
            out = fg(sb.batch, sb.file, sb.first_row)
            if out.num_rows == 0:
                continue
            pending.append(out)
            pending_rows += out.num_rows
            while pending_rows >= self.batch_size:
                merged = FGOutput.concat(pending)
                yield to_batch(merged.slice(0, self.batch_size), keys)
                rest = merged.slice(self.batch_size, merged.num_rows)
                pending, pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
        if pending_rows:
            yield to_batch(FGOutput.concat(pending), keys)
        yield fg.stats


class BatchLoader:
    """A DataLoader over :class:`FGDataset` with ``num_workers`` processes; collects FG counts.

    Example::

        loader = BatchLoader(ds, num_workers=2)
        for batch in loader:
            ...
        print(loader.stats.summary())
    """

    def __init__(self, dataset: FGDataset, num_workers: int = 0):
        self.dataset = dataset
        self.num_workers = num_workers
        self.stats = FGStats()

    def __iter__(self) -> Iterator[Batch]:
        self.stats = FGStats()
        loader = DataLoader(
            self.dataset,
            batch_size=None,
            num_workers=self.num_workers,
            collate_fn=_identity,
            multiprocessing_context="fork"
            if self.num_workers and torch.multiprocessing.get_start_method(True) in (None, "fork")
            else None,
        )
        for item in loader:
            if isinstance(item, FGStats):
                self.stats.add(item)
            else:
                yield item


def _identity(x: object) -> object:
    return x
