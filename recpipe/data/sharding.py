"""Exact row-range sharding: shard ``i`` of ``k`` owns global rows ``[i*N//k, (i+1)*N//k)``.

Every source counts its rows first (Parquet metadata, a CSV scan, the ODPS download session) and then
reads only its own contiguous range, so the union over all shards of one count is exactly the
dataset, in order, with no row lost or duplicated, also when ``k`` does not divide ``N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    """This reader's share of the data: shard ``index`` of ``count``.

    Args:
        index (int): which shard, ``0 <= index < count``.
        count (int): how many shards the data is split into (``world_size * num_workers``).

    Example::

        >>> Shard.of(rank=1, world_size=2, worker=2, num_workers=3)
        Shard(index=5, count=6)
        >>> Shard(5, 6).row_range(1009)
        (840, 1009)
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"shard count must be >= 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index must be in [0, {self.count}), got {self.index}")

    @staticmethod
    def of(rank: int, world_size: int, worker: int, num_workers: int) -> Shard:
        """The shard of DataLoader ``worker`` (of ``num_workers``; 0 means 1) on ``rank`` (of ``world_size``).

        Args:
            rank (int): distributed rank, ``0 <= rank < world_size``.
            world_size (int): number of ranks.
            worker (int): DataLoader worker id, ``0 <= worker < max(num_workers, 1)``.
            num_workers (int): DataLoader ``num_workers``; 0 (load in the main process) counts as 1.

        Example::

            >>> Shard.of(0, 1, 0, 0)
            Shard(index=0, count=1)
        """
        workers = max(num_workers, 1)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if num_workers < 0 or not 0 <= worker < workers:
            raise ValueError(f"worker must be in [0, {workers}) for num_workers={num_workers}, got {worker}")
        return Shard(rank * workers + worker, world_size * workers)

    def row_range(self, total_rows: int) -> tuple[int, int]:
        """The global half-open row range ``[start, stop)`` this shard owns out of ``total_rows``.

        Args:
            total_rows (int): rows in the whole dataset.

        Example::

            >>> [Shard(i, 3).row_range(10) for i in range(3)]
            [(0, 3), (3, 6), (6, 10)]
        """
        if total_rows < 0:
            raise ValueError(f"total_rows must be >= 0, got {total_rows}")
        return self.index * total_rows // self.count, (self.index + 1) * total_rows // self.count


@dataclass(frozen=True)
class FileSlice:
    """Rows ``[start, stop)`` (file-local, 0-based) of file number ``file_index``."""

    file_index: int
    start: int
    stop: int


def slice_files(file_rows: Sequence[int], start: int, stop: int) -> list[FileSlice]:
    """Map the global row range ``[start, stop)`` over files holding ``file_rows`` rows each (in order).

    Args:
        file_rows (Sequence[int]): row count of every file, in dataset order.
        start (int): first global row.
        stop (int): one past the last global row.

    Returns:
        list[FileSlice]: the non-empty per-file pieces, in order.

    Example::

        >>> slice_files([4, 0, 5], 2, 7)
        [FileSlice(file_index=0, start=2, stop=4), FileSlice(file_index=2, start=0, stop=3)]
    """
    pieces: list[FileSlice] = []
    offset = 0
    for i, n in enumerate(file_rows):
        lo, hi = max(start, offset), min(stop, offset + n)
        if lo < hi:
            pieces.append(FileSlice(i, lo - offset, hi - offset))
        offset += n
        if offset >= stop:
            break
    return pieces
