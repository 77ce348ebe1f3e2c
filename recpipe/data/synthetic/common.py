"""Shared pieces of the synthetic generators: bounded Zipf sampling, label calibration, chunked
Parquet output with ``_meta.json``, and the oracle AUC kept as 5 bytes per row."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

import recpipe.data.types as types
from recpipe.auc import binary_auc

ROW_GROUP_ROWS = 65536
META_FILE = "_meta.json"


@dataclass(frozen=True)
class GenerateReport:
    """What a generator wrote.

    Args:
        kind (str): ``"taobao"``, ``"criteo"``, ``"config"`` or ``"retrieval"``.
        rows (int): rows written.
        files (list[str]): the Parquet files, in order (``part-00000.parquet``, ...).
        positive_rate (float): fraction of positive labels.
        oracle_auc (float): AUC of the true click probability against the sampled labels, the
            ceiling a model can approach.
        seconds (float): wall time.
        meta (str): path of ``_meta.json``.
        tasks (dict): every label's ``positive_rate`` and ``oracle_auc`` by label column (the first is
            the one of ``positive_rate`` / ``oracle_auc``; taobao: ``clk`` and ``buy``).
        oracle_recall (dict[int, float]): retrieval data only (whose rows are all positives, so ``oracle_auc``
            is nan): K → the recall@K of ranking every item by the true affinity.

    Example::

        GenerateReport(kind="taobao", rows=5000, files=[".../part-00000.parquet"], positive_rate=0.051,
                       oracle_auc=0.74, seconds=0.4, meta=".../_meta.json")
    """

    kind: str
    rows: int
    files: list[str]
    positive_rate: float
    oracle_auc: float
    seconds: float
    meta: str = ""
    tasks: dict[str, dict[str, float]] = field(default_factory=dict)
    oracle_recall: dict[int, float] = field(default_factory=dict)


class WeightedSampler:
    """Draws indices ``0..n-1`` with ``P(i) ∝ weights[i]`` (a zero weight is never drawn).

    Args:
        weights (np.ndarray): ``(n,)`` non-negative weights, not all zero.

    Example::

        >>> WeightedSampler(np.array([0.0, 1.0, 3.0])).sample(np.random.default_rng(0), 4).min()
        1
    """

    def __init__(self, weights: np.ndarray) -> None:
        self._cdf = np.cumsum(np.asarray(weights, dtype=np.float64))
        if self._cdf.size == 0 or not self._cdf[-1] > 0:
            raise ValueError("a weighted sampler needs at least one positive weight")
        self._cdf /= self._cdf[-1]

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` int64 indices."""
        idx = np.searchsorted(self._cdf, rng.random(size), side="right")
        return np.minimum(idx, self._cdf.size - 1).astype(np.int64)


class ZipfSampler(WeightedSampler):
    """Draws indices ``0..n-1`` with ``P(i) ∝ 1 / (i + 1) ** exponent`` (index 0 is the hottest).

    Args:
        n (int): number of items.
        exponent (float): Zipf exponent (about 1 for item popularity).

    Example::

        >>> ZipfSampler(1000, 1.1).sample(np.random.default_rng(0), 5).shape
        (5,)
    """

    def __init__(self, n: int, exponent: float) -> None:
        if n < 1:
            raise ValueError(f"ZipfSampler needs n >= 1, got {n}")
        super().__init__(zipf_weights(np.arange(n), exponent))


def zipf_weights(ranks: np.ndarray, exponent: float) -> np.ndarray:
    """``1 / (rank + 1) ** exponent``: the Zipf weight of 0-based ``ranks``."""
    return 1.0 / (np.asarray(ranks) + 1).astype(np.float64) ** exponent


