"""Jagged vs padded DIN attention: forward and forward+backward time, interleaved in one process.

Padded is TorchEasyRec's formulation (pad every history to 100 items, run the attention MLP on every
position, mask before the softmax); jagged runs the MLP on real items only. Both share one set of
parameters (dim 48, attention MLP 256-64), so they compute the same function.

History length scenarios (most recent 100 clicks at most):
  mean4   geometric, ~20% empty, 1% of rows a long tail of 50..100 items, mean ≈ 4
  mean20  geometric, mean ≈ 20, capped at 100
  mean40  geometric, mean ≈ 40, capped at 100 (long histories: where the attention's arithmetic is the cost)
  all100  every row holds 100 items (the padded formulation's best case)

Times are medians over repeats; the two implementations alternate within every repeat so machine
noise hits both, and short calls are repeated within a sample. Speedup = padded time / jagged time.
"jagged" is ``DinAttention``'s default (``first_layer="auto"``: under autograd the chunked ReLU attention, the
per-row split of the first layer, the scoring, weighting and pooling computed chunk by chunk with a hand-written
backward; under no_grad the accumulating split); its first-layer variants (plain autograd) are compared one by one at the smaller batch
size (mean4, mean20).

At mean 40 the script also measures how close the jagged attention's forward+backward comes to the machine's
arithmetic limit: the attention's GEMM flops (its first layer as the per-row split computes it: the query's
part once per row, ``[s, q⊙s]`` per item; then the MLP and the score layer per item; backward twice the forward;
a recomputation of the first layer in the chunked backward, where its activations are too large to keep, is not
counted: the figure is the work the function needs)
over its median time, against the best fp32 GEMM rate ``torch.mm`` reaches in the same process at the same
thread count (square and attention-shaped products, the best of them): ``gflops_mean40``,
``gemm_peak_gflops``, ``peak_fraction_mean40`` and ``rows_per_s_mean40``. Then the same forward+backward under
``torch.autocast("cpu", bfloat16)`` (``train.mixed_precision: bf16``: on a CPU with bf16 matrix units the chunked
scoring runs its GEMMs in bf16), interleaved with float32 at the same inputs, against the best bf16 ``torch.mm``
rate: ``rows_per_s_mean40_bf16``, ``bf16_vs_fp32_mean40``, ``gemm_peak_gflops_bf16``,
``peak_fraction_mean40_bf16`` and ``max_abs_diff_bf16_mean40`` (the output's, against float32).

The process keeps freed memory in its heap as the trainer does (:func:`recpipe.train.heap.keep_freed_memory`,
unless ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` are exported; the JSON's
``heap_keeps_freed_memory``).

Run: ``.venv/bin/python benchmarks/din_attention.py`` (about 3 minutes on 2 idle cores; ``--quick``: batches
128 and 64 (the variants at 64), one repeat of 10 ms samples).
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
from _common import Times, host_cpu, interleaved, median_and_min, parse_args, quick_out, warn_if_loaded

from recpipe.models.blocks.din import FIRST_LAYERS, DinAttention, PaddedDinAttention
from recpipe.train.heap import keep_freed_memory

DIM = 48
HIDDEN = [256, 64]
MAX_LENGTH = 100
RESULTS = Path(__file__).resolve().parent / "results" / "din_attention.json"


def history_lengths(scenario: str, batch: int, gen: torch.Generator) -> torch.Tensor:
    """``(B,)`` int64 history lengths for a scenario (see the module docstring)."""
    if scenario == "all100":
        return torch.full((batch,), MAX_LENGTH, dtype=torch.long)
    mean = {"mean4": 3.25, "mean20": 20.3, "mean40": 44.0}[scenario]
    # Number of failures before a success: P(0) = p, mean (1 - p) / p.
    p = 1.0 / (1.0 + mean)
    u = torch.rand(batch, generator=gen, dtype=torch.float64)
    lengths = torch.floor(torch.log1p(-u) / torch.log1p(torch.tensor(-p, dtype=torch.float64))).long()
    if scenario == "mean4":
        tail = torch.rand(batch, generator=gen) < 0.01
        lengths[tail] = torch.randint(50, MAX_LENGTH + 1, (int(tail.sum()),), generator=gen)
    lengths[0] = MAX_LENGTH  # the padded formulation always pays for 100
    return lengths.clamp_(max=MAX_LENGTH)


def make_inputs(
    lengths: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.long)
    offsets[1:] = lengths.cumsum(0)
    query = torch.randn(lengths.numel(), DIM, generator=gen)
    values = torch.randn(int(offsets[-1]), DIM, generator=gen)
    return query, values, offsets


class Bf16Autocast(torch.nn.Module):
    """``module`` called under CPU autocast to bfloat16 (what ``train.mixed_precision: bf16`` does), its output
    float32."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.module(*inputs).float()


