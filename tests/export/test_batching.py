"""``MicroBatcher``: calls that arrive while a batch is scored are merged into the next one, each call gets its own
rows' logits (those of ``predict_raw``), a bad value fails only its own call (with its own row number), and a
request without any model column is refused before it joins a batch. Merging is made certain by holding the
first batch until the other calls are queued (a gate around the real scorer; nothing else is stubbed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from recpipe.data.types import DataError
from recpipe.export.batching import MicroBatcher
from recpipe.export.loaders import load_backend


def _wait_until(done, poll: float, seconds: float = 60) -> None:
    """Polls ``done()`` every ``poll`` seconds until it holds or ``seconds`` pass: a test that goes wrong fails on its
    assertions, it does not hang."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(poll)


class Gated:
    """The real scorer, with its first ``score_prepared`` held until ``waiting`` calls are queued behind it;
    records the rows of every call."""

    def __init__(self, scorer, waiting: int) -> None:
        self.scorer, self.waiting = scorer, waiting
        self.batcher: MicroBatcher | None = None
        self.rows: list[int] = []
        self.threads: list[str] = []  # the thread that scored each batch

    def check_columns(self, columns):
        return self.scorer.check_columns(columns)

    def prepare_raw(self, rows):
        return self.scorer.prepare_raw(rows)

    def score_prepared(self, table):
        if not self.rows:
            _wait_until(lambda: len(self.batcher._queue) >= self.waiting, poll=0.01)
        self.rows.append(table.num_rows)
        self.threads.append(threading.current_thread().name)
        return self.scorer.score_prepared(table)


def _requests(trained) -> list:
    """Requests of 1 and 4 rows as pandas frames (what MLflow's server hands predict), some with nulls."""
    rows = trained.held_out.drop_columns(
        [c for c in trained.held_out.column_names if c in trained.spec.labels]
    )
    out = []
    for i in range(12):
        frame = rows.slice(5 * i, 1 + 3 * (i % 2)).to_pandas()
        if i % 3 == 2:
            frame["brand"] = None
            frame["click_50_seq"] = None
        out.append(frame)
    return out


