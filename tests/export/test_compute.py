"""``run_scoring``: calls from any request thread run on the process's one scoring thread (one OpenMP team), a
main-thread call where it is, exceptions come back as raised, and a forked child starts its own thread."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from recpipe.export.compute import run_scoring, scores_here


def _where() -> tuple[int, str]:
    # A parallel torch op, as scoring runs: its OpenMP team is the calling thread's.
    torch.ones(1 << 16).mul_(2).sum()
    return threading.get_ident(), threading.current_thread().name


def test_calls_from_many_threads_all_run_on_one_scoring_thread() -> None:
    results: list[tuple[int, str]] = []
    callers: list[int] = []
    lock = threading.Lock()

    def request() -> None:
        got = run_scoring(_where)
        with lock:
            results.append(got)
            callers.append(threading.get_ident())

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 8
    idents = {ident for ident, _ in results}
    assert len(idents) == 1, results
    assert idents.isdisjoint(callers) and threading.get_ident() not in idents
    assert results[0][1].startswith("recpipe-scoring")


def test_a_call_from_the_scoring_thread_runs_in_place() -> None:
    def outer() -> tuple[bool, tuple[int, str]]:
        return scores_here(), run_scoring(_where)

    box: list = []
    t = threading.Thread(target=lambda: box.append((threading.get_ident(), run_scoring(outer))))
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "a nested run_scoring waited on itself"
    caller, (here, (ident, name)) = box[0]
    assert here and ident != caller and name.startswith("recpipe-scoring")


def test_the_main_thread_scores_in_place() -> None:
    assert threading.current_thread() is threading.main_thread()
    assert scores_here()
    assert run_scoring(_where)[0] == threading.get_ident()


def test_an_exception_comes_back_to_the_caller_as_raised() -> None:
    class Refused(ValueError):
        pass

    def refuse() -> None:
        raise Refused("row 3, column 'price': expected a number")

    box: list = []

    def request() -> None:
        try:
            run_scoring(refuse)
        except Exception as err:  # noqa: BLE001 - compared below
            box.append(err)

    t = threading.Thread(target=request)
    t.start()
    t.join(timeout=60)
    assert len(box) == 1 and type(box[0]) is Refused and "row 3, column 'price'" in str(box[0])


def _child(queue: multiprocessing.Queue) -> None:
    box: list = []
    t = threading.Thread(target=lambda: box.append(run_scoring(_where)))
    t.start()
    t.join(timeout=30)
    queue.put(None if t.is_alive() or not box else box[0][1])


def test_a_forked_child_starts_its_own_scoring_thread() -> None:
    # The parent's scoring thread exists (started by the tests above or here) and is not copied by fork.
    threading.Thread(target=lambda: run_scoring(_where)).start()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    try:
        name = queue.get(timeout=60)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert name is not None and name.startswith("recpipe-scoring"), "the child's call never ran"


@pytest.mark.parametrize("callers", [1, 4])
def test_results_are_the_callers_own(callers: int) -> None:
    out: dict[int, int] = {}

    def request(i: int) -> None:
        out[i] = run_scoring(lambda: int(torch.full((1000,), float(i)).sum().item()))

    threads = [threading.Thread(target=request, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert out == {i: 1000 * i for i in range(callers)}
