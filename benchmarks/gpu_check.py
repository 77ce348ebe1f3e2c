"""The prepared GPU check (issue 20): what runs with plain torch on one CUDA device, within a time budget.

Sections, each recorded in ``gpu_check.json`` (written again after every section, so a run cut short
still reports what it did) and logged to ``gpu_check.log`` in the output folder:

  preflight  torch, CUDA, the device; the APIs the check needs. If one is missing the check refuses
             to start (exit 2) and says which.
  din        jagged vs padded DIN attention (``recpipe.models.din``), forward and forward+backward,
             B=8192, histories of mean 4 / mean 20 / all 100, fp32 and bf16: the entries and printed
             lines of ``benchmarks/din_attention.py`` (its functions, timed with a device sync per call).
  aoti       the dense arch of MultiTowerDIN (``configs/din_taobao.yaml``'s sizes) and of DLRM
             (``configs/dlrm_criteo.yaml``'s): ``torch.export`` at dynamic batch and history size, then
             ``aoti_compile_and_package`` for the device, with recpipe's package settings
             (``recpipe.export.dense.PACKAGE_CONFIG``: the weights as a blob beside the library); parity
             with eager and p50/p99 latency of eager vs the package at batch 1, 64 and 512 (fp32, TF32 off).
  tensorrt   the MultiTowerDIN dense program through ``torch_tensorrt``, only where it imports.
  not_run    the project's GPU paths that need torchrec / fbgemm-gpu, each with the reason.

Imports torch and the project's plain-torch modules only (no torchrec, fbgemm_gpu, numpy, safetensors),
so it runs on a machine with nothing but torch; ``tests/benchmarks/test_gpu_check.py`` holds that and
runs every section on CPU at tiny sizes (the AOTInductor compiles in its slow tests).

Run: ``scripts/gpu_check.sh`` (docs/gpu_check.md), or on CPU
``.venv/bin/python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/gpu_check``. ``--quick`` is that
CPU dry run (``--tiny``; ``--device cpu`` unless given; the output folder ``--out``, else ``$OUT``, else one
under the temp dir): every section, the AOTInductor compiles included (20-40 s on 2 cores). Last line:
``gpu_check: status=… seconds=… din_speedup_fwd_bwd_fp32_mean4=… aoti_ok=… aoti_models=…``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Run as a file (``python benchmarks/gpu_check.py``) on a machine where recpipe is not installed: the
# repository root and this folder are the import path.
_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE.parent), str(_HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import din_attention as din_bench  # noqa: E402
from _common import host_cpu, quick_out  # noqa: E402
from _common import parse_args as parse_with_quick  # noqa: E402

from recpipe.export.dense import MAX_BATCH, MAX_VALUES, PACKAGE_CONFIG, export_program  # noqa: E402
from recpipe.models.blocks.din import FIRST_LAYERS, DinAttention, PaddedDinAttention  # noqa: E402
from recpipe.models.blocks.mlp import MlpSpec  # noqa: E402
from recpipe.models.dlrm.dense import DlrmDense  # noqa: E402
from recpipe.models.multi_tower_din.dense import DeepTower, DinTower, MultiTowerDinDense  # noqa: E402
from recpipe.models.protocol import DenseArchModule  # noqa: E402

LOG = logging.getLogger("gpu_check")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PARITY_TOL = 1e-4  # fp32 logits, eager vs compiled, on the same device
# Jagged vs padded DIN outputs (the same function): fp32 to rounding, bf16 to its 8-bit mantissa.
DIN_TOL = {"fp32": 1e-4, "bf16": 0.1}
# torch_tensorrt 2.11.0 (CUDA 13.0, TensorRT 10.15.1), checked with pip download on 2026-11-30.
TRT_WHEEL_NOTE = (
    "a torch_tensorrt wheel for torch 2.11+cu130 (torch_tensorrt 2.11.0, cp312) is 3.7 MB, but it needs "
    "TensorRT 10.15 (tensorrt-cu13-libs, served from pypi.nvidia.com), far more than the 64 MiB a call carries"
)
# The project's GPU paths this check cannot run: what each needs, and where it lives.
NEEDS_TORCHREC = {
    "dmp_sharded_training_nccl": (
        ("torchrec", "fbgemm_gpu"),
        "DistributedModelParallel training with sharded embedding tables over NCCL (recpipe/train)",
    ),
    "fused_tbe_kernels": (
        ("torchrec", "fbgemm_gpu"),
        "fbgemm-gpu's fused table-batched embedding kernels with the optimizer fused into backward",
    ),
    "aoti_full_model": (
        ("torchrec", "fbgemm_gpu"),
        "the aoti backend's whole-model package (recpipe/export/aoti.py: KJT lookups, fbgemm ops)",
    ),
    "tensorrt_backend_export": (
        ("torchrec", "fbgemm_gpu", "safetensors", "torch_tensorrt"),
        "the trt export backend (recpipe/export/trt.py: the RTP folder with its tables + TensorRT program)",
    ),
}


class Budget:
    """Seconds left until a deadline; every section asks before each piece of work."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def preflight(device: str) -> tuple[dict[str, Any], list[str]]:
    """The environment block and the reasons the check cannot run here (empty when it can)."""
    import torch._inductor
    import torch.fx.experimental._config as fx_config

    missing = []
    if (
        not hasattr(torch, "export")
        or not hasattr(torch.export, "export")
        or not hasattr(torch.export, "Dim")
    ):
        missing.append(f"torch {torch.__version__} lacks torch.export.export / torch.export.Dim")
    for name in ("aoti_compile_and_package", "aoti_load_package"):
        if not hasattr(torch._inductor, name):
            missing.append(f"torch {torch.__version__} lacks torch._inductor.{name} (AOTInductor packages)")
    if not hasattr(fx_config, "backed_size_oblivious"):
        missing.append(f"torch {torch.__version__} lacks fx config backed_size_oblivious (export_program)")
    env: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": device,
        "cpus": os.cpu_count(),
        "cpu": host_cpu(),
        "machine": platform.machine(),
        "git_sha": _git_sha(),
        "numpy": _version_of("numpy"),
    }
    if device == "cuda":
        if not torch.cuda.is_available():
            missing.append("--device cuda but torch.cuda.is_available() is False (no CUDA device or driver)")
        else:
            props = torch.cuda.get_device_properties(0)
            env.update(
                gpu=props.name,
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                compute_capability=f"{props.major}.{props.minor}",
                cudnn=torch.backends.cudnn.version(),
                bf16_supported=torch.cuda.is_bf16_supported(),
            )
    return env, missing


