"""Shard arithmetic and the required exactness test: every row exactly once over all shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from recpipe.data import Shard, Source, open_source
from recpipe.data.sharding import FileSlice, slice_files


def test_shard_of_combines_rank_and_worker() -> None:
    assert Shard.of(0, 1, 0, 0) == Shard(0, 1)
    assert Shard.of(1, 2, 2, 3) == Shard(5, 6)
    assert Shard.of(2, 3, 0, 0) == Shard(2, 3)
    assert [Shard.of(r, 2, w, 2).index for r in range(2) for w in range(2)] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "args, message",
    [((2, 2, 0, 0), "rank must be in"), ((0, 1, 1, 0), "worker must be in"), ((0, 0, 0, 0), "rank")],
)
def test_shard_of_rejects_out_of_range(args: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Shard.of(*args)


def test_shard_rejects_bad_index() -> None:
    with pytest.raises(ValueError, match=r"shard index must be in \[0, 3\), got 3"):
        Shard(3, 3)


def test_row_ranges_tile_the_rows() -> None:
    assert [Shard(i, 3).row_range(10) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert [Shard(i, 4).row_range(2) for i in range(4)] == [(0, 0), (0, 1), (1, 1), (1, 2)]


def test_slice_files_skips_empty_files_and_clips_edges() -> None:
    assert slice_files([4, 0, 5], 2, 7) == [FileSlice(0, 2, 4), FileSlice(2, 0, 3)]
    assert slice_files([4, 0, 5], 4, 4) == []
    assert slice_files([4, 0, 5], 0, 9) == [FileSlice(0, 0, 4), FileSlice(2, 0, 5)]


def _check_exact(source: Source, world_size: int, num_workers: int) -> None:
    seen: list[int] = []
    for rank in range(world_size):
        for worker in range(max(num_workers, 1)):
            shard = Shard.of(rank, world_size, worker, num_workers)
            rows = [
                r for sb in source.iter_batches(shard, batch_rows=64) for r in sb.batch["row"].to_pylist()
            ]
            start, stop = shard.row_range(1009)
            assert rows == list(range(start, stop)), (world_size, num_workers, rank, worker)
            seen += rows
    assert seen == list(range(1009))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_parquet_shards_cover_every_row_once(parquet_dir: Path, world_size: int, num_workers: int) -> None:
    _check_exact(open_source(str(parquet_dir)), world_size, num_workers)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_csv_shards_cover_every_row_once(csv_dir: Path, world_size: int, num_workers: int) -> None:
    _check_exact(open_source(str(csv_dir)), world_size, num_workers)


def test_more_shards_than_rows_leaves_some_empty(parquet_dir: Path) -> None:
    source = open_source(str(parquet_dir / "part-00000.parquet"))
    counts = [sum(sb.num_rows for sb in source.iter_batches(Shard(i, 600))) for i in range(600)]
    assert sum(counts) == 300 and counts.count(0) == 300 and max(counts) == 1
