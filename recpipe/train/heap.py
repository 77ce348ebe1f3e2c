"""glibc's heap in a training process: freed memory kept for the next step instead of handed back to the kernel.

A training step allocates and frees the same large tensors every step (activations, gradients, the jagged
attention's ``(T, ·)`` buffers: tens of MB each). glibc serves an allocation above its mmap threshold (at most 32 MB,
raised on the fly from 128 KB) with a fresh ``mmap`` and returns it at ``free``, so the next step faults in and
zeroes every page again; freed memory at the top of the heap beyond the trim threshold is returned too.
Measured (2026-12-06, 2 cores): DIN attention forward+backward at histories of mean 40
(``benchmarks/din_attention.py``'s shape, batch 8192, two threads, medians of two processes) 757 and 853 → 637 and
660 ms; a one-thread DIN epoch of configs/din_taobao_quality.yaml +4–7% rows/s (three alternating pairs, trimming
still on above 1 GiB); DLRM unchanged. The cost: the process keeps up to its peak heap (DIN epoch: maxrss 1.44 →
1.64 GB).

:func:`keep_freed_memory` raises the mmap threshold to 1 GiB and turns trimming off with ``mallopt`` in the running
process (``recpipe serve`` gives its workers 1 GiB and 4 GiB through the environment,
:data:`recpipe.cli.serving_cli.SERVER_MALLOC`), unless the user exported either variable (glibc read them at start;
they stay as given). :func:`recpipe.train.loop.train` calls it.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping

# glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Below 2**31: mallopt takes a C int.
MMAP_THRESHOLD = 1 << 30
# mallopt(3): "Setting M_TRIM_THRESHOLD to -1 disables trimming completely". A limit of 1 GiB still trimmed the
# attention's backward at mean 40 (739 ms against 645 ms untrimmed, 852 ms at glibc's defaults).
NO_TRIM = -1
ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> bool:
    """Raise glibc's mmap threshold to 1 GiB and turn its trimming off in this process; False (nothing changed) when
    the user exported either :data:`ENV` variable, on another C library, or when glibc refuses a value.

    Example::

        keep_freed_memory()   # True on glibc: a freed 100 MB tensor stays in the heap for the next one
    """
    if any(name in environ for name in ENV) or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return (
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NO_TRIM) == 1
    )