def bf16_entry(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], repeats: int, sample_s: float, flops: int
) -> dict[str, float]:
    """Forward+backward of ``module`` in float32 and under bf16 autocast, interleaved on ``inputs``: rows/s of
    bf16, its speed over float32, its GEMM rate against the best bf16 ``torch.mm`` and its output's largest
    difference from float32's."""
    wrapped = Bf16Autocast(module)
    rows = inputs[0].shape[0]
    with torch.no_grad():
        diff = float((wrapped(*inputs) - module(*inputs)).abs().max())
    fns = {"fp32": {"fwd_bwd": _fwd_bwd(module, inputs)}, "bf16": {"fwd_bwd": _fwd_bwd(wrapped, inputs)}}
    times, _ = interleaved(fns, repeats, sample_s, max_calls=50)
    med, _ = median_and_min(times)
    bf16_s, fp32_s = med["bf16"]["fwd_bwd"], med["fp32"]["fwd_bwd"]
    peak = gemm_peak_gflops(0.2 if repeats == 1 else 1.0, torch.bfloat16)["peak"]
    return {
        "rows_per_s_mean40_bf16": rows / bf16_s,
        "rows_per_s_mean40_fp32_interleaved": rows / fp32_s,
        "bf16_vs_fp32_mean40": fp32_s / bf16_s,
        "gflops_mean40_bf16": flops / bf16_s / 1e9,
        "gemm_peak_gflops_bf16": peak,
        "peak_fraction_mean40_bf16": flops / bf16_s / 1e9 / peak,
        "max_abs_diff_bf16_mean40": diff,
    }


