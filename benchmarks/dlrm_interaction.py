"""DLRM dot interaction: recpipe's ``DotInteraction`` vs TorchRec's ``InteractionArch``, interleaved.

Both compute ``[dense, strict upper triangle of the (F+1) × (F+1) Gram matrix]`` from one ``bmm``;
TorchRec gathers the triangle with two index tensors and differentiates ``bmm(X, Xᵀ)`` generically
(two ``bmm`` in backward); recpipe gathers with one ``index_select`` on the flattened matrix and
uses the Gram matrix's symmetry (one ``bmm`` in backward). Criteo shape: F = 26 sparse features;
D = 16 (the configs) and 128 for context.

Times are medians over repeats, the two implementations alternating within every repeat (short
calls repeated within a sample).
Speedup = TorchRec time / recpipe time (forward + backward unless named ``fwd``).

Run: ``.venv/bin/python benchmarks/dlrm_interaction.py`` (about a minute on 2 idle cores; ``--quick``: batch
256, D = 16, 2 repeats of 10 ms samples).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _common import host_cpu, interleaved, median_and_min, parse_args, quick_out, warn_if_loaded
from torchrec.models.dlrm import InteractionArch

from recpipe.models.blocks.interaction import DotInteraction

RESULTS = Path(__file__).resolve().parent / "results" / "dlrm_interaction.json"
NUM_SPARSE = 26


def _fwd(module: torch.nn.Module, dense: torch.Tensor, sparse: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            module(dense, sparse)

    return run


def _fwd_bwd(module: torch.nn.Module, dense: torch.Tensor, sparse: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        d = dense.detach().requires_grad_(True)
        s = sparse.detach().requires_grad_(True)
        module(d, s).sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8192, 2048])
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sample-s", type=float, default=0.2, help="repeat short calls to fill a sample")
    parser.add_argument("--out", type=Path, default=RESULTS)
    quick = {"batch_sizes": [256], "dims": [16], "repeats": 2, "sample_s": 0.01}
    args = parse_args(parser, {**quick, "out": quick_out(RESULTS.name)})

    started = time.perf_counter()
    load_before = os.getloadavg()
    modules = {"recpipe": DotInteraction(NUM_SPARSE), "torchrec": InteractionArch(NUM_SPARSE)}
    results: dict[str, dict] = {}
    gen = torch.Generator().manual_seed(0)
    for batch in args.batch_sizes:
        for dim in args.dims:
            dense = torch.randn(batch, dim, generator=gen)
            sparse = torch.randn(batch, NUM_SPARSE, dim, generator=gen)
            with torch.no_grad():
                diff = float(
                    (modules["recpipe"](dense, sparse) - modules["torchrec"](dense, sparse)).abs().max()
                )
            fns = {
                n: {"fwd": _fwd(m, dense, sparse), "fwd_bwd": _fwd_bwd(m, dense, sparse)}
                for n, m in modules.items()
            }
            for f in fns.values():
                for fn in f.values():
                    fn()  # warm-up
            times, calls = interleaved(fns, args.repeats, args.sample_s, max_calls=200)
            med, best = median_and_min(times)
            entry = {
                "batch_size": batch,
                "dim": dim,
                "max_abs_diff": diff,
                "median_s": med,
                "min_s": best,
                "calls_per_sample": calls,
                "speedup_fwd": med["torchrec"]["fwd"] / med["recpipe"]["fwd"],
                "speedup_fwd_bwd": med["torchrec"]["fwd_bwd"] / med["recpipe"]["fwd_bwd"],
            }
            results[f"b{batch}_d{dim}"] = entry
            print(
                f"B={batch:5d} D={dim:4d}  "
                + "  ".join(
                    f"{n} fwd {m['fwd'] * 1e3:7.2f}ms fwd+bwd {m['fwd_bwd'] * 1e3:7.2f}ms"
                    for n, m in med.items()
                )
                + f"  speedup fwd {entry['speedup_fwd']:.2f}x fwd+bwd {entry['speedup_fwd_bwd']:.2f}x",
                flush=True,
            )

    headline = results.get(f"b{max(args.batch_sizes)}_d{min(args.dims)}")
    summary = {
        "batch_size": max(args.batch_sizes),
        "dim": min(args.dims),
        "speedup_vs_torchrec": None if headline is None else headline["speedup_fwd_bwd"],
        "speedup_vs_torchrec_fwd": None if headline is None else headline["speedup_fwd"],
    }
    report = {
        "benchmark": "dlrm_interaction",
        "summary": summary,
        "config": {
            "num_sparse_features": NUM_SPARSE,
            "repeats": args.repeats,
            "sample_s": args.sample_s,
            "timing": "wall clock per call, median over repeats, implementations alternating in each repeat "
            "(calls shorter than sample_s repeated within a sample); fwd under torch.no_grad, "
            "fwd_bwd = forward + backward of out.sum() w.r.t. both inputs",
        },
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "cpu": host_cpu(),
            "machine": platform.machine(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "runtime_s": round(time.perf_counter() - started, 1),
        },
        "results": results,
    }
    warn_if_loaded(load_before, report["environment"]["load_average_after"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(args.out)
    value = summary["speedup_vs_torchrec"]
    print(f"dlrm_interaction: speedup_vs_torchrec={'n/a' if value is None else f'{value:.2f}'}")


if __name__ == "__main__":
    main()
