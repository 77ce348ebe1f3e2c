"""Ending a process without the interpreter's finalization.

Once torch, torchrec, fbgemm and mlflow are loaded, Python's own shutdown (tearing down every module, then
C++ static destructors) takes 1-2 s on 2 cores, after the work is done and its files are written: every
pipeline step, training rank and ``recpipe`` command paid it (about 15 s of a ``make run``'s 9 steps).
What a normal exit does that matters still happens here, in its order: non-daemon threads are joined,
the ``atexit`` handlers run (MLflow's, logging's), every open buffered file is flushed (an unclosed one
would flush as it is finalized), standard streams included; then ``os._exit``.

:func:`exit_now` ends a process whose exit code is known (a ``recpipe`` command's, a training rank's after
``main`` returned); a raised exception never reaches it. :func:`ends_fast` ends a KFP component's process
only if its function returned and nothing raised after it; otherwise the process exits the normal way,
traceback and exit code unchanged.
This module imports nothing but the standard library, so every layer may use it.
"""

from __future__ import annotations

import atexit
import gc
import io
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# What a buffered write may still sit in: these flush as the interpreter finalizes them, os._exit would not.
_BUFFERED = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


def _flush_open_files() -> None:
    """Flush every open buffered file object, reachable or not (standard streams included)."""
    for obj in gc.get_objects():
        if type(obj) in _BUFFERED:  # exact types: isinstance over the ABCs costs more than the exit saves
            try:
                if not obj.closed:
                    obj.flush()
            except (OSError, ValueError):  # a broken pipe, a detached buffer: nothing left to write to
                pass


def exit_now(code: int) -> NoReturn:
    """End this process with ``code`` once its threads, ``atexit`` handlers and streams are done.

    Args:
        code (int): the exit status.

    Example::

        if __name__ == "__main__":
            exit_now(main())
    """
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # every registered handler, in the interpreter's order (CPython's own hook)
    logging.shutdown()
    _flush_open_files()
    os._exit(code)


class _Watch:
    """Whether the main thread ended with an uncaught exception (``sys.excepthook`` saw it)."""

    def __init__(self) -> None:
        self.failed = False
        self._hook = sys.excepthook

    def excepthook(self, *exc: object) -> None:
        self.failed = True
        self._hook(*exc)

    def at_exit(self) -> None:
        # Registered when the function returned, so it runs first; threads were joined before.
        atexit.unregister(self.at_exit)
        if not self.failed:
            exit_now(0)  # runs the other handlers, those registered before this one included


_watch: _Watch | None = None
# Only the process kfp starts for a component ends fast: the same function called in another process (a
# test, a notebook) must leave that process's ending, and its exit code, alone.
EXECUTOR = "kfp.dsl.executor_main"


@contextmanager
def ends_fast() -> Iterator[None]:
    """For a process whose ending this code does not own (a KFP component: kfp's executor writes the
    outputs after the function returns): wrap the function's body. If the body returns and nothing raises
    after it, the process ends without finalization; otherwise normally.

    Example::

        with ends_fast():
            return stage.run(...)
    """
    global _watch
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if _watch is None and main is not None and main.name == EXECUTOR:
        _watch = _Watch()
        sys.excepthook = _watch.excepthook
    yield
    if _watch is not None:
        atexit.register(_watch.at_exit)
