"""Background data workers (``data.num_workers > 0``): the same step batches bit for bit as in-process FG,
exact resume, bounded prefetch, worker errors with their file/row message, no hang at the end or on error."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from recpipe.features.fg import BadRowError
from recpipe.train.data import StepBatch, StepBatches
from recpipe.train.prefetch import ordered_prefetch

pytestmark = pytest.mark.timeout(120)

KINDS = ["thread", "process"]


def _assert_same(a: StepBatch, b: StepBatch) -> None:
    assert (a.real_rows, a.step, a.step_rows, a.rows_are_weight) == (
        b.real_rows,
        b.step,
        b.step_rows,
        b.rows_are_weight,
    )
    x, y = a.batch, b.batch
    for t, u in [(x.dense, y.dense), (x.labels, y.labels), (x.weights, y.weights)]:
        assert t.dtype == u.dtype and torch.equal(t, u)
    assert x.sparse.keys() == y.sparse.keys()
    assert torch.equal(x.sparse.values(), y.sparse.values())
    assert torch.equal(x.sparse.lengths(), y.sparse.lengths())


def _no_workers_left() -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        threads = [t for t in threading.enumerate() if t.name.startswith("recpipe-data-")]
        if not threads and not multiprocessing.active_children():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("workers", "rank", "world", "start"), [(1, 0, 1, 0), (2, 1, 2, 0), (3, 0, 2, 64 * 37)]
)
def test_workers_give_the_in_process_batches_bit_for_bit(
    taobao, taobao_spec, kind, workers, rank, world, start
):
    def read(n: int) -> StepBatches:
        return StepBatches(
            taobao["train"], taobao_spec, 64, rank, world, start, num_workers=n, worker_kind=kind
        )

    inline, background = read(0), read(workers)
    expected, got = list(inline), list(background)
    assert len(got) == len(expected) == inline.plan.num_steps == 101 - start // 64
    for a, b in zip(expected, got):
        _assert_same(a, b)
    assert background.stats == inline.stats
    assert background.stats.rows_read == sum(sb.real_rows for sb in got)
    assert _no_workers_left()


@pytest.mark.parametrize("kind", KINDS)
def test_resume_with_workers_starts_at_the_checkpoint_row(taobao, taobao_spec, kind):
    full = list(StepBatches(taobao["train"], taobao_spec, 64))
    rest = list(
        StepBatches(taobao["train"], taobao_spec, 64, start_row=64 * 60, num_workers=2, worker_kind=kind)
    )
    assert [sb.step for sb in rest] == list(range(len(full) - 60))
    for a, b in zip(full[60:], rest):
        _assert_same(a._replace(step=b.step), b)


@pytest.fixture(scope="module")
def bad_data(tmp_path_factory):
    """200 rows in 4 files of 50; the label of row 33 of the third file is 7."""
    from recpipe.data.synthetic import generate

    root = tmp_path_factory.mktemp("bad")
    generate("taobao", 200, root, seed=1, chunk_rows=50)
    path = sorted(root.glob("*.parquet"))[2]
    table = pq.read_table(path)
    clk = table.column("clk").to_pylist()
    clk[33] = 7
    pq.write_table(table.set_column(table.schema.get_field_index("clk"), "clk", pa.array(clk)), path)
    return str(root), path.name


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", [1, 3])
def test_a_worker_error_names_file_and_row_at_the_in_process_step(bad_data, taobao_spec, kind, workers):
    uri, name = bad_data
    inline = StepBatches(uri, taobao_spec, 16)
    before = []
    with pytest.raises(BadRowError) as want:
        before.extend(inline)
    background = StepBatches(uri, taobao_spec, 16, num_workers=workers, worker_kind=kind)
    got = []
    with pytest.raises(BadRowError, match=rf"{name}, row 33, column 'clk'") as err:
        got.extend(background)
    assert str(err.value) == str(want.value)
    assert (err.value.file, err.value.row, err.value.column) == (want.value.file, 33, "clk")
    assert len(got) == len(before) == (100 + 33) // 16  # the steps before the bad row's step
    assert any("recpipe data worker" in note for note in err.value.__notes__)
    assert _no_workers_left()


@pytest.mark.parametrize("kind", KINDS)
def test_skipped_rows_are_counted_with_workers(bad_data, taobao_spec, kind):
    uri, _ = bad_data
    reader = StepBatches(uri, taobao_spec, 16, on_bad_row="skip", num_workers=2, worker_kind=kind)
    assert sum(sb.real_rows for sb in reader) == 199
    assert (reader.stats.rows_read, reader.stats.rows_skipped) == (200, 1)


@pytest.mark.parametrize("kind", KINDS)
def test_stopping_early_stops_the_workers(taobao, taobao_spec, kind):
    reader = StepBatches(taobao["train"], taobao_spec, 64, num_workers=2, worker_kind=kind)
    it = iter(reader)
    first = list(itertools.islice(it, 3))
    assert [sb.step for sb in first] == [0, 1, 2]
    it.close()
    assert _no_workers_left()


def _counting(produced: list[int], n_items: int):
    def produce(w: int, n: int):
        for i in range(w, n_items, n):
            produced.append(i)
            yield i

    return produce


def test_prefetch_is_bounded_and_ordered():
    produced: list[int] = []
    it = ordered_prefetch(_counting(produced, 1000), num_workers=3, depth=2, kind="thread")
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    time.sleep(0.5)
    # Each worker holds at most `depth` items in its queue plus one it is trying to put.
    assert len(produced) <= 5 + 3 * (2 + 1)
    assert list(it) == list(range(5, 1000))
    assert _no_workers_left()


@pytest.mark.parametrize("kind", KINDS)
def test_uneven_workers_end_where_one_producer_ends(kind):
    for n_items in (0, 1, 5, 6, 7):
        assert list(ordered_prefetch(lambda w, n, k=n_items: range(w, k, n), 3, kind=kind)) == list(
            range(n_items)
        )


def _dies(w: int, n: int):
    yield w
    if w == 1:
        os._exit(3)
    yield w + n


def test_a_worker_process_that_dies_fails_the_stream_without_hanging():
    it = ordered_prefetch(_dies, num_workers=2, kind="process")
    assert next(it) == 0
    with pytest.raises(RuntimeError, match=r"data worker process 1 .* exited with code 3"):
        list(it)
    assert _no_workers_left()


def test_arrays_in_items_survive_the_process_boundary():
    items = list(
        ordered_prefetch(lambda w, n: (torch.full((3,), i) for i in range(w, 6, n)), 2, kind="process")
    )
    np.testing.assert_array_equal(torch.stack(items).numpy(), np.repeat(np.arange(6), 3).reshape(6, 3))


def test_trainer_with_workers_trains_the_same_steps_bit_for_bit(taobao, tmp_path, monkeypatch):
    import recpipe.train.data as data
    from recpipe.config import load_config
    from recpipe.features.build import build_feature_spec
    from recpipe.train.loop import train

    def run(workers: int) -> tuple[list[float], dict]:
        cfg = load_config(
            taobao["config"],
            {
                "data.batch_size": 64,
                "data.num_workers": workers,
                "train.max_steps": 30,  # ends inside the first pass: the workers must stop
                "train.log_every_steps": 5,
                "train.checkpoint_every_steps": 1000,
            },
        )
        out = tmp_path / f"w{workers}"
        result = train(cfg, build_feature_spec(cfg), taobao["train"], None, out, resume=False)
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in records], result.to_dict()

    pools: list[tuple[int, str]] = []

    def spy(produce, num_workers, depth, kind):
        pools.append((num_workers, kind))
        return ordered_prefetch(produce, num_workers, depth, kind)

    monkeypatch.setattr(data, "ordered_prefetch", spy)
    losses0, result0 = run(0)
    assert pools == []
    losses2, result2 = run(2)
    assert pools == [(2, "thread")]
    assert len(losses0) == 6 and losses2 == losses0
    assert (
        (result2["steps"], result2["rows_trained"])
        == (result0["steps"], result0["rows_trained"])
        == (30, 30 * 64)
    )
    assert _no_workers_left()


@pytest.mark.slow
def test_two_ranks_with_worker_processes_train_the_same_steps_bit_for_bit(taobao, tmp_path):
    from recpipe.launch.local import launch_local

    def run(workers: int) -> list[dict]:
        out = tmp_path / f"w{workers}"
        overrides = {
            "data.batch_size": 64,
            "data.num_workers": workers,
            "train.epochs": 2,
            "train.max_steps": 120,  # into the second pass: a new reader, new workers
            "train.log_every_steps": 10,
            "train.checkpoint_every_steps": 1000,
        }
        lines: list[str] = []
        code = launch_local(
            taobao["config"], taobao["train"], None, out, 2, overrides, resume=False, echo=lines.append
        )
        assert code == 0, "".join(lines[-60:])
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    inline, background = run(0), run(2)
    assert len(inline) == 12
    assert [(r["step"], r["epoch"], r["loss"]) for r in background] == [
        (r["step"], r["epoch"], r["loss"]) for r in inline
    ]
