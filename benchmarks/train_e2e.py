"""What checkpoints cost a training run: one epoch of ``configs/din_taobao_quality.yaml`` at the shipped cadence
(``train.checkpoint_every_seconds: 600``, written in the background) against the same run without mid-run
checkpoints, and, to show what the background write alone buys, every 100 steps written in the background and
on the training thread (the old default: the issue measured 30% of DIN's training time there).

Every run trains the same generated Taobao rows on one rank in a fresh process of its own (as a training job
runs: one run does not inherit the heap an earlier one left, which each training process keeps,
:mod:`recpipe.train.heap`), no evaluation; its time is the
loop's wall time to the last step, the steps and the mid-run checkpoints together (``train_seconds +
checkpoint_seconds - final_checkpoint_seconds`` of ``train_result.json``: the waits for a write and the copies
to host memory are counted, the background writes where they slow the steps). Every run ends with the same
end-of-training checkpoint, left out of both sides. ``overhead = (with - without) / without``; the goal is ``ckpt_overhead <= 0.05``
at the shipped cadence.

The variants run ``--repeats`` rounds, interleaved (none, shipped, …, none, shipped, …), so a load swing on the
shared machine reaches every variant alike; each variant's figure is its median round (a run of the median
loop time), its other rounds' times are kept in the JSON (``seconds_all``).

Run: ``.venv/bin/python benchmarks/train_e2e.py`` (about 5-10 minutes on 2 cores at 1M rows). Last line:
``train_e2e: ckpt_overhead=… rows_per_s=… ckpt_overhead_steps100_async=… ckpt_overhead_steps100_sync=…``
(``rows_per_s``: the shipped cadence's training rows per second of loop time).

``--quick``: every run in this process (``--in-process``), 20,000 rows, the tests' tiny DIN config
(``tests/pipelines/data/tiny_din.yaml``: small tables, no time cadence of its own), checkpoints every 5 steps instead
of 100; the figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import environment, parse_args, quick_out, warn_if_loaded
from quality import DIN_CONFIG, prepare

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train

RESULTS = Path(__file__).resolve().parent / "results" / "train_e2e.json"
# --quick: the tests' MultiTowerDIN of the same Taobao columns with tables of 2,000-5,000 rows (the quality
# config's are ~400 MB a checkpoint: a minute of the quick run went to allocating and writing them)
TINY_CONFIG = Path(__file__).resolve().parents[1] / "tests" / "pipelines" / "data" / "tiny_din.yaml"
GOAL = 0.05


def _variants(every_steps: int) -> dict[str, dict[str, Any]]:
    """Run name → config overrides (the shipped config's own cadence is ``shipped``)."""
    off = {"train.checkpoint_every_steps": None, "train.checkpoint_every_seconds": None}
    steps = {**off, "train.checkpoint_every_steps": every_steps}
    return {
        "none": off,
        "shipped": {},
        f"steps{every_steps}_async": steps,
        f"steps{every_steps}_sync": {**steps, "train.checkpoint_async": False},
    }


def run_apart(
    config: Path, train_dir: str, out: Path, overrides: dict[str, Any], threads: int
) -> dict[str, Any]:
    """:func:`run_once` in a fresh process (this script's ``--worker``): its result."""
    out.mkdir(parents=True)
    result = out / "run.json"
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        str(config),
        train_dir,
        str(out),
        json.dumps(overrides),
        str(threads),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(result.read_text())


def worker(config: str, train_dir: str, out: str, overrides: str, threads: str) -> None:
    """The ``--worker`` process: one :func:`run_once`, its result in ``out/run.json``."""
    torch.set_num_threads(int(threads))
    r = run_once(Path(config), train_dir, Path(out), json.loads(overrides))
    (Path(out) / "run.json").write_text(json.dumps(r) + "\n")


def run_once(config: Path, train_dir: str, out: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """One epoch of ``config`` on ``train_dir`` with ``overrides``; its loop time and checkpoints."""
    cfg = load_config(config, {"train.epochs": 1, "train.log_every_steps": 100, **overrides})
    result = train(cfg, build_feature_spec(cfg), train_dir, None, out, resume=False)
    return {
        "seconds": result.train_seconds + result.checkpoint_seconds - result.final_checkpoint_seconds,
        "train_seconds": result.train_seconds,
        "checkpoint_seconds": result.checkpoint_seconds - result.final_checkpoint_seconds,
        "final_checkpoint_seconds": result.final_checkpoint_seconds,
        "rows": result.rows_trained,
        "steps": result.steps,
        "mid_run_checkpoints": _mid_run(cfg.train.checkpoint_every_steps, result.steps),
        "checkpoint_every_steps": cfg.train.checkpoint_every_steps,
        "checkpoint_every_seconds": cfg.train.checkpoint_every_seconds,
        "checkpoint_async": cfg.train.checkpoint_async,
    }


def _mid_run(every_steps: int | None, steps: int) -> int | None:
    """Checkpoints before the last step by the step rule (None for the time rule: the log says when)."""
    return (steps - 1) // every_steps if every_steps else None


def _print_run(label: str, r: dict[str, Any]) -> None:
    print(
        f"train_e2e [{label}]: {r['seconds']:.1f}s ({r['train_seconds']:.1f}s steps, "
        f"{r['checkpoint_seconds']:.1f}s mid-run checkpoints on the training thread; the final one "
        f"{r['final_checkpoint_seconds']:.1f}s), {r['steps']} steps, load {r['load_after']:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated Taobao rows (train + eval)")
    parser.add_argument("--catalogue", default="users=4000&ads=2000", help="synthetic:taobao options")
    parser.add_argument("--every-steps", type=int, default=100, help="the step cadence compared")
    parser.add_argument("--config", type=Path, default=DIN_CONFIG)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every variant")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="every run in this process (quick: saves starting 4 processes)",
    )
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    quick = {
        "rows": 20_000,
        "every_steps": 5,
        "config": TINY_CONFIG,
        "repeats": 1,
        "in_process": True,
        "out": quick_out(RESULTS.name),
    }
    args = parse_args(parser, quick)
    if args.worker:
        worker(*args.worker)
        return
    torch.set_num_threads(args.threads)  # this process's runs (--in-process) and its data preparation
    started, load_before = time.perf_counter(), os.getloadavg()
    variants = _variants(args.every_steps)
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="recpipe-train-e2e-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = prepare("taobao", args.rows, args.catalogue, tmp / "data", args.config, args.seed)
        print(f"train_e2e: {data.train_rows:,} train rows, {args.config.name}", flush=True)
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for k in range(args.repeats):
            for name, overrides in variants.items():
                out = tmp / f"run-{name}-{k}"
                if args.in_process:
                    r = run_once(args.config, data.train_dir, out, overrides)
                else:
                    r = run_apart(args.config, data.train_dir, out, overrides, args.threads)
                r["load_after"] = os.getloadavg()[0]
                rounds[name].append(r)
                _print_run(f"{name} {k + 1}/{args.repeats}", r)
    for name, done in rounds.items():
        median = sorted(done, key=lambda r: r["seconds"])[(len(done) - 1) // 2]
        runs[name] = {**median, "seconds_all": [r["seconds"] for r in done]}
    base = runs["none"]["seconds"]
    overhead = {name: (r["seconds"] - base) / base for name, r in runs.items() if name != "none"}
    summary = {
        "ckpt_overhead": overhead["shipped"],
        "rows_per_s": runs["shipped"]["rows"] / runs["shipped"]["seconds"],
        f"ckpt_overhead_steps{args.every_steps}_async": overhead[f"steps{args.every_steps}_async"],
        f"ckpt_overhead_steps{args.every_steps}_sync": overhead[f"steps{args.every_steps}_sync"],
    }
    report = {
        "benchmark": "train_e2e",
        "config": str(args.config),
        "rows": args.rows,
        "train_rows": data.train_rows,
        "catalogue": args.catalogue,
        "threads": args.threads,
        "repeats": args.repeats,
        "goal": f"ckpt_overhead <= {GOAL} at the shipped cadence",
        "runs": runs,
        "summary": summary,
        "environment": environment(started, load_before),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    warn_if_loaded(load_before, os.getloadavg())
    print(
        "train_e2e: "
        + " ".join(f"{k}={v:.0f}" if k == "rows_per_s" else f"{k}={v:.4f}" for k, v in summary.items())
    )


if __name__ == "__main__":
    main()