def _concurrently(batcher: MicroBatcher, requests: list) -> list:
    """Each request from its own thread; the first starts (and leads) before the others: answers or errors."""
    answers: list = [None] * len(requests)

    def one(i: int) -> None:
        try:
            answers[i] = batcher.logits(requests[i])
        except Exception as err:  # noqa: BLE001 - compared below
            answers[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    threads[0].start()
    # The first call's batch taken off the queue (busy, the queue empty again), not only queued: the scoring
    # thread forms the batch, and the others queued before it would all join the first batch.
    _wait_until(lambda: batcher._busy and not batcher._queue, poll=0.001)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return answers


def test_concurrent_calls_are_merged_and_each_gets_its_own_rows_logits(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    requests = _requests(trained)
    want = [scorer.predict_raw(r) for r in requests]
    gated = Gated(scorer, waiting=len(requests) - 1)
    gated.batcher = batcher = MicroBatcher(gated)
    got = _concurrently(batcher, requests)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    # The first call alone, then all the others in one batch (nulls and values share one schema).
    assert gated.rows == [1, sum(len(r) for r in requests[1:])]
    # Both batches on the process's one scoring thread, not on the request threads (one OpenMP team).
    assert [t.startswith("recpipe-scoring") for t in gated.threads] == [True, True]
    assert not batcher._busy and not batcher._queue
    np.testing.assert_allclose(batcher.logits(requests[3]), want[3], atol=1e-6)  # alone again: at once


def test_a_bad_value_fails_only_its_own_call_with_its_own_row(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    requests = _requests(trained)
    want = [scorer.predict_raw(r) for r in requests]
    requests[5] = requests[5].astype({"cms_segid": object})
    requests[5].loc[requests[5].index[2], "cms_segid"] = "not-an-id"
    gated = Gated(scorer, waiting=len(requests) - 1)
    gated.batcher = MicroBatcher(gated)
    got = _concurrently(gated.batcher, requests)
    assert isinstance(got[5], DataError)
    assert "row 2, column 'cms_segid'" in str(got[5]) and "not-an-id" in str(got[5])
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if i != 5:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


def test_a_request_without_model_columns_is_refused_on_its_own(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    batcher = MicroBatcher(scorer)
    frame = _requests(trained)[1]
    with pytest.raises(DataError, match="none of its columns is an input column") as err:
        batcher.logits(frame.rename(columns=str.upper))
    assert "'USER_ID'" in str(err.value)
    assert not batcher._busy and not batcher._queue and batcher.batches == 0
    np.testing.assert_allclose(batcher.logits(frame), scorer.predict_raw(frame), atol=1e-6)


def test_requests_of_other_column_types_are_scored_apart_and_right(din_export):
    """An id column sent as text in one request and as numbers in another: two schemas, two calls."""
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    requests = _requests(trained)[:6]
    requests[4] = requests[4].astype({"user_id": str})
    want = [scorer.predict_raw(r) for r in requests]
    gated = Gated(scorer, waiting=len(requests) - 1)
    gated.batcher = MicroBatcher(gated)
    got = _concurrently(gated.batcher, requests)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    assert sorted(gated.rows[1:]) == sorted(
        [len(requests[4]), sum(len(r) for r in requests[1:]) - len(requests[4])]
    )


def test_max_rows_must_be_positive(din_export):
    _, result = din_export
    with pytest.raises(ValueError, match="max_rows must be positive"):
        MicroBatcher(load_backend(Path(result.out_dir) / "rtp"), max_rows=0)


class Interrupted:
    """The real scorer whose next ``score_prepared`` is interrupted (Ctrl-C while a batch job scores)."""

    def __init__(self, scorer) -> None:
        self.scorer, self.interrupt = scorer, True

    def check_columns(self, columns):
        return self.scorer.check_columns(columns)

    def prepare_raw(self, rows):
        return self.scorer.prepare_raw(rows)

    def score_prepared(self, table):
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return self.scorer.score_prepared(table)


def test_an_interrupted_call_in_the_main_thread_leaves_the_batcher_usable(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    batcher = MicroBatcher(Interrupted(scorer))
    frame = _requests(trained)[1]
    with pytest.raises(KeyboardInterrupt):
        batcher.logits(frame)  # the main thread scores its own call: the interrupt reaches it
    assert not batcher._busy and not batcher._queue
    np.testing.assert_allclose(batcher.logits(frame), scorer.predict_raw(frame), atol=1e-6)


class Threads:
    """The real scorer, recording torch's thread count at each ``score_prepared``."""

    def __init__(self, scorer) -> None:
        self.scorer, self.threads = scorer, []

    def check_columns(self, columns):
        return self.scorer.check_columns(columns)

    def prepare_raw(self, rows):
        return self.scorer.prepare_raw(rows)

    def score_prepared(self, table):
        import torch

        self.threads.append(torch.get_num_threads())
        return self.scorer.score_prepared(table)


def test_a_small_batch_scores_at_one_torch_thread_and_a_large_one_at_all(din_export):
    import torch

    from recpipe.export.batching import SMALL_BATCH_ROWS

    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    rows = trained.held_out.drop_columns(
        [c for c in trained.held_out.column_names if c in trained.spec.labels]
    )
    small, large = rows.slice(0, 1), rows.slice(0, SMALL_BATCH_ROWS)
    assert large.num_rows == SMALL_BATCH_ROWS
    recorder = Threads(scorer)
    batcher = MicroBatcher(recorder)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        np.testing.assert_allclose(batcher.logits(small), scorer.predict_raw(small), atol=1e-6)
        np.testing.assert_allclose(batcher.logits(large), scorer.predict_raw(large), atol=1e-6)
        assert recorder.threads == [1, 2]
        assert torch.get_num_threads() == 2  # set back after the small batch
    finally:
        torch.set_num_threads(before)
