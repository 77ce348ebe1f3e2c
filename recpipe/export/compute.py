"""One thread runs a serving process's scoring: torch's CPU thread pool is OpenMP's, and OpenMP keeps one team
of threads per thread that calls it.

A scoring server answers each request in a thread of a pool (recpipe's server: its ``ThreadPoolExecutor``;
MLflow's: ``asyncio.to_thread``), and under concurrent requests several of them score at once or in turn. Each
pool thread that runs a parallel torch op gets its own OpenMP team (itself and ``OMP_NUM_THREADS - 1`` workers),
and the teams stay. With more OpenMP threads than cores, GNU OpenMP stops letting a team's threads spin between
parallel regions (its throttled spin count), and each of the hundreds of small regions of a request then waits for
its workers to wake up. recpipe's server at 1 worker × 2 threads on 2 cores, the 20k-row small DIN's float32
program (2026-12-07): after a burst of 8 concurrent clients, one user × 500 candidates took 12.7-14.1 ms a request
instead of 6.8-9.1 with one scoring thread, and 4 concurrent clients of them got 85-93 instead of 118-142 requests/s.
Requests one at a time reuse one pool thread and were not slower (a dedicated thread measured no gain there on
2026-12-05).

:func:`run_scoring` runs a call on the process's one scoring thread, so there is one team whatever thread a
request arrives on (:class:`~recpipe.export.batching.MicroBatcher` scores its batches there too). A call from the
main thread (a batch job, a notebook, a test) runs where it is called: there the caller's thread computes anyway,
and moving it would add a second team beside the caller's own torch work.

Example::

    logits = run_scoring(scorer.predict_raw, rows, context)   # from a server's request thread
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_here = threading.local()  # .scoring: set in the scoring thread


def _mark() -> None:
    _here.scoring = True


def _forget() -> None:
    # A forked child has no copy of the parent's threads: it starts its own scoring thread when it needs one.
    global _lock, _executor
    _lock, _executor = threading.Lock(), None


os.register_at_fork(after_in_child=_forget)


def scoring_executor() -> ThreadPoolExecutor:
    """The process's one scoring thread (started on first use)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(1, thread_name_prefix="recpipe-scoring", initializer=_mark)
        return _executor


def scores_here() -> bool:
    """Whether this thread scores its own calls: the main thread, or the scoring thread itself."""
    return threading.current_thread() is threading.main_thread() or getattr(_here, "scoring", False)


def run_scoring(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the process's scoring thread, waited for (its exception raised here); in the caller's
    thread when :func:`scores_here`."""
    if scores_here():
        return fn(*args)
    return scoring_executor().submit(fn, *args).result()
