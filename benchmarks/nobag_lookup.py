"""Sequence (unpooled) embedding lookups on CPU: FBGEMM's fused-Adagrad backward vs recpipe's segment-sum one.

A DIN's history tables as configs/din_taobao_quality.yaml shards them on CPU: one TBE, three tables
(adgroup_id 846,812 rows, cate_id 12,961, brand 461,498; D = 16), each read by two features (the history's
sub-feature and the candidate's id), exact Adagrad fused into the backward. Batch 1024; histories of Poisson
lengths with mean 4 (the generated Taobao rows) and 30 (the long-history rating data of issue 28), at most 100;
ids drawn from the first 20,000 rows of each table (a catalogue's worth, so ids repeat as in real batches).

``fbgemm``: FBGEMM's TBE as TorchRec builds it; ``segment``: the same TBE after
:func:`recpipe.train.nobag.use_segment_backward` (gather forward; backward: ``unique`` + ``index_add`` +
the same Adagrad update, on the unique rows). Forward + backward (the update included) per batch, medians
over repeats, the two alternating within every repeat, one thread. Speedup = fbgemm time / segment time.

Run: ``.venv/bin/python benchmarks/nobag_lookup.py`` (about a minute on 2 idle cores; ``--quick``: batch 256,
tables capped at 50,000 rows, 2 repeats of short samples).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import fbgemm_gpu  # noqa: F401  (torch.ops.fbgemm)
import torch
from _common import environment, interleaved, median_and_min, parse_args, quick_out, warn_if_loaded
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice,
    OptimType,
    SplitTableBatchedEmbeddingBagsCodegen,
)

from recpipe.train.nobag import use_segment_backward

RESULTS = Path(__file__).resolve().parent / "results" / "nobag_lookup.json"
TABLES = {"adgroup_id": 846_812, "cate_id": 12_961, "brand": 461_498}
DIM = 16
CATALOGUE = 20_000  # ids drawn from each table's first rows
MAX_LEN = 100


def _tbe(rows: list[int], segment: bool) -> SplitTableBatchedEmbeddingBagsCodegen:
    torch.manual_seed(0)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(r, DIM, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in rows],
        feature_table_map=[t for t in range(len(rows)) for _ in (0, 1)],  # history sub-feature, candidate id
        optimizer=OptimType.EXACT_ADAGRAD,
        learning_rate=0.2,
        eps=1e-8,
        pooling_mode=PoolingMode.NONE,
    )
    if segment and use_segment_backward(tbe) != 1:
        raise RuntimeError("use_segment_backward did not take the TBE")
    return tbe


def _batches(rows: list[int], batch: int, mean: float, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(int(mean))
    out = []
    for _ in range(count):
        history = torch.poisson(torch.full((batch,), float(mean)), generator=g).long().clamp(max=MAX_LEN)
        lengths = torch.cat([torch.cat([history, torch.ones(batch, dtype=torch.long)]) for _ in rows])
        ids = [
            torch.randint(0, min(r, CATALOGUE), (int(n),), generator=g)
            for r in rows
            for n in (history.sum(), batch)
        ]
        out.append((torch.cat(ids), torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])))
    return out


def _step(tbe: SplitTableBatchedEmbeddingBagsCodegen, batches: list) -> Callable[[], None]:
    state = {"i": 0}

    def run() -> None:
        indices, offsets = batches[state["i"] % len(batches)]
        state["i"] += 1
        tbe(indices, offsets).sum().backward()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--table-cap", type=int, default=None, help="cap every table's rows")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sample-s", type=float, default=0.5, help="seconds per timed sample")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = parse_args(
        ap,
        {"batch": 256, "table_cap": 50_000, "repeats": 2, "sample_s": 0.05, "out": quick_out(RESULTS.name)},
    )
    torch.set_num_threads(1)
    started, load_before = time.perf_counter(), os.getloadavg()
    rows = [min(r, a.table_cap or r) for r in TABLES.values()]
    fns, lookups = {}, {}
    for mean in (4, 30):
        batches = _batches(rows, a.batch, mean, 8)
        lookups[f"mean{mean}"] = round(sum(i.numel() for i, _ in batches) / len(batches))
        fns[f"mean{mean}"] = {
            kind: _step(_tbe(rows, kind == "segment"), batches) for kind in ("fbgemm", "segment")
        }
    times, calls = interleaved(fns, a.repeats, a.sample_s, max_calls=200)
    med, best = median_and_min(times)
    summary = {}
    for name in fns:
        summary[f"speedup_{name}"] = round(med[name]["fbgemm"] / med[name]["segment"], 2)
        summary[f"ms_fbgemm_{name}"] = round(med[name]["fbgemm"] * 1e3, 3)
        summary[f"ms_segment_{name}"] = round(med[name]["segment"] * 1e3, 3)
    report = {
        "benchmark": "nobag_lookup",
        "tables": dict(zip(TABLES, rows, strict=True)),
        "dim": DIM,
        "batch": a.batch,
        "lookups_per_batch": lookups,
        "threads": torch.get_num_threads(),
        "median_s": med,
        "min_s": best,
        "calls_per_sample": calls,
        "summary": summary,
        "environment": environment(started, load_before),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    warn_if_loaded(load_before, os.getloadavg())
    for name in fns:
        print(
            f"{name}: {lookups[name]:,} lookups a batch; fbgemm {med[name]['fbgemm'] * 1e3:.2f} ms, "
            f"segment {med[name]['segment'] * 1e3:.2f} ms forward+backward"
        )
    print("nobag_lookup: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