def _git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=_HERE
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a broken install, or (in the test) a blocked one
        return False


def _version_of(module: str) -> str | None:
    if not _installed(module):
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "installed"


def _sync(device: torch.device) -> Callable[[], None] | None:
    return torch.cuda.synchronize if device.type == "cuda" else None


def run_din(
    device: torch.device, batch: int, repeats: int, sample_s: float, budget: Budget
) -> dict[str, Any]:
    """Jagged vs padded DIN attention per dtype and history scenario (``benchmarks/din_attention.py``)."""
    torch.manual_seed(0)
    dim, hidden, max_length = din_bench.DIM, din_bench.HIDDEN, din_bench.MAX_LENGTH
    reference = DinAttention(dim, hidden)
    results: dict[str, Any] = {}
    for dtype_name, dtype in DTYPES.items():
        modules = {"jagged": reference, "padded": PaddedDinAttention(dim, hidden, max_length=max_length)}
        for first_layer in (f for f in FIRST_LAYERS if f != "auto"):  # compared at mean4 / mean20
            modules[f"jagged_{first_layer}"] = DinAttention(dim, hidden, first_layer=first_layer)
        for module in modules.values():
            module.load_state_dict(reference.state_dict())
        modules = {n: _copy_to(m, device, dtype) for n, m in modules.items()}
        gen = torch.Generator().manual_seed(0)
        warm = _on(
            din_bench.make_inputs(din_bench.history_lengths("mean20", min(256, batch), gen), gen),
            device,
            dtype,
        )
        for module in modules.values():
            din_bench._fwd(module, warm)()
            din_bench._fwd_bwd(module, warm)()
        for scenario in ("mean4", "mean20", "all100"):
            key = f"{dtype_name}_{scenario}_b{batch}"
            if budget.left() < 5:
                results[key] = {"status": "not run: time budget spent"}
                LOG.info("din %s: not run, time budget spent", key)
                continue
            gen = torch.Generator().manual_seed(batch + len(scenario))
            lengths = din_bench.history_lengths(scenario, batch, gen)
            inputs = _on(din_bench.make_inputs(lengths, gen), device, dtype)
            chosen = {n: m for n, m in modules.items() if n in ("jagged", "padded") or scenario != "all100"}
            entry = din_bench.scenario_entry(chosen, lengths, inputs, repeats, sample_s, _sync(device))
            entry["dtype"] = dtype_name
            tol = DIN_TOL[dtype_name]
            diff = entry["max_abs_diff_vs_padded"]
            entry["status"] = (
                "ok" if diff <= tol else f"failed: differs from the padded reference by {diff:.3g} > {tol}"
            )
            results[key] = entry
            LOG.info("%s %s", dtype_name, din_bench.entry_line(scenario, entry))
    return results


