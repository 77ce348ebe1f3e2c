"""Training throughput on 1 rank vs 2 ranks (one thread each, gloo) on the same data.

Each run is a real launch through :func:`recpipe.launch.launch_local` (one plain process for 1 rank,
``torchrun`` for 2) of ``configs/din_taobao_small.yaml`` (MultiTowerDIN, full-size tables of 3.14M rows,
Adagrad fused into the embedding backward, Adam dense) on the same generated Taobao rows. Two ways to add a rank:

- ``speedup_2_ranks`` (the headline): every rank keeps a batch of 8192 rows, so 2 ranks train global
  batches of 16384 (data-parallel throughput scaling; TorchEasyRec's ``batch_size`` is per worker);
- ``speedup_2_ranks_same_global_batch``: the global batch stays 8192 and each rank takes 4096 rows
  (strong scaling: per-step costs that do not shrink with the batch weigh twice as much).

Throughput is the trainer's own ``steady_rows_per_second``: global rows per second of the training loop
after its first step (process start, planning, fx tracing, the pipeline fill and the final checkpoint are
outside it). The three runs alternate in every repeat so machine
load hits them alike; speedups are ratios of the medians. Data preparation runs in each rank's own
thread (``data.num_workers: 0``, pinned here): on 2 cores with 2 ranks a worker would compete with the
ranks for the same cores. The 1-minute load average before the benchmark and before every run is
recorded; other work on the machine depresses the 2-rank runs far more than the 1-rank ones.

Run: ``.venv/bin/python benchmarks/scaling.py`` (about 4 minutes on 2 cores). ``--quick``: 2,048 rows, 256 rows
per rank and step, one repeat: the same three launches (the 2-rank ones through torchrun), a few steps each.
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

from _common import host_cpu, parse_args, quick_out

from recpipe.config.caps import capped_config
from recpipe.data.synthetic import generate
from recpipe.launch.local import launch_local

CONFIG = "configs/din_taobao_small.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"


def run_once(data: Path, out: Path, nproc: int, batch: int, epochs: int, config: Path | str = CONFIG) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    overrides = {
        "data.batch_size": batch,
        "data.num_workers": 0,
        "train.epochs": epochs,
        "train.log_every_steps": 10,
        "train.checkpoint_every_steps": 1_000_000,  # only the final one, after the timed loop
    }
    lines: list[str] = []
    load = os.getloadavg()[0]  # before the run: the other work on the machine (and the previous run's tail)
    t0 = time.perf_counter()
    code = launch_local(
        str(config),
        str(data),
        None,
        out,
        nproc,
        overrides,
        resume=False,
        threads_per_rank=1,
        echo=lines.append,
    )
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{nproc}-rank run failed:\n{''.join(lines[-60:])}")
    result = json.loads((out / "train_result.json").read_text())
    return {
        "nproc": nproc,
        "rows_per_s": result["steady_rows_per_second"],
        "rows_per_s_whole_loop": result["rows_per_second"],
        "rows_per_cpu_s_rank0": result["rows_per_cpu_second"],
        "train_s": result["seconds"],
        "wall_s": wall,
        "steps": result["steps"],
        "load_avg": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=327_680)  # 20 steps of 2 × 8192
    parser.add_argument("--batch-size", type=int, default=8192, help="rows per rank and step")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table-cap", type=int, default=None, help="cap every table (default: the config's)")
    quick = {
        "rows": 2048,
        "batch_size": 256,
        "repeats": 1,
        "table_cap": 20_000,
        "out": quick_out(RESULTS.name),
    }
    args = parse_args(parser, quick)

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    print(f"load average before the benchmark: {load_before:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="recpipe-scaling-") as tmp:
        data = Path(tmp) / "data"
        generate("taobao", args.rows, data, seed=0)
        config = capped_config(CONFIG, args.table_cap, Path(tmp))
        # name: (ranks, global batch)
        setups = {
            "1_rank": (1, args.batch_size),
            "2_ranks": (2, 2 * args.batch_size),
            "2_ranks_same_global_batch": (2, args.batch_size),
        }
        runs: list[dict] = []
        for _ in range(args.repeats):
            for name, (nproc, batch) in setups.items():
                r = {"setup": name, **run_once(data, Path(tmp) / name, nproc, batch, args.epochs, config)}
                runs.append(r)
                print(
                    f"{name:26s} batch {batch:6d}: {r['rows_per_s']:9,.0f} rows/s  (loop {r['train_s']:.1f}s, "
                    f"wall {r['wall_s']:.1f}s, load {r['load_avg']:.1f})",
                    flush=True,
                )
    median = {n: statistics.median(r["rows_per_s"] for r in runs if r["setup"] == n) for n in setups}
    speedup = median["2_ranks"] / median["1_rank"]
    strong = median["2_ranks_same_global_batch"] / median["1_rank"]
    # Global rows per CPU-second of rank 0: the speedup two otherwise idle cores would give if no rank
    # ever waited (an upper bound; on a shared machine the wall-clock ratio can be far lower).
    per_cpu = {
        n: statistics.median(r["rows_per_cpu_s_rank0"] for r in runs if r["setup"] == n) for n in setups
    }
    cpu_bound = {n: per_cpu[n] / per_cpu["1_rank"] for n in setups if n != "1_rank"}
    report = {
        "benchmark": "scaling",
        "speedup_2_ranks": speedup,
        "speedup_2_ranks_same_global_batch": strong,
        "target": 1.6,
        "load_avg_before": load_before,
        "median_rows_per_s": median,
        "cpu_time_bound_speedup": cpu_bound,
        "runs": runs,
        "config": {
            "model": CONFIG,
            "rows": args.rows,
            "rank_batch_size": args.batch_size,
            "setups": {n: {"ranks": r, "global_batch_size": b} for n, (r, b) in setups.items()},
            "epochs": args.epochs,
            "threads_per_rank": 1,
            "data_num_workers": 0,
            "backend": "gloo",
        },
        "environment": {
            "cpus": os.cpu_count(),
            "cpu": host_cpu(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "seconds": round(time.perf_counter() - started, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"median rows/s: 1 rank {median['1_rank']:,.0f}; 2 ranks {median['2_ranks']:,.0f} "
        f"(same global batch: {median['2_ranks_same_global_batch']:,.0f}, {strong:.2f}x)"
    )
    print(f"cpu-time bound (idle machine, no waiting): {cpu_bound}")
    loads = [r["load_avg"] for r in runs]
    print(f"load average: {load_before:.2f} before, {min(loads):.2f}..{max(loads):.2f} before the runs")
    print(f"scaling: speedup_2_ranks={speedup:.2f}")


if __name__ == "__main__":
    main()
