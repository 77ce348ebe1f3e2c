"""Shared by the benchmark scripts (run as ``.venv/bin/python benchmarks/<name>.py``, so this folder is on
``sys.path``): ``--quick`` (:func:`parse_args`, :func:`quick_out`), interleaved timing of forward /
forward+backward callables, the load warning, and the environment block of a results file (with the
host's CPU model and instruction sets).

``--quick`` runs a benchmark's own code path at tiny sizes and few repeats, in seconds, and prints the same
last line (``<name>: key=value …``); its figures mean nothing. It never writes ``benchmarks/results/``: its
JSON goes to :data:`QUICK_RESULTS`, a folder under the system's temp dir (``--out`` still wins).
``tests/benchmarks/test_benchmarks_quick.py`` runs every benchmark that way.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

Times = dict[str, dict[str, list[float]]]  # per implementation, per kind ("fwd", "fwd_bwd"): seconds per call

QUICK_RESULTS = Path(tempfile.gettempdir()) / "recpipe-benchmarks-quick"
QUICK_HELP = (
    "tiny sizes and few repeats (seconds): the same code path and last line, figures meaningless; "
    f"JSON to {QUICK_RESULTS}, never benchmarks/results/"
)


def quick_out(name: str) -> Path:
    """Where a ``--quick`` run writes the results file ``name``: :data:`QUICK_RESULTS`, never
    ``benchmarks/results/`` (a quick run's figures must not replace a recorded run's)."""
    return QUICK_RESULTS / name


def parse_args(
    parser: argparse.ArgumentParser, quick: dict[str, Any], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Add ``--quick`` to ``parser`` and parse the command line.

    With ``--quick``, ``quick`` (option dest → value: tiny sizes, few repeats, an ``out`` from
    :func:`quick_out`) replaces the defaults before parsing, so an option given on the command line still
    wins. Every key must be one of the parser's options: a renamed option cannot silently drop out of the
    quick run. A quick run also uses one thread (torch here, ``OMP_NUM_THREADS`` for the processes it
    starts, unless set): on a loaded 2-core machine two threads per process made tiny runs 2-3× slower,
    each waiting for the other's core.
    """
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args(argv)
    if args.quick:
        unknown = sorted(set(quick) - {a.dest for a in parser._actions})
        if unknown:
            raise ValueError(f"quick settings for options the parser does not have: {unknown}")
        parser.set_defaults(**quick)
        args = parser.parse_args(argv)
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
    return args


def seconds_per_call(fn: Callable[[], None], calls: int = 1) -> float:
    """Seconds per call, averaged over ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(
    fns: dict[str, dict[str, Callable[[], None]]], repeats: int, sample_s: float, max_calls: int
) -> tuple[Times, dict[str, dict[str, int]]]:
    """Time every callable ``repeats`` times, all of them alternating inside every repeat.

    A short call is repeated within one sample (at most ``max_calls`` times) until the sample lasts about
    ``sample_s``, so a burst of machine noise is averaged over as long a stretch for the fast path as for
    the slow one. Returns the per-call seconds of every sample and the calls per sample.
    """
    calls = {
        n: {k: max(1, min(max_calls, round(sample_s / seconds_per_call(fn)))) for k, fn in f.items()}
        for n, f in fns.items()
    }
    times: Times = {n: {k: [] for k in f} for n, f in fns.items()}
    for _ in range(repeats):
        for name, f in fns.items():
            for kind, fn in f.items():
                times[name][kind].append(seconds_per_call(fn, calls[name][kind]))
    return times, calls


def median_and_min(times: Times) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per implementation and kind: the median and the minimum seconds per call."""
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    best = {n: {k: min(v) for k, v in t.items()} for n, t in times.items()}
    return med, best


def warn_if_loaded(load_before: tuple[float, ...], load_after: tuple[float, ...]) -> None:
    """Print a warning when other processes shared the cores during the run."""
    busy = max(load_before[0], load_after[0])
    if busy > (os.cpu_count() or 1) + 1:  # this process itself adds about one per thread
        print(f"warning: load average {busy:.1f} on {os.cpu_count()} CPUs: other processes share the cores")


# The instruction sets a CPU benchmark's figures depend on (GEMM rates: AVX-512, bf16 units, AMX tiles).
CPU_ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def host_cpu(cpuinfo: str | None = None) -> dict[str, Any]:
    """The host's processor for a results file: ``model`` (``/proc/cpuinfo``'s model name; ``platform.processor()``
    where there is none) and which of :data:`CPU_ISA` it has. Two hosts of one architecture can differ by 2x in
    a GEMM rate (benchmarks/RESULTS.md), so every results file names its CPU.

    Args:
        cpuinfo (str | None): the text of ``/proc/cpuinfo`` (read when not given).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():  # the first processor's block is enough: every core is alike
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {
        "model": fields.get("model name") or platform.processor() or platform.machine(),
        "isa": [f for f in CPU_ISA if f in flags],
    }


def environment(started: float, load_before: tuple[float, ...]) -> dict[str, Any]:
    """The ``environment`` block of a results file: torch, CPUs (count, :func:`host_cpu`), machine, load before/after,
    seconds."""
    return {
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "cpu": host_cpu(),
        "machine": platform.machine(),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
    }