def _copy_to(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    import copy

    return copy.deepcopy(module).to(device=device, dtype=dtype)


def _on(
    inputs: tuple[torch.Tensor, ...], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for t in inputs)


TAOBAO_DEEP_KEYS = (
    "user_id cms_segid cms_group_id final_gender_code age_level pvalue_level shopping_level occupation "
    "new_user_class_level adgroup_id cate_id campaign_id customer brand pid price"
).split()
TAOBAO_QUERY = ("adgroup_id", "cate_id", "brand")
CRITEO_KEYS = [f"C{i}" for i in range(1, 27)]
DENSE_MODELS = ("multi_tower_din", "dlrm")


def dense_models() -> dict[str, tuple[DenseArchModule, Callable[[int, torch.Generator], tuple]]]:
    """Each dense arch as the positional module export serves, and a builder of its inputs at batch B."""
    din_dense = MultiTowerDinDense(
        [DeepTower("deep", tuple(TAOBAO_DEEP_KEYS), MlpSpec((512, 256, 128)))],
        [
            DinTower(
                "seq", TAOBAO_QUERY, tuple(f"click_50_seq__{k}" for k in TAOBAO_QUERY), MlpSpec((256, 64))
            )
        ],
        MlpSpec((64,)),
        {k: 16 for k in [*TAOBAO_DEEP_KEYS, *(f"click_50_seq__{k}" for k in TAOBAO_QUERY)]},
    )
    dlrm_dense = DlrmDense(CRITEO_KEYS, 13, MlpSpec((512, 256, 16)), MlpSpec((1024, 1024, 512, 256)), 16)

    def din_inputs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        # Histories as in the Taobao data (mean ≈ 4; row 0 holds 100 items, so no batch is all empty).
        query, values, offsets = din_bench.make_inputs(din_bench.history_lengths("mean4", batch, gen), gen)
        pooled = [torch.randn(batch, 16, generator=gen) for _ in TAOBAO_DEEP_KEYS]
        return (torch.zeros(batch, 0), *pooled, query, values, offsets)

    def dlrm_inputs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (
            torch.randn(batch, 13, generator=gen),
            *[torch.randn(batch, 16, generator=gen) for _ in CRITEO_KEYS],
        )

    return {
        "multi_tower_din": (DenseArchModule(_DenseOnly(din_dense, din_dense.input_names())), din_inputs),
        "dlrm": (DenseArchModule(_DenseOnly(dlrm_dense, ["dense", *CRITEO_KEYS])), dlrm_inputs),
    }


class _DenseOnly:
    """The two :class:`~recpipe.models.protocol.RankingModel` methods :class:`DenseArchModule` reads."""

    def __init__(self, dense: torch.nn.Module, names: list[str]) -> None:
        self.dense, self.names = dense, names

    def dense_module(self) -> torch.nn.Module:
        return self.dense

    def dense_input_names(self) -> list[str]:
        return self.names


def dynamic_shapes(input_names: list[str]) -> tuple[tuple[dict[int, Any], ...]]:
    """One batch dim for ``(B, ...)`` inputs, a free item count for ``<tower>__values``, ``B + 1`` for
    ``<tower>__offsets`` (``recpipe.export.dense.dense_dynamic_shapes``, read off the input names instead
    of a lookup plan). Nested once: ``DenseArchModule.forward`` takes ``*inputs``."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    shapes: list[dict[int, Any]] = []
    for i, name in enumerate(input_names):
        if name.endswith("__offsets"):
            shapes.append({0: batch + 1})
        elif name.endswith("__values"):
            shapes.append({0: torch.export.Dim(f"items_{i}", min=0, max=MAX_VALUES)})
        else:
            shapes.append({0: batch})
    return (tuple(shapes),)


def _latency(
    fns: dict[str, Callable[[], object]], calls: int, sync: Callable[[], None] | None
) -> dict[str, dict[str, float]]:
    """p50 / p99 milliseconds per callable, one call at a time (synced), callables alternating."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(calls):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if sync is not None:
                sync()
            samples[name].append((time.perf_counter() - start) * 1e3)
    out = {}
    for name, ms in samples.items():
        ms.sort()
        out[name] = {
            "p50_ms": round(statistics.median(ms), 4),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 4),
        }
    return out