def distinct_ids(rng: np.random.Generator, n: int, num_buckets: int) -> np.ndarray:
    """``n`` distinct random ids in ``[1, num_buckets)`` (so ``id % num_buckets`` is the id itself)."""
    if n > num_buckets - 1:
        raise ValueError(f"cannot draw {n} distinct ids below {num_buckets}")
    return rng.choice(num_buckets - 1, size=n, replace=False).astype(np.int64) + 1


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Elementwise logistic function."""
    return 1.0 / (1.0 + np.exp(-x))


def calibrate_base(logit_rest: np.ndarray, target_rate: float, weights: np.ndarray | None = None) -> float:
    """The intercept ``b`` with ``mean(sigmoid(b + logit_rest)) == target_rate`` (bisection), the mean
    weighted by ``weights`` when given (e.g. a conversion rate among clicks: weights = click probabilities).

    Example::

        >>> round(calibrate_base(np.zeros(10), 0.5), 6)
        0.0
    """
    lo, hi = -30.0, 30.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if np.average(sigmoid(mid + logit_rest), weights=weights) < target_rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def write_chunks(
    kind: str,
    rows: int,
    out: str | Path,
    seed: int,
    chunk_rows: int,
    make_chunk: Callable[[Any, int], tuple[pa.Table, np.ndarray, np.ndarray]],
    params: dict[str, object],
    label_names: tuple[str, ...],
    days: Sequence[str] | None = None,
) -> GenerateReport:
    """Write ``ceil(rows / chunk_rows)`` Parquet files from ``make_chunk(chunk_index, n)`` and ``_meta.json``.

    ``make_chunk`` returns the table, the labels and the true probabilities of ``n`` rows (``(n,)`` for
    one label, ``(n, T)`` for ``T``); only the last two are kept (int8 + float32 per row and label) for
    the oracle AUCs, so memory stays bounded.

    Args:
        kind (str): generator name for the report and ``_meta.json``.
        rows (int): total rows.
        out (str | Path): output folder (created; existing ``part-*.parquet`` files are replaced, and
            ``dt=*/part-*.parquet`` ones).
        seed (int): recorded in ``_meta.json``.
        chunk_rows (int): rows per file.
        make_chunk (Callable): ``(chunk_index, n) -> (table, labels, true_prob)``; with ``days``,
            ``((day_index, chunk_index), n)``.
        params (dict): generator parameters recorded in ``_meta.json``.
        label_names (tuple[str, ...]): the label columns, in the order of the labels' columns.
        days (Sequence[str] | None): ``YYYYMMDD`` dates: the rows are split evenly over them (the first
            ``rows % len(days)`` days get one more) into hive folders ``out/dt=YYYYMMDD/part-*.parquet``,
            and ``_meta.json`` gets each day's rows, positive rate and oracle AUC (``days``).
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Both layouts go, so a folder read recursively never mixes a flat run with a daily one.
    for stale in [*out.glob("part-*.parquet"), *out.glob("dt=*/part-*.parquet")]:
        stale.unlink()
    for folder in out.glob("dt=*"):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    plan = _plan(rows, chunk_rows, days)
    labels = np.empty((rows, len(label_names)), dtype=np.int8)
    probs = np.empty((rows, len(label_names)), dtype=np.float32)
    files: list[str] = []
    schema: pa.Schema | None = None
    # Shown on a terminal only, and only once generation has taken a few seconds.
    bar = tqdm(
        total=rows,
        desc=f"generate {kind}",
        unit="rows",
        unit_scale=True,
        disable=None,
        delay=types.PROGRESS_DELAY_S,
        leave=False,
    )
    for folder, key, offset, n in plan:
        table, chunk_labels, chunk_probs = make_chunk(key, n)
        schema = table.schema
        labels[offset : offset + n] = chunk_labels.reshape(n, -1)
        probs[offset : offset + n] = chunk_probs.reshape(n, -1)
        chunk = key if days is None else key[1]
        path = out / folder / f"part-{chunk:05d}.parquet"
        path.parent.mkdir(exist_ok=True)
        pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)
        files.append(str(path))
        del table
        bar.update(n)
    bar.close()
    tasks = {
        name: {
            "positive_rate": float(labels[:, t].mean()),
            "oracle_auc": binary_auc(labels[:, t], probs[:, t]),
        }
        for t, name in enumerate(label_names)
    }
    positive_rate, oracle_auc = tasks[label_names[0]]["positive_rate"], tasks[label_names[0]]["oracle_auc"]
    seconds = time.perf_counter() - start
    assert schema is not None
    meta = {
        "kind": kind,
        "rows": rows,
        "seed": seed,
        "chunk_rows": chunk_rows,
        "files": [Path(f).relative_to(out).as_posix() for f in files],
        "positive_rate": positive_rate,
        "oracle_auc": oracle_auc,
        "tasks": tasks,
        "columns": [{"name": f.name, "type": str(f.type)} for f in schema],
        "params": params,
    }
    if days is not None:  # the first label's figures per day: what a daily replay compares against
        bounds = {}
        for folder, _, offset, n in plan:
            lo, hi = bounds.get(folder, (offset, offset))
            bounds[folder] = (lo, hi + n)
        meta["days"] = {
            folder.removeprefix("dt="): {
                "rows": hi - lo,
                "positive_rate": float(labels[lo:hi, 0].mean()),
                "oracle_auc": binary_auc(labels[lo:hi, 0], probs[lo:hi, 0]),
            }
            for folder, (lo, hi) in bounds.items()
        }
    meta_path = out / META_FILE
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return GenerateReport(kind, rows, files, positive_rate, oracle_auc, seconds, str(meta_path), tasks)


def _plan(rows: int, chunk_rows: int, days: Sequence[str] | None) -> list[tuple[str, Any, int, int]]:
    """``(folder, make_chunk key, first row, rows)`` of every file, in order."""
    if days is None:
        return [
            ("", c, offset, min(chunk_rows, rows - offset))
            for c, offset in enumerate(range(0, rows, chunk_rows))
        ]
    if not days:
        raise ValueError("days must name at least one day")
    plan, offset = [], 0
    for d, dt in enumerate(days):
        day_rows = rows // len(days) + (d < rows % len(days))
        for c, first in enumerate(range(0, day_rows, chunk_rows)):
            n = min(chunk_rows, day_rows - first)
            plan.append((f"dt={dt}", (d, c), offset, n))
            offset += n
    return plan
