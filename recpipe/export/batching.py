"""Adaptive batching of concurrent scoring calls: the requests that arrive while one batch is being scored are
scored together next, in one FG + model call.

A one-row request costs about as much as a 64-row one (FG and the model's per-call overhead, ~2.7 ms against
~3.3 ms on the small DIN; benchmarks/RESULTS.md, "Serving under load"), and MLflow's scoring server runs each
request's ``predict`` in a thread of its own (``asyncio.to_thread``). So under load a worker gains throughput by
merging the calls that wait, and loses nothing alone: a call that finds no batch in progress is scored at
once (no timer, no added latency). Each call still reads and checks its own rows first (a request without
any model column is refused on its own, :meth:`~recpipe.export.scorer.Scorer.check_columns`); the scoring
thread (:mod:`recpipe.export.compute`: one per process, whatever thread a request came on) then reads the batch's
rows by the raw-value contract once per column layout
(:meth:`~recpipe.export.scorer.Scorer.prepare_raw`: per request it was the server's largest cost under load,
more than the batch's FG and model) and scores them in one call. A batch that fails is read and scored again
request by request, so a bad value fails only its own request, with its own row number.

Example::

    batcher = MicroBatcher(load_backend("export/rtp"))
    batcher.logits(rows)   # from many threads at once: each gets its own rows' logits
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from recpipe.export.compute import run_scoring, scores_here, scoring_executor
from recpipe.export.scorer import Scorer
from recpipe.features.raw import to_arrow

# The most rows merged into one call: past a few hundred rows a batch costs about its rows (no overhead left
# to share), and a bounded batch bounds the latency it adds to the calls behind it.
MAX_BATCH_ROWS = 512
# A batch of fewer rows is scored at one torch thread. A second thread gained nothing there (the small DIN, 1 to 256
# rows: 1.70-2.57 ms a batch at one thread, 1.73-2.68 at two), and its OpenMP worker spins between the batch's
# parallel ops, taking a core from the request threads: 8 clients of one-row requests at 1 worker x 2 threads,
# p99 29-32 ms, 18-22 ms with this (2026-12-07, benchmarks/RESULTS.md).
SMALL_BATCH_ROWS = 256
# The error of a call whose batch was interrupted (KeyboardInterrupt), or queued behind it.
_INTERRUPTED = "scoring this request's batch was interrupted"


class _Call:
    """One waiting call: its rows (read into Arrow, not yet prepared), then its logits or its error."""

    __slots__ = ("done", "error", "logits", "table")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.done = threading.Event()
        self.logits: np.ndarray | None = None
        self.error: BaseException | None = None


class MicroBatcher:
    """Scores concurrent calls on ``scorer`` in shared batches; thread-safe.

    The process's one scoring thread (:mod:`recpipe.export.compute`) scores batch after batch while calls wait:
    each batch every call queued when it starts, up to ``max_rows`` rows, grouped by schema (a column sent as text
    in one request and as numbers in another is not merged). A call from the main thread that finds no batch in
    progress scores the queue in its own thread instead (a batch job, a test).

    Args:
        scorer (Scorer): a loaded backend.
        max_rows (int): the most rows merged into one call (a larger request is scored alone).
    """

    def __init__(self, scorer: Scorer, max_rows: int = MAX_BATCH_ROWS) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be positive, got {max_rows}")
        self.scorer = scorer
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._busy = False  # a drain is running; invariant: not busy => the queue is empty
        self.batches = 0  # batches scored (each one FG + model call per schema), for tests and benchmarks

    def logits(self, rows: Any, context: Any = None) -> np.ndarray:
        """Logits ``(B,)`` of raw ``rows``, the same as ``scorer.predict_raw(rows, context)``. A call with a
        ``context`` (one user × the candidate ``rows``) is scored on its own, on the scoring thread.

        Raises:
            DataError: as :meth:`~recpipe.export.scorer.Scorer.predict_raw`, for these rows only.
        """
        if context is not None:
            return run_scoring(self.scorer.predict_raw, rows, context)
        table = to_arrow(rows)
        if table.num_rows:
            self.scorer.check_columns(table.column_names)
        call = _Call(table)
        with self._lock:
            self._queue.append(call)
            start, self._busy = not self._busy, True
        if start:
            if scores_here():
                self._drain()
            else:
                scoring_executor().submit(self._drain)
        call.done.wait()
        if call.error is not None:
            raise call.error
        assert call.logits is not None
        return call.logits

    def _drain(self) -> None:
        """Scores the queue a batch at a time until it is empty (then not busy); each call's ``done`` set."""
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._busy = False
                        return
                    batch = [self._queue.pop(0)]
                    rows = batch[0].table.num_rows
                    while self._queue and rows + self._queue[0].table.num_rows <= self.max_rows:
                        rows += self._queue[0].table.num_rows
                        batch.append(self._queue.pop(0))
                try:
                    if rows < SMALL_BATCH_ROWS:
                        with _one_torch_thread():
                            self._score(batch)
                    else:
                        self._score(batch)
                finally:
                    for call in batch:
                        if call.logits is None and call.error is None:  # _score was interrupted
                            call.error = RuntimeError(_INTERRUPTED)
                        call.done.set()
        except BaseException:  # KeyboardInterrupt in a main-thread drain: no call waits for ever
            with self._lock:
                waiting, self._queue, self._busy = self._queue, [], False
            for call in waiting:
                call.error = RuntimeError(_INTERRUPTED)
                call.done.set()
            raise

    def _score(self, batch: list[_Call]) -> None:
        """Sets each call's logits or error; raises nothing. The rows are read by the contract once per raw
        column layout, then FG'd and scored once per prepared schema."""
        prepared = [
            done
            for members in _by_schema((call, call.table) for call in batch)
            for done in _merged(members, self.scorer.prepare_raw)
        ]
        for members in _by_schema(prepared):
            self.batches += 1
            for call, logits in _merged(members, self.scorer.score_prepared):
                call.logits = logits


def _by_schema(pairs: Iterable[tuple[_Call, pa.Table]]) -> list[list[tuple[_Call, pa.Table]]]:
    """``(call, rows)`` pairs grouped by the rows' schema (rows of one schema can be concatenated)."""
    groups: dict[pa.Schema, list[tuple[_Call, pa.Table]]] = {}
    for call, table in pairs:
        groups.setdefault(table.schema, []).append((call, table))
    return list(groups.values())


def _merged(
    members: list[tuple[_Call, pa.Table]], step: Callable[[pa.Table], Any]
) -> list[tuple[_Call, Any]]:
    """``step`` (prepare or score, row by row independent) over the members' rows concatenated, its result cut
    back into each call's rows; when that fails, ``step`` over each call's own rows, a failure becoming that
    call's error (so it names the call's own row). Returns the calls that got a result, with it."""
    if len(members) > 1:
        try:
            result = step(pa.concat_tables([table for _, table in members]))
        except Exception:  # noqa: BLE001 - some call's rows are bad: each is stepped alone below
            pass
        else:
            ends = np.cumsum([0] + [table.num_rows for _, table in members]).tolist()
            return [(call, result[a:b]) for (call, _), a, b in zip(members, ends[:-1], ends[1:], strict=True)]
    out = []
    for call, table in members:
        try:
            out.append((call, step(table)))
        except Exception as err:  # noqa: BLE001 - the call's own error, raised in its own thread
            call.error = err
    return out


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads set to one for a while (then back)."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
