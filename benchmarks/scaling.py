"""Training throughput on 1 rank vs 2 ranks (one thread each, gloo) on the same data.

Each run is a real ``torchrun`` through :func:`recpipe.train.launch.launch` of
``configs/din_taobao_small.yaml`` (MultiTowerDIN, full-size tables of 3.14M rows, Adagrad fused into the
embedding backward, Adam dense) on generated Taobao rows, with the global batch fixed (8192 by
default), so 2 ranks each take half of every step: strong scaling. Throughput is the trainer's own
``rows_per_second`` (global rows over the training loop; process start, planning and the final
checkpoint are outside it). 1-rank and 2-rank runs alternate; the speedup is the ratio of the medians.

Run: ``.venv/bin/python benchmarks/scaling.py`` (about 4 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from recpipe.data.synthetic import generate
from recpipe.train.launch import launch

CONFIG = "configs/din_taobao_small.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"


def run_once(data: Path, out: Path, nproc: int, batch: int, epochs: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    overrides = {
        "data.batch_size": batch,
        "train.epochs": epochs,
        "train.log_every_steps": 10,
        "train.checkpoint_every_steps": 1_000_000,  # only the final one, after the timed loop
    }
    lines: list[str] = []
    t0 = time.perf_counter()
    code = launch(
        CONFIG, str(data), None, out, nproc, overrides, resume=False, threads_per_rank=1, echo=lines.append
    )
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{nproc}-rank run failed:\n{''.join(lines[-60:])}")
    result = json.loads((out / "train_result.json").read_text())
    return {
        "nproc": nproc,
        "rows_per_s": result["rows_per_second"],
        "train_s": result["seconds"],
        "wall_s": wall,
        "steps": result["steps"],
        "load_avg": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=163_840)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="recpipe-scaling-") as tmp:
        data = Path(tmp) / "data"
        generate("taobao", args.rows, data, seed=0)
        runs: list[dict] = []
        for _ in range(args.repeats):
            for nproc in (1, 2):
                r = run_once(data, Path(tmp) / f"out{nproc}", nproc, args.batch_size, args.epochs)
                runs.append(r)
                print(
                    f"{nproc} rank(s): {r['rows_per_s']:9,.0f} rows/s  (loop {r['train_s']:.1f}s, "
                    f"wall {r['wall_s']:.1f}s, load {r['load_avg']:.1f})",
                    flush=True,
                )
    rate = {n: [r["rows_per_s"] for r in runs if r["nproc"] == n] for n in (1, 2)}
    median = {n: statistics.median(v) for n, v in rate.items()}
    best = {n: max(v) for n, v in rate.items()}
    speedup = median[2] / median[1]
    report = {
        "benchmark": "scaling",
        "speedup_2_ranks": speedup,
        "speedup_2_ranks_best": best[2] / best[1],
        "target": 1.6,
        "median_rows_per_s": {str(n): v for n, v in median.items()},
        "best_rows_per_s": {str(n): v for n, v in best.items()},
        "runs": runs,
        "config": {
            "model": CONFIG,
            "rows": args.rows,
            "global_batch_size": args.batch_size,
            "epochs": args.epochs,
            "threads_per_rank": 1,
            "backend": "gloo",
        },
        "environment": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "seconds": round(time.perf_counter() - started, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"median rows/s: 1 rank {median[1]:,.0f}, 2 ranks {median[2]:,.0f}")
    print(f"scaling: speedup_2_ranks={speedup:.2f}")


if __name__ == "__main__":
    main()