def _fwd(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            module(*inputs)

    return run


def _fwd_bwd(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> Callable[[], None]:
    query, values, offsets = inputs

    def run() -> None:
        q = query.detach().requires_grad_(True)
        v = values.detach().requires_grad_(True)
        module(q, v, offsets).sum().backward()
        module.zero_grad(set_to_none=True)

    return run


def _then(fn: Callable[[], None], sync: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        fn()
        sync()

    return run


def interleaved_modules(
    modules: dict[str, torch.nn.Module],
    inputs: tuple[torch.Tensor, ...],
    repeats: int,
    sample_s: float,
    sync: Callable[[], None] | None = None,
) -> tuple[Times, dict[str, dict[str, int]]]:
    """Per module, forward and forward+backward seconds per call; modules alternate inside every repeat.

    ``sync`` (``torch.cuda.synchronize`` on a GPU) ends every call, so a call's time includes its kernels.
    """
    fns = {n: {"fwd": _fwd(m, inputs), "fwd_bwd": _fwd_bwd(m, inputs)} for n, m in modules.items()}
    if sync is not None:
        fns = {n: {k: _then(fn, sync) for k, fn in f.items()} for n, f in fns.items()}
    return interleaved(fns, repeats, sample_s, max_calls=50)


def check_equal(modules: dict[str, torch.nn.Module], inputs: tuple[torch.Tensor, ...]) -> float:
    """Largest absolute output difference from the padded reference, on the first 256 rows."""
    query, values, offsets = inputs
    rows = min(256, query.shape[0])
    sub = (query[:rows], values[: int(offsets[rows])], offsets[: rows + 1])
    with torch.no_grad():
        ref = modules["padded"](*sub)
        return max(float((m(*sub) - ref).abs().max()) for m in modules.values())


def scenario_entry(
    modules: dict[str, torch.nn.Module],
    lengths: torch.Tensor,
    inputs: tuple[torch.Tensor, ...],
    repeats: int,
    sample_s: float,
    sync: Callable[[], None] | None = None,
) -> dict:
    """One scenario's results entry: history statistics, the largest difference from the padded
    reference, per-module times (median, min, samples) and the padded / jagged speedups."""
    max_diff = check_equal(modules, inputs)
    times, calls = interleaved_modules(modules, inputs, repeats, sample_s, sync)
    med, best = median_and_min(times)
    return {
        "batch_size": int(lengths.numel()),
        "history_mean": round(float(lengths.float().mean()), 3),
        "history_empty_fraction": round(float((lengths == 0).float().mean()), 4),
        "history_max": int(lengths.max()),
        "values_T": int(lengths.sum()),
        "max_abs_diff_vs_padded": max_diff,
        "median_s": med,
        "min_s": best,
        "times_s": times,
        "calls_per_sample": calls,
        "speedup_fwd": med["padded"]["fwd"] / med["jagged"]["fwd"],
        "speedup_fwd_bwd": med["padded"]["fwd_bwd"] / med["jagged"]["fwd_bwd"],
    }


def entry_line(scenario: str, entry: dict) -> str:
    """The printed line of one :func:`scenario_entry`: median times per module and the speedups."""
    return (
        f"B={entry['batch_size']:5d} {scenario:6s} mean={entry['history_mean']:6.2f} T={entry['values_T']:7d}  "
        + "  ".join(
            f"{n} fwd {m['fwd'] * 1e3:8.1f}ms fwd+bwd {m['fwd_bwd'] * 1e3:8.1f}ms"
            for n, m in entry["median_s"].items()
        )
        + f"  speedup fwd {entry['speedup_fwd']:.1f}x fwd+bwd {entry['speedup_fwd_bwd']:.1f}x"
    )


def attention_gemm_flops(
    batch: int, values_t: int, dim: int = DIM, hidden: list[int] = HIDDEN
) -> dict[str, int]:
    """The GEMM flops (2 per multiply-add) of one :class:`DinAttention` call over ``batch`` rows and
    ``values_t`` history items, as its per-row split computes them: ``(W_q + W_d)·q`` once per row, the
    ``[s, q⊙s]`` GEMM and every later layer (the score layer included) per item; backward computes the
    gradients of both operands of every GEMM, twice the forward. Elementwise work is not counted."""
    widths = [*hidden, 1]
    fwd = 2 * batch * dim * hidden[0] + 2 * values_t * 2 * dim * hidden[0]
    fwd += sum(2 * values_t * a * b for a, b in zip(widths, widths[1:], strict=False))
    return {"fwd": fwd, "fwd_bwd": 3 * fwd}


def gemm_peak_gflops(seconds: float = 1.0, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """The best ``torch.mm`` rate (GFLOP/s) of ``dtype`` at the current thread count, over square products and
    the attention's own shapes (a tall ``(T, K) @ (K, H)``): each shape repeated for ``seconds``, its best call."""
    shapes = {
        "square_1024": (1024, 1024, 1024),
        "square_2048": (2048, 2048, 2048),
        "attention_first": (65536, 2 * DIM, HIDDEN[0]),
        "attention_second": (65536, HIDDEN[0], HIDDEN[1]),
    }
    rates: dict[str, float] = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        out = torch.empty(m, n, dtype=dtype)
        torch.mm(a, b, out=out)
        best, deadline = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
        rates[name] = 2 * m * k * n / best / 1e9
    return {"peak": max(rates.values()), **rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8192, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenarios", nargs="+", default=["mean4", "mean20", "mean40", "all100"])
    parser.add_argument("--sample-s", type=float, default=0.5, help="repeat short calls to fill a sample")
    parser.add_argument(
        "--variants-at", nargs="+", default=["mean4", "mean20"], help="scenarios for variants"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    quick = {"batch_sizes": [128, 64], "repeats": 1, "sample_s": 0.01}
    args = parse_args(parser, {**quick, "out": quick_out(RESULTS.name)})

    # The trainer's heap (recpipe.train.loop.train sets it): freed buffers reused, not faulted in again.
    heap_kept = keep_freed_memory()
    torch.manual_seed(0)
    jagged = DinAttention(DIM, HIDDEN)
    padded = PaddedDinAttention(DIM, HIDDEN, max_length=MAX_LENGTH)
    padded.load_state_dict(jagged.state_dict())
    variants = {}
    for first_layer in (f for f in FIRST_LAYERS if f != "auto"):
        variants[f"jagged_{first_layer}"] = DinAttention(DIM, HIDDEN, first_layer=first_layer)
        variants[f"jagged_{first_layer}"].load_state_dict(jagged.state_dict())

    started = time.perf_counter()
    load_before = os.getloadavg()
    # One small warm-up call per module pays one-time costs (lazy init, first allocations). There is
    # no CPU caching allocator, so later calls at any size cost the same as steady state.
    gen = torch.Generator().manual_seed(0)
    warm_inputs = make_inputs(history_lengths("mean20", 256, gen), gen)
    for module in [jagged, padded, *variants.values()]:
        _fwd(module, warm_inputs)()
        _fwd_bwd(module, warm_inputs)()

    results: dict[str, dict] = {}
    for batch in args.batch_sizes:
        compare_variants = batch == min(args.batch_sizes)
        for scenario in args.scenarios:
            gen = torch.Generator().manual_seed(batch + len(scenario))
            lengths = history_lengths(scenario, batch, gen)
            inputs = make_inputs(lengths, gen)
            modules = {"jagged": jagged, "padded": padded}
            if compare_variants and scenario in args.variants_at:
                modules.update(variants)
            entry = scenario_entry(modules, lengths, inputs, args.repeats, args.sample_s)
            results[f"{scenario}_b{batch}"] = entry
            print(entry_line(scenario, entry), flush=True)

    big = max(args.batch_sizes)

    def get(scenario: str, key: str) -> float | None:
        entry = results.get(f"{scenario}_b{big}")
        return None if entry is None else entry[key]

    all100 = results.get(f"all100_b{big}")
    mean40 = results.get(f"mean40_b{big}")
    peak = gemm_peak_gflops(0.2 if args.repeats == 1 else 1.0)
    arithmetic: dict[str, float | None] = {"gflops_mean40": None, "peak_fraction_mean40": None}
    if mean40 is not None:
        flops = attention_gemm_flops(mean40["batch_size"], mean40["values_T"])
        seconds = mean40["median_s"]["jagged"]["fwd_bwd"]
        arithmetic = {
            "gflops_mean40": flops["fwd_bwd"] / seconds / 1e9,
            "peak_fraction_mean40": flops["fwd_bwd"] / seconds / 1e9 / peak["peak"],
            "rows_per_s_mean40": mean40["batch_size"] / seconds,
            "flops_fwd_bwd_mean40": flops["fwd_bwd"],
        }
        gen = torch.Generator().manual_seed(big + len("mean40"))  # the mean40 entry's inputs again
        inputs = make_inputs(history_lengths("mean40", big, gen), gen)
        arithmetic.update(bf16_entry(jagged, inputs, args.repeats, args.sample_s, flops["fwd_bwd"]))
    summary = {
        "batch_size": big,
        "speedup_fwd_bwd_mean4": get("mean4", "speedup_fwd_bwd"),
        "speedup_fwd_mean4": get("mean4", "speedup_fwd"),
        "speedup_fwd_bwd_mean20": get("mean20", "speedup_fwd_bwd"),
        "speedup_fwd_mean20": get("mean20", "speedup_fwd"),
        # jagged / padded forward+backward time when every row is full.
        "ratio_all100": None if all100 is None else 1.0 / all100["speedup_fwd_bwd"],
        "ratio_all100_fwd": None if all100 is None else 1.0 / all100["speedup_fwd"],
        **arithmetic,
        "gemm_peak_gflops": peak["peak"],
        "gemm_gflops_by_shape": {k: v for k, v in peak.items() if k != "peak"},
    }
    report = {
        "benchmark": "din_attention",
        "summary": summary,
        "config": {
            "dim": DIM,
            "attn_hidden_units": HIDDEN,
            "max_length": MAX_LENGTH,
            "jagged_first_layer": jagged.first_layer,
            "repeats": args.repeats,
            "sample_s": args.sample_s,
            "timing": "wall clock per call, median over repeats, implementations alternating in each repeat "
            "(calls shorter than sample_s repeated within a sample); fwd under torch.no_grad, "
            "fwd_bwd = forward + backward of out.sum() w.r.t. inputs and parameters",
        },
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "heap_keeps_freed_memory": heap_kept,
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu": host_cpu(),
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

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    print(
        f"din_attention: speedup_fwd_bwd_mean4={fmt(summary['speedup_fwd_bwd_mean4'])} "
        f"speedup_fwd_mean4={fmt(summary['speedup_fwd_mean4'])} "
        f"speedup_fwd_bwd_mean20={fmt(summary['speedup_fwd_bwd_mean20'])} "
        f"ratio_all100={fmt(summary['ratio_all100'])} "
        f"gflops_mean40={fmt(summary['gflops_mean40'])} gemm_peak_gflops={fmt(summary['gemm_peak_gflops'])} "
        f"peak_fraction_mean40={fmt(summary['peak_fraction_mean40'])} "
        f"rows_per_s_mean40={fmt(summary.get('rows_per_s_mean40'))} "
        f"rows_per_s_mean40_bf16={fmt(summary.get('rows_per_s_mean40_bf16'))} "
        f"bf16_vs_fp32_mean40={fmt(summary.get('bf16_vs_fp32_mean40'))} "
        f"peak_fraction_mean40_bf16={fmt(summary.get('peak_fraction_mean40_bf16'))}"
    )


if __name__ == "__main__":
    main()
