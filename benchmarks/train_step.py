"""A whole MultiTowerDIN training step with jagged vs padded DIN attention, interleaved in one process.

The full model of ``configs/din_taobao.yaml`` (16 pooled features, deep tower 512-256-128, DIN over
``click_50_seq`` with attention MLP 256-64, final 64; tables of 3.14M rows × 16) trained the way the
trainer trains it: DistributedModelParallel on one rank, Adagrad fused into the embedding backward,
Adam on the dense part, one step = forward, loss, backward (with the fused sparse update) and the
dense optimizer step. The two models differ only in ``attention`` ("jagged": the attention MLP runs on
real history items; "padded": every history padded to 100 items first, TorchEasyRec's formulation)
and start from the same parameters.

Batches: 8192 rows built directly as KeyedJaggedTensors (no FG), random ids in every table's range,
history lengths geometric with mean 3.25 plus a 1% tail of 50..100 items (mean ≈ 4, the seed's
Taobao estimate). Timing: wall clock per step, median over repeats; jagged and padded alternate
within every repeat so machine load hits both. One thread (like every trainer rank) unless --threads.

Run: ``.venv/bin/python benchmarks/train_step.py`` (about 3 minutes on 2 cores; ``--quick``: batch 256, one
repeat, on the same full-size model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from _common import environment, parse_args, quick_out
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import FeatureSpec
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel
from recpipe.train.dist import DistEnv, init_distributed, plan_sharding, shard_model, shutdown
from recpipe.train.optim import apply_sparse_optimizer, combined_optimizer, dense_optimizer
from recpipe.train.step import PipelineStep

CONFIG = "configs/din_taobao.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "train_step.json"
MAX_LENGTH = 100


def history_lengths(batch: int, gen: torch.Generator) -> torch.Tensor:
    """``(B,)`` lengths: geometric (mean 3.25, ~24% empty) plus 1% of rows with 50..100 items."""
    p = 1.0 / (1.0 + 3.25)
    u = torch.rand(batch, generator=gen, dtype=torch.float64)
    lengths = torch.floor(torch.log1p(-u) / torch.log1p(torch.tensor(-p, dtype=torch.float64))).long()
    tail = torch.rand(batch, generator=gen) < 0.01
    lengths[tail] = torch.randint(50, MAX_LENGTH + 1, (int(tail.sum()),), generator=gen)
    return lengths.clamp_(max=MAX_LENGTH)


def make_batch(spec: FeatureSpec, batch: int, gen: torch.Generator) -> Batch:
    """A Taobao-schema Batch: one id per pooled feature, a jagged history shared by the sub-features."""
    hist = history_lengths(batch, gen)
    values, lengths = [], []
    for f in spec.sparse:
        n = hist if f.sequence is not None else torch.ones(batch, dtype=torch.long)
        lengths.append(n)
        values.append(torch.randint(f.mapping.size, (int(n.sum()),), generator=gen))
    sparse = KeyedJaggedTensor(
        keys=spec.sparse_keys(), values=torch.cat(values), lengths=torch.cat(lengths), stride=batch
    )
    labels = (torch.rand(batch, generator=gen) < 0.05).float()
    return Batch(
        dense=torch.zeros(batch, spec.dense_dim),
        sparse=sparse,
        labels=labels,
        weights=torch.full((batch,), 1.0 / batch),  # normalized over the step, as the trainer feeds them
    )


class Trainer:
    """One model as the trainer builds it, and its step."""

    def __init__(self, spec: FeatureSpec, attention: str, env: DistEnv, seed: int) -> None:
        cfg = load_config(CONFIG, {"model.din_towers": [_din_tower(attention)]})
        torch.manual_seed(seed)
        step = PipelineStep(TrainModel(build_model(spec, cfg.model, device=torch.device("cpu"))), 1)
        apply_sparse_optimizer(step, cfg.train.sparse_optimizer, "cpu")
        plan, _ = plan_sharding(step, env, {})
        self.dmp = shard_model(step, env, plan)
        self.optimizer = combined_optimizer(
            self.dmp.fused_optimizer, dense_optimizer(self.dmp, cfg.train.dense_optimizer, None)
        )

    def step(self, batch: Batch) -> float:
        """The trainer's step (what TrainPipelineBase.progress does): seconds."""
        t0 = time.perf_counter()
        self.optimizer.zero_grad()
        loss, _ = self.dmp(batch)
        loss.backward()
        self.optimizer.step()
        return time.perf_counter() - t0


def _din_tower(attention: str) -> dict:
    return {"group": "seq", "attn_mlp": {"hidden_units": [256, 64]}, "attention": attention}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1, help="steps per model per repeat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parse_args(parser, {"batch_size": 256, "repeats": 1, "out": quick_out(RESULTS.name)})
    torch.set_num_threads(args.threads)

    spec = build_feature_spec(load_config(CONFIG))
    env = init_distributed()
    load_before = os.getloadavg()
    started = time.perf_counter()
    try:
        models = {a: Trainer(spec, a, env, seed=0) for a in ("jagged", "padded")}
        gen = torch.Generator().manual_seed(1)
        batches = [make_batch(spec, args.batch_size, gen) for _ in range(4)]
        history = [b.sparse["click_50_seq__adgroup_id"].lengths().float() for b in batches]
        for m in models.values():  # warm-up (allocator, first-call dispatch)
            m.step(batches[0])
        times: dict[str, list[float]] = {a: [] for a in models}
        i = 0
        for _ in range(args.repeats):
            for name, m in models.items():
                for _ in range(args.steps):
                    times[name].append(m.step(batches[i % len(batches)]))
                    i += 1
    finally:
        shutdown(env)
    med = {a: statistics.median(t) for a, t in times.items()}
    speedup = med["padded"] / med["jagged"]
    mean_hist = float(torch.cat(history).mean())
    rows_s = {a: args.batch_size / s for a, s in med.items()}
    report = {
        "benchmark": "train_step",
        "speedup": speedup,
        "target": 4.0,
        "median_step_s": med,
        "rows_per_s": rows_s,
        "times_s": times,
        "config": {
            "model": CONFIG,
            "batch_size": args.batch_size,
            "history_mean": round(mean_hist, 3),
            "history_max_length": MAX_LENGTH,
            "repeats": args.repeats,
            "steps_per_repeat": args.steps,
            "threads": args.threads,
            "step": "DMP (1 rank, gloo) forward + BCE + backward with fused Adagrad on the tables + Adam step",
        },
        "environment": environment(started, load_before),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for a in models:
        print(
            f"{a:6s}: median step {med[a] * 1e3:8.1f} ms  ({rows_s[a]:9,.0f} rows/s)  history mean {mean_hist:.2f}"
        )
    print(f"train_step: speedup={speedup:.2f}")


if __name__ == "__main__":
    main()
