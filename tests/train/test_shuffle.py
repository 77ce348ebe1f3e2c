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


def test_hashed_id_columns_come_dictionary_encoded_and_give_the_plain_rows_ids(tmp_path):
    """A shuffled window dictionary-encodes the string columns read only as hashed ids (each distinct value
    hashed once per window): the batches are those of FG on the same rows as plain strings, with nulls, empty
    strings (missing), a ``default_value``, values holding the multi-value separator (decoded, several ids) and a
    column that another feature reads as a vocabulary (never encoded)."""
    from recpipe.config import load_config
    from recpipe.features.build import build_feature_spec
    from recpipe.features.fg import FeatureGenerator
    from recpipe.train.data import hashed_id_columns

    rng = np.random.default_rng(0)
    n = 900

    def words(k: int, nulls: bool = True) -> list:
        out = [f"v{int(x)}" for x in rng.integers(0, k, n)]
        if nulls:
            for i in rng.choice(n, 60, replace=False):
                out[i] = None
            for i in rng.choice(n, 30, replace=False):
                out[i] = ""
        return out

    multi = words(40)
    for i in rng.choice(n, 50, replace=False):
        multi[i] = "v1\x1dv2\x1dv3"
    data = tmp_path / "d"
    data.mkdir()
    table = pa.table({"label": rng.integers(0, 2, n).astype(np.int64), "a": words(300), "b": words(50),
                      "m": multi, "v": words(5, nulls=False)})  # fmt: skip
    for i, part in enumerate((slice(0, 400), slice(400, n))):
        pq.write_table(
            table.slice(part.start, part.stop - part.start), data / f"part-{i}.parquet", row_group_size=128
        )
    config = tmp_path / "c.yaml"
    config.write_text(
        "name: dict\ndata: {label: label, batch_size: 100}\nfeatures:\n"
        "  - {kind: id, name: a, hash_bucket_size: 1000, embedding_dim: 4}\n"
        "  - {kind: id, name: b, hash_bucket_size: 1000, embedding_dim: 4, default_value: 'v7'}\n"
        "  - {kind: id, name: m, hash_bucket_size: 1000, embedding_dim: 4}\n"
        "  - {kind: id, name: v, hash_bucket_size: 1000, embedding_dim: 4}\n"
        "  - {kind: id, name: v_vocab, column: v, vocab_list: [v0, v1, v2], embedding_dim: 4}\n"
        "feature_groups:\n  - {name: sparse, type: deep, features: [a, b, m, v, v_vocab]}\n"
        "model: {type: dlrm, dense_mlp: {hidden_units: [4]}, over_mlp: {hidden_units: [4]}, sparse_group: sparse}\n"
    )
    spec = build_feature_spec(load_config(config))
    assert hashed_id_columns(spec) == {"a", "b", "m"}  # v: also a vocabulary's
    shuffle = Shuffle(seed=1, epoch=0, buffer_rows=500)
    encoded = ShuffledView(ParquetSource(str(data)), 1, 0, 500, dictionary={"a", "b", "m"})
    (piece,) = encoded.rows(0, 100, ["a", "v"])
    assert pa.types.is_dictionary(piece.batch.column("a").type) and pa.types.is_string(
        piece.batch.column("v").type
    )
    got = list(StepBatches(str(data), spec, 100, shuffle=shuffle))
    plain_view, fg = ShuffledView(ParquetSource(str(data)), 1, 0, 500), FeatureGenerator(spec)
    for k, sb in enumerate(got):
        (plain,) = plain_view.rows(k * 100, min((k + 1) * 100, n))
        assert not pa.types.is_dictionary(plain.batch.column("a").type)
        want = fg(plain.batch)
        for key, values, lengths in zip(spec.sparse_keys(), want.values, want.lengths, strict=True):
            assert np.array_equal(sb.batch.sparse[key].values().numpy(), values), (k, key)
            assert np.array_equal(sb.batch.sparse[key].lengths().numpy(), lengths), (k, key)
    lengths = torch.cat([sb.batch.sparse["m"].lengths() for sb in got])
    assert lengths.max() == 3 and (lengths == 0).any()  # the separator's rows split, the missing ones empty
    assert (torch.cat([sb.batch.sparse["b"].lengths() for sb in got]) == 1).all()  # the default fills b
