"""Ordered background prefetch: ``n`` workers (threads or forked processes) each produce every ``n``-th
item of one stream, and the consumer takes them round-robin, so the items arrive in the order a single
producer would give them, bit for bit.

Worker ``w`` of ``n`` runs ``produce(w, n)``, which must yield the items ``w, w + n, w + 2n, ...`` and
nothing else; its queue holds at most ``depth`` finished items, so a slow consumer stops the workers
instead of filling memory. A worker's error reaches the consumer at the item where one producer would
have raised it, with its own type and message (a note names the worker). The stream ends at the first
worker that runs out, which is where one producer would run out.

Why not torch's DataLoader: it re-raises a worker's error as ``RuntimeError`` whenever the exception
cannot be built from one string (recpipe's ``BadRowError`` takes five arguments), and it has no
thread workers.

Process workers are forked: ``produce`` is not pickled, and tensors in the items travel through
shared memory (torch's multiprocessing reductions). A worker stays alive until the consumer is done,
because the consumer maps those tensors from the worker when it takes an item; it exits on its own when
the consumer's process dies.
"""

from __future__ import annotations

import os
import queue
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

import torch
import torch.multiprocessing as tmp

T = TypeVar("T")
WorkerKind = Literal["thread", "process"]

_ITEM, _END, _ERROR = "item", "end", "error"
_POLL_S = 0.1
_JOIN_S = 5.0


def ordered_prefetch(
    produce: Callable[[int, int], Iterable[T]], num_workers: int, depth: int = 2, kind: WorkerKind = "thread"
) -> Iterator[T]:
    """Items ``0, 1, 2, ...`` where item ``i`` comes from worker ``i % num_workers``.

    Args:
        produce (Callable[[int, int], Iterable[T]]): ``produce(w, n)`` yields items ``w, w + n, ...``.
        num_workers (int): ``n`` >= 1.
        depth (int): finished items each worker may hold ahead of the consumer.
        kind (str): ``"thread"`` or ``"process"`` (forked).

    Example::

        >>> list(ordered_prefetch(lambda w, n: range(w, 7, n), num_workers=3))
        [0, 1, 2, 3, 4, 5, 6]
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if kind not in ("thread", "process"):
        raise ValueError(f"kind must be 'thread' or 'process', got {kind!r}")
    pool = (
        _Threads(produce, num_workers, depth) if kind == "thread" else _Processes(produce, num_workers, depth)
    )
    try:
        i = 0
        while True:
            tag, payload = pool.get(i % num_workers)
            if tag == _END:
                return
            if tag == _ERROR:
                raise payload
            yield payload
            i += 1
    finally:
        pool.close()


def _put(q: Any, msg: tuple[str, Any], stopped: Callable[[], bool]) -> bool:
    """Put ``msg`` unless the consumer stops first; True when it was put."""
    while not stopped():
        try:
            q.put(msg, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce_into(
    produce: Callable[[int, int], Iterable[Any]],
    w: int,
    n: int,
    q: Any,
    stopped: Callable[[], bool],
    error: Callable[[BaseException], Any],
) -> None:
    try:
        for item in produce(w, n):
            if not _put(q, (_ITEM, item), stopped):
                return
        _put(q, (_END, None), stopped)
    except BaseException as err:  # noqa: BLE001 - every error goes to the consumer
        _put(q, (_ERROR, error(err)), stopped)


class _Threads:
    def __init__(self, produce: Callable[[int, int], Iterable[Any]], n: int, depth: int) -> None:
        self.stop = threading.Event()
        self.queues: list[queue.Queue[tuple[str, Any]]] = [queue.Queue(depth) for _ in range(n)]
        self.threads = [
            threading.Thread(
                target=_produce_into,
                args=(
                    produce,
                    w,
                    n,
                    self.queues[w],
                    self.stop.is_set,
                    lambda e, w=w: _noted(e, f"thread {w}"),
                ),
                name=f"recpipe-data-{w}",
                daemon=True,
            )
            for w in range(n)
        ]
        for t in self.threads:
            t.start()

    def get(self, w: int) -> tuple[str, Any]:
        q = self.queues[w]
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if not self.threads[w].is_alive() and q.empty():
                    raise RuntimeError(f"data worker thread {w} stopped without a result") from None

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=_JOIN_S)


class _Processes:
    def __init__(self, produce: Callable[[int, int], Iterable[Any]], n: int, depth: int) -> None:
        ctx = tmp.get_context("fork")
        self.stop = ctx.Event()
        self.queues = [ctx.Queue(depth) for _ in range(n)]
        self.procs = [
            ctx.Process(
                target=_process_main,
                args=(produce, w, n, self.queues[w], self.stop, os.getpid()),
                name=f"recpipe-data-{w}",
                daemon=True,
            )
            for w in range(n)
        ]
        for p in self.procs:
            p.start()

    def get(self, w: int) -> tuple[str, Any]:
        q, proc = self.queues[w], self.procs[w]
        while True:
            try:
                msg = q.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if proc.exitcode is not None:
                    raise RuntimeError(
                        f"data worker process {w} (pid {proc.pid}) exited with code {proc.exitcode} "
                        "without a result"
                    ) from None
        if msg[0] == _ERROR:
            return _ERROR, _rebuild(*msg[1])
        return msg

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=_JOIN_S)
            if p.is_alive():
                p.terminate()
                p.join()
        for q in self.queues:
            q.close()


def _process_main(
    produce: Callable[[int, int], Iterable[Any]], w: int, n: int, q: Any, stop: Any, parent: int
) -> None:
    torch.set_num_threads(1)

    def stopped() -> bool:
        return stop.is_set() or os.getppid() != parent

    _produce_into(
        produce, w, n, q, stopped, lambda e: _portable(_noted(e, f"process {w} (pid {os.getpid()})"))
    )
    # Stay until the consumer is done: it maps the items' shared-memory tensors from this process.
    while not stopped():
        stop.wait(_POLL_S)
    q.cancel_join_thread()  # what the consumer did not take is not needed


def _noted(err: BaseException, where: str) -> BaseException:
    err.add_note(f"(raised in recpipe data worker {where})")
    return err


def _portable(err: BaseException) -> tuple[type[BaseException], tuple[Any, ...], dict[str, Any], str]:
    """What rebuilds ``err`` in the consumer: its type, args and attributes, and the worker's traceback.

    Pickling the exception itself would call ``type(err)(*err.args)``, which fails for exceptions whose
    constructor takes other arguments than their message (recpipe's ``BadRowError``).
    """
    import pickle

    text = "".join(traceback.format_exception(err))
    parts = (type(err), err.args, dict(err.__dict__))
    try:
        pickle.dumps(parts)
    except Exception:  # noqa: BLE001 - an attribute that does not pickle: keep the message
        parts = (
            RuntimeError,
            (f"{type(err).__name__}: {err}",),
            {"__notes__": getattr(err, "__notes__", [])},
        )
    return (*parts, text)


def _rebuild(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any], text: str
) -> BaseException:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    err.add_note(f"worker traceback:\n{text}")
    return err
