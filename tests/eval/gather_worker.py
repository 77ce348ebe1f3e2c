"""A rank of the two-process ``gather_across_ranks`` test (imports only numpy, torch and recpipe)."""

from __future__ import annotations

import numpy as np
import torch.distributed as dist

from recpipe.eval.metrics import MetricAccumulator, gather_across_ranks


def tied_data(n: int = 999) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(13)
    labels = rng.integers(0, 2, n)
    scores = np.round(rng.normal(labels * 0.7, 1.0) * 4) / 4
    return labels, scores, np.arange(n) % 7


def run_rank(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        labels, scores, groups = tied_data()
        acc = MetricAccumulator()
        acc.update(labels[rank::world], scores[rank::world], groups=groups[rank::world])
        m = gather_across_ranks(acc).compute()
        np.save(f"{out_dir}/rank{rank}.npy", np.array([m.rows, m.auc, m.gauc]))
    finally:
        dist.destroy_process_group()