def run_aoti(
    device: torch.device,
    models: list[str],
    batches: tuple[int, ...],
    calls: int,
    budget: Budget,
    on_result: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Per dense arch: export, AOTInductor compile for ``device``, parity with eager, latency.
    ``on_result`` sees the results after every model (the report is written each time)."""
    results: dict[str, Any] = {}
    built = dense_models()
    with tempfile.TemporaryDirectory(prefix="gpu_check_aoti_") as workdir:
        for name in models:
            module, make = built[name]
            if budget.left() < 60:  # a compile cannot be cut short: start one only with a minute left
                results[name] = {"status": "not run: time budget spent"}
                LOG.info("aoti %s: not run, time budget spent", name)
            else:
                try:
                    module = module.to(device).eval()
                    results[name] = _aoti_one(name, module, make, device, batches, calls, Path(workdir))
                except Exception as e:  # recorded; the next model and section still run
                    LOG.exception("aoti %s failed", name)
                    results[name] = {"status": f"failed: {type(e).__name__}: {e}"}
            on_result(results)
    return results


def _aoti_one(
    name: str,
    module: DenseArchModule,
    make: Callable[[int, torch.Generator], tuple],
    device: torch.device,
    batches: tuple[int, ...],
    calls: int,
    workdir: Path,
) -> dict[str, Any]:
    import torch._inductor

    gen = torch.Generator().manual_seed(0)
    example = tuple(t.to(device) for t in make(64, gen))
    start = time.perf_counter()
    program = export_program(module, example, dynamic_shapes(module.input_names))
    export_s = time.perf_counter() - start
    package = workdir / f"{name}.pt2"
    start = time.perf_counter()
    # The package as recpipe writes it (the weights as a blob beside the library), not torch's default layout.
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(package), inductor_configs=dict(PACKAGE_CONFIG)
    )
    compile_s = time.perf_counter() - start
    runner = torch._inductor.aoti_load_package(str(package))
    entry: dict[str, Any] = {
        "status": "ok",
        "export_s": round(export_s, 2),
        "compile_s": round(compile_s, 2),
        "package_mib": round(package.stat().st_size / 2**20, 2),
        "parity_tol": PARITY_TOL,
        "batches": {},
    }
    LOG.info(
        "aoti %s: export %.1fs, compile %.1fs, %.1f MiB", name, export_s, compile_s, entry["package_mib"]
    )
    with torch.inference_mode():
        for batch in batches:
            inputs = tuple(t.to(device) for t in make(batch, gen))
            diff = float((runner(*inputs) - module(*inputs)).abs().max())
            lat = _latency(
                {"eager": lambda x=inputs: module(*x), "aoti": lambda x=inputs: runner(*x)},
                calls,
                _sync(device),
            )
            entry["batches"][f"b{batch}"] = {
                "max_abs_logit_diff": diff,
                "parity_passed": diff <= PARITY_TOL,
                **{f"{k}_{m}": v for k, r in lat.items() for m, v in r.items()},
                "aoti_vs_eager_p50": round(lat["aoti"]["p50_ms"] / lat["eager"]["p50_ms"], 3),
            }
            LOG.info(
                "aoti %s b%d: max |diff| %.2e  eager p50 %.3fms  aoti p50 %.3fms",
                name, batch, diff, lat["eager"]["p50_ms"], lat["aoti"]["p50_ms"],
            )  # fmt: skip
    if not all(b["parity_passed"] for b in entry["batches"].values()):
        entry["status"] = f"failed: parity above {PARITY_TOL}"
    return entry


def run_tensorrt(device: torch.device, calls: int) -> dict[str, Any]:
    """The MultiTowerDIN dense program through torch_tensorrt (fp32), where it imports."""
    if not _installed("torch_tensorrt"):
        return {"status": f"not run: torch_tensorrt not installed; {TRT_WHEEL_NOTE}"}
    if device.type != "cuda":
        return {"status": "not run: TensorRT needs a CUDA device"}
    try:
        import torch_tensorrt

        module, make = dense_models()["multi_tower_din"]
        module = module.to(device).eval()
        inputs = tuple(t.to(device) for t in make(512, torch.Generator().manual_seed(0)))
        program = export_program(module, inputs, dynamic_shapes(module.input_names))
        start = time.perf_counter()
        # Settings of recpipe/export/trt.py; shapes fixed at this example (batch 512).
        compiled = torch_tensorrt.dynamo.compile(
            program,
            inputs=list(inputs),
            enabled_precisions={torch.float32},
            min_block_size=1,
            truncate_double=True,
        )
        compile_s = time.perf_counter() - start
        with torch.inference_mode():
            diff = float((compiled(*inputs) - module(*inputs)).abs().max())
            lat = _latency(
                {"eager": lambda: module(*inputs), "trt": lambda: compiled(*inputs)}, calls, _sync(device)
            )
    except Exception as e:
        LOG.exception("tensorrt failed")
        return {"status": f"failed: {type(e).__name__}: {e}"}
    return {
        "status": "ok" if diff <= 1e-3 else "failed: parity above 1e-3",
        "torch_tensorrt": torch_tensorrt.__version__,
        "compile_s": round(compile_s, 2),
        "b512": {"max_abs_logit_diff": diff, **{f"{k}_{m}": v for k, r in lat.items() for m, v in r.items()}},
    }


def not_run() -> dict[str, str]:
    """Each GPU path the check cannot run, with what is missing (or why it is out of scope here)."""
    out = {}
    for name, (needs, what) in NEEDS_TORCHREC.items():
        missing = [m for m in needs if not _installed(m)]
        why = f"{', '.join(missing)} not installed" if missing else "outside this check (plain torch only)"
        out[name] = f"not run: {why}; {what}"
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small sizes and few repeats (the CPU dry run)")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default: $OUT, else runs/gpu_check)"
    )
    ap.add_argument("--models", nargs="+", default=list(DENSE_MODELS), choices=list(DENSE_MODELS))
    ap.add_argument("--budget-s", type=float, default=420.0, help="seconds for all sections together")
    ap.add_argument(
        "--sections", nargs="+", default=["din", "aoti", "tensorrt"], choices=["din", "aoti", "tensorrt"]
    )
    return parse_with_quick(ap, {"tiny": True, "device": "cpu"}, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    default = quick_out("gpu_check") if args.quick else Path("runs/gpu_check")
    out = args.out or Path(os.environ.get("OUT") or default)
    out.mkdir(parents=True, exist_ok=True)
    _log_to(out / "gpu_check.log")
    budget = Budget(args.budget_s)
    started = time.perf_counter()
    env, missing = preflight(args.device)
    report: dict[str, Any] = {
        "check": "gpu_check",
        "status": "running",
        "environment": env,
        "args": _jsonable(args),
    }
    LOG.info("environment: %s", json.dumps(env))
    if missing:
        report.update(status="refused", reasons=missing)
        _write(out, report)
        for reason in missing:
            LOG.error("refusing to start: %s", reason)
        return 2
    device = torch.device(args.device)
    # fp32 parity means fp32 arithmetic: no TF32 in matmuls (off by default; a site config may turn it on).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tiny = args.tiny
    sections: dict[str, Any] = {}
    report["sections"] = sections
    if "din" in args.sections:
        sections["din"] = _section(
            lambda: run_din(
                device,
                batch=32 if tiny else 8192,
                repeats=1 if tiny else 5,
                sample_s=0.0 if tiny else 0.2,
                budget=Budget(min(budget.left() * 0.4, 180)),
            )
        )
        _write(out, report)
    if "aoti" in args.sections:

        def partial_aoti(results: dict[str, Any]) -> None:
            sections["aoti"] = results
            _write(out, report)

        sections["aoti"] = _section(
            lambda: run_aoti(
                device,
                args.models,
                (1, 8, 32) if tiny else (1, 64, 512),
                3 if tiny else 200,
                budget,
                partial_aoti,
            )
        )
        _write(out, report)
    if "tensorrt" in args.sections:
        sections["tensorrt"] = run_tensorrt(device, 3 if tiny else 200)
    sections["not_run"] = not_run()
    if device.type == "cuda":
        env["cuda_max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    report["status"] = "ok" if _all_ok(sections) else "failed"
    report["seconds"] = round(time.perf_counter() - started, 1)
    _write(out, report)
    LOG.info("gpu_check: %s in %.1fs; %s", report["status"], report["seconds"], out / "gpu_check.json")
    print(summary_line(report), flush=True)
    return 0 if report["status"] == "ok" else 1


def summary_line(report: dict[str, Any]) -> str:
    """The last line, as every benchmark prints one: ``gpu_check: status=… seconds=…``, then the fp32
    forward+backward DIN speedup at mean 4 and the AOTInductor models that passed (the sections that ran)."""
    sections = report["sections"]
    fields = {"status": report["status"], "seconds": report["seconds"]}
    din = [v for k, v in sections.get("din", {}).items() if k.startswith("fp32_mean4_")]
    if din and "speedup_fwd_bwd" in din[0]:
        fields["din_speedup_fwd_bwd_fp32_mean4"] = round(din[0]["speedup_fwd_bwd"], 2)
    aoti = sections.get("aoti")
    if isinstance(aoti, dict) and "status" not in aoti:  # per model (a failed section has one status)
        fields["aoti_ok"] = sum(1 for v in aoti.values() if v.get("status") == "ok")
        fields["aoti_models"] = len(aoti)
    return "gpu_check: " + " ".join(f"{k}={v}" for k, v in fields.items())


def _section(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception as e:
        LOG.exception("section failed")
        return {"status": f"failed: {type(e).__name__}: {e}"}


def _all_ok(sections: dict[str, Any]) -> bool:
    """No entry whose status says failed (``not run`` is not a failure: it is recorded with its reason)."""

    def failed(x: Any) -> bool:
        if isinstance(x, dict):
            return str(x.get("status", "")).startswith("failed") or any(failed(v) for v in x.values())
        return False

    return not failed(sections)


def _jsonable(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def _write(out: Path, report: dict[str, Any]) -> None:
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    tmp.replace(out / "gpu_check.json")


def _log_to(path: Path) -> None:
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    for handler in list(LOG.handlers):
        LOG.removeHandler(handler)
        handler.close()
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    for handler in (logging.StreamHandler(sys.stdout), logging.FileHandler(path, mode="w")):
        handler.setFormatter(fmt)
        LOG.addHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
