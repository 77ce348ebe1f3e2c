"""Step-ordered input: every rank runs the same number of steps, global batch k holds the same rows for
every world size, padding where a rank's share is empty, resume at a row."""

import math

import numpy as np
import pytest
import torch

from recpipe.train.data import StepBatches, StepPlan, normalize_step_weights


def _row_keys(batch, n):
    """One int per row (user, ad, label): enough to tell the rows of these data sets apart."""
    u = batch.sparse["user_id"].values().numpy()[:n]
    a = batch.sparse["adgroup_id"].values().numpy()[:n]
    return (u * 1_000_003 + a) * 2 + batch.labels.numpy()[:n].astype(np.int64)


@pytest.mark.parametrize(
    ("rows", "batch", "world", "start"),
    [(10, 4, 2, 0), (10, 4, 3, 0), (6401, 64, 2, 0), (6401, 64, 2, 640), (7, 5, 3, 5), (3, 8, 2, 0)],
)
def test_step_plan_covers_every_row_once_in_order(rows, batch, world, start):
    plan = StepPlan(rows, batch, world, start)
    assert plan.num_steps == math.ceil((rows - start) / batch)
    covered = []
    for k in range(plan.num_steps):
        lo, hi = plan.step_range(k)
        parts = [plan.rank_range(k, r) for r in range(world)]
        assert parts[0][0] == lo and parts[-1][1] == hi
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        assert max(b - a for a, b in parts) - min(b - a for a, b in parts) <= 1
        covered += [i for a, b in parts for i in range(a, b)]
    assert covered == list(range(start, rows))
    assert plan.position_after(plan.num_steps) == rows


def test_two_ranks_see_the_one_rank_batches(taobao, taobao_spec):
    # Global batch k on 2 ranks = rank 0's rows then rank 1's rows = batch k on 1 rank.
    one = list(StepBatches(taobao["train"], taobao_spec, 64))
    ranks = [list(StepBatches(taobao["train"], taobao_spec, 64, rank=r, world_size=2)) for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 101
    for k, sb in enumerate(one):
        joined = np.concatenate([_row_keys(rk[k].batch, rk[k].real_rows) for rk in ranks])
        np.testing.assert_array_equal(joined, _row_keys(sb.batch, sb.real_rows))
    # 6401 = 100·64 + 1: the last step has one row; rank 0's share is empty and padded with weight 0.
    last0, last1 = ranks[0][-1], ranks[1][-1]
    assert (last0.real_rows, last0.batch.batch_size) == (0, 1)
    assert float(last0.batch.weights.sum()) == 0.0
    assert (last1.real_rows, last1.batch.batch_size) == (1, 1)
    assert [sb.batch.batch_size for sb in ranks[0][:-1]] == [32] * 100


def test_three_ranks_cover_every_row_once(taobao, taobao_spec):
    one = np.concatenate(
        [_row_keys(sb.batch, sb.real_rows) for sb in StepBatches(taobao["train"], taobao_spec, 50)]
    )
    ranks = [list(StepBatches(taobao["train"], taobao_spec, 50, rank=r, world_size=3)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1  # the same number of steps everywhere
    joined = np.concatenate(
        [_row_keys(rk[k].batch, rk[k].real_rows) for k in range(len(ranks[0])) for rk in ranks]
    )
    np.testing.assert_array_equal(joined, one)
    assert one.size == 6401


def test_start_row_resumes_at_that_row(taobao, taobao_spec):
    full = list(StepBatches(taobao["train"], taobao_spec, 64))
    rest = list(StepBatches(taobao["train"], taobao_spec, 64, start_row=64 * 37))
    assert len(rest) == len(full) - 37
    for a, b in zip(full[37:], rest):
        np.testing.assert_array_equal(_row_keys(a.batch, a.real_rows), _row_keys(b.batch, b.real_rows))


def test_normalized_weights_sum_to_one_per_step(taobao, taobao_spec):
    batches = list(normalize_step_weights(StepBatches(taobao["train"], taobao_spec, 64), 1, None))
    sums = torch.stack([b.weights.double().sum() for b in batches])
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert float(batches[0].weights[0]) == 1 / 64


def test_fg_errors_name_the_file_and_row(tmp_path, taobao_spec):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recpipe.data.synthetic import generate

    generate("taobao", 50, tmp_path / "d", seed=1, chunk_rows=50)
    path = next((tmp_path / "d").glob("*.parquet"))
    table = pq.read_table(path)
    clk = table.column("clk").to_pylist()
    clk[33] = 7
    pq.write_table(table.set_column(table.schema.get_field_index("clk"), "clk", pa.array(clk)), path)
    with pytest.raises(ValueError, match="row 33"):
        list(StepBatches(str(tmp_path / "d"), taobao_spec, 16))
    skipped = StepBatches(str(tmp_path / "d"), taobao_spec, 16, on_bad_row="skip")
    assert sum(sb.real_rows for sb in skipped) == 49
    assert skipped.stats.rows_skipped == 1


def test_fg_runs_once_per_file_of_a_step(taobao, taobao_spec, monkeypatch):
    # Source batches of 1024 rows restart at every file (2000, 2401, 2000 rows), so most steps of 64
    # span two source batches; FG still sees one batch per step and file: two calls only on the steps
    # that cross a file (rows 1984..2047 and 4352..4415).
    from recpipe.features.fg import FeatureGenerator

    sizes: list[int] = []
    call = FeatureGenerator.__call__

    def counting(self, batch, file="<memory>", first_row=0):
        sizes.append(batch.num_rows)
        return call(self, batch, file, first_row)

    monkeypatch.setattr(FeatureGenerator, "__call__", counting)
    steps = list(StepBatches(taobao["train"], taobao_spec, 64))
    assert len(steps) == 101 and len(sizes) == 103
    assert sizes[31:33] == [16, 48] and sizes[69:71] == [49, 15]


def test_a_bad_row_in_a_joined_step_names_its_file_row(tmp_path, taobao_spec):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recpipe.data.synthetic import generate

    generate("taobao", 3000, tmp_path / "d", seed=2, chunk_rows=3000)
    path = next((tmp_path / "d").glob("*.parquet"))
    table = pq.read_table(path)
    clk = table.column("clk").to_pylist()
    clk[1050] = 7  # step 10 of 100 rows: source rows 1000..1023 and 1024..1099, joined
    pq.write_table(table.set_column(table.schema.get_field_index("clk"), "clk", pa.array(clk)), path)
    with pytest.raises(ValueError, match=rf"{path.name}, row 1050, column 'clk'"):
        list(StepBatches(str(tmp_path / "d"), taobao_spec, 100))


def test_missing_columns_fail_at_construction_with_every_column_of_the_data(taobao, taobao_spec, tmp_path):
    # Issue 17: FG saw only the projected columns, so the rank said "the file has ['label']".
    import pyarrow.parquet as pq

    from recpipe.features.schema_check import SchemaMismatch

    table = pq.read_table(taobao["train"]).drop_columns(["price", "pid"])
    pq.write_table(table, tmp_path / "part-00000.parquet")
    with pytest.raises(SchemaMismatch) as err:
        StepBatches(str(tmp_path), taobao_spec, 64)
    assert "missing columns ['pid', 'price']" in str(err.value)
    assert f"the data has {table.num_columns} columns: {table.column_names}" in str(err.value)
