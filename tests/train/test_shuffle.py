"""The training reader's shuffle (``data.shuffle``, recpipe/data/shuffle.py): one permutation of the rows per
epoch, the same for every world size and every resume, mixing row groups from all over the data; a bad row
is still named by its own file and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from recpipe.data.parquet import ParquetSource
from recpipe.data.shuffle import ShuffledView
from recpipe.features.fg import BadRowError
from recpipe.train.data import Shuffle, StepBatches


def _dataset(root, files=(300, 0, 457, 243), group=64) -> str:
    """Files whose column ``r`` is the row's global position in file order (row groups of ``group`` rows)."""
    root.mkdir()
    start = 0
    for i, n in enumerate(files):
        table = pa.table({"r": np.arange(start, start + n, dtype=np.int64)})
        pq.write_table(table, root / f"part-{i:05d}.parquet", row_group_size=group)
        start += n
    return str(root)


def _order(view: ShuffledView, step: int = 97) -> np.ndarray:
    rows = []
    for lo in range(0, view.num_rows, step):
        for piece in view.rows(lo, min(lo + step, view.num_rows), ["r"]):
            rows.append(piece.batch.column("r").to_numpy())
    return np.concatenate(rows)


def test_each_epoch_is_a_permutation_of_every_row_and_its_own(tmp_path):
    source = ParquetSource(_dataset(tmp_path / "d"))
    n = source.num_rows()
    orders = {
        (seed, epoch, buf): _order(ShuffledView(source, seed, epoch, buf))
        for seed in (0, 1)
        for epoch in (0, 1)
        for buf in (100, 1000)
    }
    for order in orders.values():
        assert np.array_equal(np.sort(order), np.arange(n))  # every row once
        assert not np.array_equal(order, np.arange(n))
    assert len({o.tobytes() for o in orders.values()}) == len(orders)  # seeds, epochs, buffers all differ
    again = _order(ShuffledView(source, 0, 1, 100), step=13)  # read in other slices: the same order
    assert np.array_equal(again, orders[(0, 1, 100)])


def test_a_buffer_mixes_row_groups_from_all_over_the_data(tmp_path):
    """Sorted data (here: by position) comes out mixed: the first 256 rows come from several distant row groups."""
    source = ParquetSource(_dataset(tmp_path / "d", files=(4096,), group=128))
    first = _order(ShuffledView(source, 0, 0, 1024))[:256]
    groups = np.unique(first // 128)
    assert len(groups) == 8  # 1024-row windows of 8 row groups, each drawn from anywhere in 32
    assert groups.max() - groups.min() > 8
    # Within the window the rows are interleaved, not one group after another.
    assert len(np.unique(first[:16] // 128)) > 2


def test_origin_names_the_file_and_row(tmp_path):
    source = ParquetSource(_dataset(tmp_path / "d"))
    view = ShuffledView(source, 3, 0, 200)
    piece = view.rows(0, 200, ["r"])[0]
    starts = {"part-00000.parquet": 0, "part-00002.parquet": 300, "part-00003.parquet": 757}
    for i in range(0, 200, 17):
        file, row = piece.origin(i)
        assert starts[file.rsplit("/", 1)[-1]] + row == piece.batch.column("r")[i].as_py()


def _rows(batches) -> list[np.ndarray]:
    return [sb.batch.sparse["user_id"].values().numpy() for sb in batches]


def test_step_batches_shuffled_are_the_same_rows_on_one_rank_two_ranks_and_after_a_resume(
    taobao, taobao_spec
):
    shuffle = Shuffle(seed=5, epoch=2, buffer_rows=1500)
    one = list(StepBatches(taobao["train"], taobao_spec, 64, shuffle=shuffle))
    plain = list(StepBatches(taobao["train"], taobao_spec, 64))
    assert len(one) == len(plain)
    assert not all(torch.equal(a.batch.labels, b.batch.labels) for a, b in zip(one, plain))
    # The epoch's labels are the file's, reordered.
    assert sorted(torch.cat([sb.batch.labels for sb in one]).tolist()) == sorted(
        torch.cat([sb.batch.labels for sb in plain]).tolist()
    )
    ranks = [list(StepBatches(taobao["train"], taobao_spec, 64, r, 2, shuffle=shuffle)) for r in range(2)]
    for k, sb in enumerate(one):  # a rank's empty share is one padding row: compare the real ones
        real = [ranks[r][k].batch.labels[: ranks[r][k].real_rows] for r in range(2)]
        assert torch.equal(torch.cat(real), sb.batch.labels)
        if all(ranks[r][k].real_rows == len(ranks[r][k].batch.labels) for r in range(2)):
            ids = np.concatenate([_rows([ranks[r][k]])[0] for r in range(2)])
            assert np.array_equal(ids, _rows([sb])[0])
    resumed = list(StepBatches(taobao["train"], taobao_spec, 64, start_row=64 * 41, shuffle=shuffle))
    assert len(resumed) == len(one) - 41
    for a, b in zip(resumed, one[41:], strict=True):
        assert torch.equal(a.batch.labels, b.batch.labels) and torch.equal(a.batch.dense, b.batch.dense)
        assert torch.equal(a.batch.sparse.values(), b.batch.sparse.values())


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_shuffled_row_is_named_by_its_file_and_row(tmp_path, taobao, taobao_spec, workers):
    files = sorted(Path(taobao["train"]).glob("*.parquet"))
    bad = tmp_path / "bad"
    bad.mkdir()
    for i, f in enumerate(files):
        table = pq.read_table(f)
        if i == 1:
            clk = table.column("clk").to_pylist()
            clk[1234] = 7  # not a label
            table = table.set_column(
                table.schema.get_field_index("clk"), "clk", pa.array(clk, table.schema.field("clk").type)
            )
        pq.write_table(table, bad / f.name)
    reader = StepBatches(str(bad), taobao_spec, 64, shuffle=Shuffle(0, 0, 4096), num_workers=workers)
    with pytest.raises(BadRowError) as err:
        list(reader)
    assert (err.value.file.rsplit("/", 1)[-1], err.value.row, err.value.column) == (
        files[1].name,
        1234,
        "clk",
    )
