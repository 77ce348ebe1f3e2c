"""FG + to_batch throughput (batch 8192): the Taobao config, vectorized vs per-row reference, and the rich
config (configs/rich_taobao_small.yaml: every feature kind) with the time each kind's entries take.

All run in this process on generated rows (``synthetic:taobao``, ``synthetic:config``), pinned to one thread
(pyarrow, torch, BLAS, the tokenizers library), timed by CPU time of this process (``time.process_time``), so other load on the
machine distorts it less (not at all it does not: two busy cores share caches and memory bandwidth; the load
average is recorded). The rich config's total is timed as the Taobao one, the real FeatureGenerator and
to_batch; its per-kind breakdown comes from a separate pass in which every entry's kind functions are wrapped
by a timer (the same code, called as FG calls it), the median of the repeats per kind; what no entry takes
(the raw-value contract's normalize, labels, to_batch) is ``fg_other``.
Last line: ``fg_throughput: rows_per_s=<N> speedup_vs_rowwise=<X> rich_rows_per_s=<M>``; JSON in
benchmarks/results/. ``--quick``: 4,096 rows in batches of 1,024, one batch for the per-row reference, 2 repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault(
    "TOKENIZERS_PARALLELISM", "false"
)  # kind tokenize: the library's batch call on one thread

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from _common import host_cpu, parse_args, quick_out, warn_if_loaded  # noqa: E402

from recpipe.batch import to_batch  # noqa: E402
from recpipe.config import load_config  # noqa: E402
from recpipe.data.synthetic import generate  # noqa: E402
from recpipe.features.build import build_feature_spec  # noqa: E402
from recpipe.features.fg import FeatureGenerator  # noqa: E402
from recpipe.features.kinds import tokenize as tokenize_kind  # noqa: E402
from recpipe.features.spec import FeatureSpec  # noqa: E402

# The per-row reference is a test oracle (tests/features/rowwise.py), not library code: its folder goes on
# the import path here, as pytest puts it there for the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "features"))
from rowwise import rowwise_fg  # noqa: E402

RESULTS = Path(__file__).parent / "results"
RICH_CONFIG = "configs/rich_taobao_small.yaml"


def record_batches(table: pa.Table, batch_size: int) -> list[pa.RecordBatch]:
    return [
        table.slice(i, batch_size).combine_chunks().to_batches()[0]
        for i in range(0, table.num_rows, batch_size)
    ]


def timed_fg(spec: FeatureSpec, seconds: dict[str, float]) -> FeatureGenerator:
    """A FeatureGenerator whose every entry's kind functions add their CPU seconds to ``seconds[kind]``: the
    same functions FG calls, each call wrapped (the wrapper costs two clock reads a call)."""
    fg = FeatureGenerator(spec)

    def timer(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args)
            finally:
                seconds[kind] = seconds.get(kind, 0.0) + time.process_time() - t0

        return timed

    # FG resolves each entry's kind once (FeatureGenerator._kind); the timed copies replace them there.
    for name, kind in list(fg._kind.items()):
        parts = {
            p: timer(kind.name, getattr(kind, p)) for p in ("sparse", "dense", "sequence") if getattr(kind, p)
        }
        fg._kind[name] = dataclasses.replace(kind, **parts)
    return fg


def rich_setup(rows: int, batch_size: int) -> tuple[FeatureSpec, list[pa.RecordBatch], dict[str, int]]:
    """The rich config's spec, generated rows in batches and its entries per kind."""
    config = load_config(RICH_CONFIG)
    spec = build_feature_spec(config)
    with tempfile.TemporaryDirectory() as tmp:
        generate("config", rows=rows, out=tmp, seed=0, config=config)
        table = pq.read_table(tmp, columns=spec.input_columns())
    entries: dict[str, int] = {}
    for e in spec.fg_entries():
        entries[e.kind] = entries.get(e.kind, 0) + 1
    return spec, record_batches(table, batch_size), entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=262_144, help="rows for the vectorized path")
    ap.add_argument("--rowwise-rows", type=int, default=16_384, help="rows for the per-row reference")
    ap.add_argument("--rich-rows", type=int, default=131_072, help=f"rows of {RICH_CONFIG}")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS / "fg_throughput.json", help="the JSON results file")
    quick = {"rows": 4096, "rowwise_rows": 1024, "rich_rows": 4096, "batch_size": 1024, "repeats": 2}
    args = parse_args(ap, {**quick, "out": quick_out("fg_throughput.json")})
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    torch.set_num_threads(1)
    spec = build_feature_spec(load_config("configs/din_taobao.yaml"))
    keys = spec.sparse_keys()
    with tempfile.TemporaryDirectory() as tmp:
        generate("taobao", rows=args.rows, out=tmp, seed=0)
        table = pq.read_table(tmp, columns=spec.input_columns())
    batches = record_batches(table, args.batch_size)
    hist = table.column("click_50_seq").to_pylist()
    mean_hist = sum(0 if not h else h.count("|") + 1 for h in hist) / len(hist)

    def vectorized() -> float:
        fg = FeatureGenerator(spec)
        t0 = time.process_time()
        for b in batches:
            to_batch(fg(b), keys)
        return time.process_time() - t0

    rw_batches = batches[: max(1, args.rowwise_rows // args.batch_size)]
    rw_rows = sum(b.num_rows for b in rw_batches)

    def rowwise() -> float:
        t0 = time.process_time()
        for b in rw_batches:
            out, _ = rowwise_fg(spec, b)
            to_batch(out, keys)
        return time.process_time() - t0

    rich_spec, rich_batches, rich_entries = rich_setup(args.rich_rows, args.batch_size)
    rich_keys = rich_spec.sparse_keys()
    rich_n = sum(b.num_rows for b in rich_batches)

    def rich() -> float:
        # Each pass a cold start: kind tokenize's word memo emptied, so a pass is a fresh process's stream.
        tokenize_kind.clear_memos()
        fg = FeatureGenerator(rich_spec)
        t0 = time.process_time()
        for b in rich_batches:
            to_batch(fg(b), rich_keys)
        return time.process_time() - t0

    def rich_kinds() -> dict[str, float]:
        seconds: dict[str, float] = {}
        tokenize_kind.clear_memos()
        fg = timed_fg(rich_spec, seconds)
        t0 = time.process_time()
        for b in rich_batches:
            to_batch(fg(b), rich_keys)
        seconds["fg_other"] = time.process_time() - t0 - sum(seconds.values())
        return seconds

    load_before = os.getloadavg()
    vec_times, rw_times, rich_times, kind_times = [], [], [], []
    for _ in range(args.repeats):  # interleaved so all see the same machine state
        vec_times.append(vectorized())
        rw_times.append(rowwise())
        rich_times.append(rich())
        kind_times.append(rich_kinds())
    load_after = os.getloadavg()
    vec_rps = table.num_rows / min(vec_times)
    rw_rps = rw_rows / min(rw_times)
    rich_rps = rich_n / min(rich_times)
    kinds = {}
    for kind in sorted(kind_times[0], key=lambda k: -statistics.median(t[k] for t in kind_times)):
        sec = statistics.median(t[kind] for t in kind_times)
        kinds[kind] = {
            "entries": rich_entries.get(kind, 0),
            "seconds": round(sec, 4),
            "rows_per_s": round(rich_n / sec) if sec > 0 else None,
            "share": round(sec / statistics.median(sum(t.values()) for t in kind_times), 3),
        }
    result = {
        "rows": table.num_rows,
        "rowwise_rows": rw_rows,
        "batch_size": args.batch_size,
        "mean_history_length": round(mean_hist, 3),
        "vectorized_rows_per_s": round(vec_rps),
        "rowwise_rows_per_s": round(rw_rps),
        "speedup_vs_rowwise": round(vec_rps / rw_rps, 2),
        "taobao_rows_per_s_median": round(table.num_rows / statistics.median(vec_times)),
        "rich": {
            "config": RICH_CONFIG,
            "rows": rich_n,
            "rows_per_s": round(rich_rps),
            "rows_per_s_median": round(rich_n / statistics.median(rich_times)),
            "vs_taobao": round(rich_rps / vec_rps, 3),
            # Seconds of each kind's entries over all rows (median of the repeats); rows_per_s: rows / seconds.
            "kinds": kinds,
        },
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        "threads": 1,
        "clock": "process_time",
        "machine": platform.processor() or platform.machine(),
        "cpu": host_cpu(),
        "torch": torch.__version__,
        "pyarrow": pa.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    print(
        f"\n{RICH_CONFIG}: {rich_n} rows, {round(rich_rps)} rows/s; per kind (median CPU s of its entries):"
    )
    print(f"  {'kind':<12} {'entries':>7} {'seconds':>8} {'rows/s':>12} {'share':>6}")
    for kind, k in kinds.items():
        rps = "-" if k["rows_per_s"] is None else f"{k['rows_per_s']:,}"
        print(f"  {kind:<12} {k['entries']:>7} {k['seconds']:>8.4f} {rps:>12} {k['share']:>6.1%}")
    warn_if_loaded(load_before, load_after)
    print(
        f"fg_throughput: rows_per_s={result['vectorized_rows_per_s']} speedup_vs_rowwise={result['speedup_vs_rowwise']}"
        f" rich_rows_per_s={result['rich']['rows_per_s']}"
    )


if __name__ == "__main__":
    main()
