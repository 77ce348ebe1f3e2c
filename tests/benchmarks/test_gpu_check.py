"""benchmarks/gpu_check.py (issue 20): the CPU dry run of the prepared GPU check, in a process where
everything the GPU machine lacks (torchrec, fbgemm_gpu, numpy, safetensors, …) cannot be imported and
recpipe is not installed; and its refusals.

The dry run is the benchmark's ``--quick`` (``--device cpu --tiny``, every section, both dense archs): one run
in a module fixture that the tests below read, and the quick run tests/benchmarks/test_benchmarks_quick.py
leaves to this file (its AOTInductor compiles are most of its ~50 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from quick_line import assert_last_line

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "gpu_check.py"
# Installed here, absent on the GPU machine (its python has torch and what torch needs, nothing else).
ABSENT = (
    "torchrec fbgemm_gpu numpy safetensors pyarrow pandas pydantic yaml onnx onnxruntime mlflow kfp "
    "torch_tensorrt"
).split()

# argv: blocked top-level modules (comma-separated), torch attributes to delete, then the script and its
# arguments. The editable install's finder is removed too, so recpipe is found only as the check finds it.
RUNNER = textwrap.dedent(
    """
    import importlib, importlib.util, runpy, sys

    blocked = set(sys.argv[1].split(","))

    class Absent:
        # Wraps a finder so a blocked module is found by none: import raises ModuleNotFoundError and
        # importlib.util.find_spec returns None, as where the package is not installed.
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                return None
            return self.inner.find_spec(name, path, target)

        def invalidate_caches(self):
            getattr(self.inner, "invalidate_caches", lambda: None)()

    sys.meta_path[:] = [
        Absent(f) for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")
    ]
    assert importlib.util.find_spec("recpipe") is None, "recpipe importable before the check sets its path"
    for dotted in filter(None, sys.argv[2].split(",")):
        owner, _, attr = dotted.rpartition(".")
        delattr(importlib.import_module(owner), attr)
    sys.argv = sys.argv[3:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


def run_check(tmp_path: Path, *args: str, drop: str = "", timeout: int = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    return subprocess.run(
        [sys.executable, "-c", RUNNER, ",".join(ABSENT), drop, str(CHECK), "--out", str(tmp_path), *args],
        cwd=tmp_path,  # not the repository: recpipe must come from the check's own sys.path entry
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``gpu_check.py --quick`` under torch alone: the process, its report and its output folder."""
    out = tmp_path_factory.mktemp("gpu_check")
    proc = run_check(out, "--quick", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((out / "gpu_check.json").read_text()), out


@pytest.mark.slow
def test_quick_prints_the_benchmarks_last_line(quick) -> None:
    proc, report, _ = quick
    assert report["status"] == "ok" and report["environment"]["numpy"] is None  # blocked: ran without it
    assert report["args"]["device"] == "cpu" and report["args"]["tiny"] is True
    last = assert_last_line("gpu_check", proc.stdout, text_keys={"status"})
    assert "status=ok" in last and "aoti_ok=2 aoti_models=2" in last


@pytest.mark.slow
def test_the_din_section_times_both_formulations(quick) -> None:
    _, report, out = quick
    din = report["sections"]["din"]
    assert sorted(din) == sorted(
        f"{d}_{s}_b32" for d in ("fp32", "bf16") for s in ("mean4", "mean20", "all100")
    )
    for key, entry in din.items():
        assert entry["batch_size"] == 32
        assert set(entry["median_s"]) >= {"jagged", "padded"}
        assert entry["speedup_fwd"] > 0 and entry["speedup_fwd_bwd"] > 0
        # The same function in both formulations: fp32 to rounding, bf16 to its 8-bit mantissa.
        assert entry["max_abs_diff_vs_padded"] <= (1e-4 if key.startswith("fp32") else 0.1), key
        assert entry["status"] == "ok", key
    assert {"jagged_folded", "jagged_per_row", "jagged_concat"} <= set(din["fp32_mean4_b32"]["median_s"])
    assert din["fp32_all100_b32"]["history_mean"] == 100.0
    log = (out / "gpu_check.log").read_text()
    assert "fp32 B=   32 mean4" in log and "speedup fwd" in log  # din_attention.py's printed line


@pytest.mark.slow
def test_aoti_exports_both_dense_archs_with_torch_alone(quick) -> None:
    _, report, out = quick
    aoti = report["sections"]["aoti"]
    assert sorted(aoti) == ["dlrm", "multi_tower_din"]
    for name, entry in aoti.items():
        assert entry["status"] == "ok" and entry["compile_s"] > 0 and entry["package_mib"] > 0, name
        assert sorted(entry["batches"]) == ["b1", "b32", "b8"]
        for b in entry["batches"].values():
            assert b["parity_passed"] and b["max_abs_logit_diff"] <= 1e-4
            assert b["eager_p50_ms"] > 0 and b["aoti_p50_ms"] > 0
    assert (out / "gpu_check.log").read_text().count("aoti dlrm b") == 3


@pytest.mark.slow
def test_what_the_cpu_cannot_run_is_recorded_with_its_reason(quick) -> None:
    sections = quick[1]["sections"]
    assert sections["tensorrt"]["status"].startswith("not run: torch_tensorrt not installed")
    assert "3.7 MB" in sections["tensorrt"]["status"]
    not_run = sections["not_run"]
    assert set(not_run) == {
        "dmp_sharded_training_nccl",
        "fused_tbe_kernels",
        "aoti_full_model",
        "tensorrt_backend_export",
    }
    assert all(r.startswith("not run: torchrec, fbgemm_gpu") for r in not_run.values())


def test_refuses_a_torch_without_the_aoti_package_api(tmp_path: Path) -> None:
    proc = run_check(
        tmp_path, "--device", "cpu", "--tiny", drop="torch._inductor.aoti_compile_and_package", timeout=60
    )
    assert proc.returncode == 2
    assert "refusing to start" in proc.stdout and "aoti_compile_and_package" in proc.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["status"] == "refused"
    assert report["reasons"] == [
        f"torch {torch.__version__} lacks torch._inductor.aoti_compile_and_package (AOTInductor packages)"
    ]
    assert "sections" not in report


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_refuses_cuda_without_a_device(tmp_path: Path) -> None:
    proc = run_check(tmp_path, "--tiny", timeout=60)  # --device cuda is the default
    assert proc.returncode == 2
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["status"] == "refused"
    assert any("torch.cuda.is_available() is False" in r for r in report["reasons"])


def test_the_script_writes_into_out(tmp_path: Path) -> None:
    """scripts/gpu_check.sh as the device tool calls it: $OUT set, its report and log land there (the
    TensorRT section only: the compiles are the quick run's)."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    cmd = [str(ROOT / "scripts/gpu_check.sh"), "--device", "cpu", "--tiny", "--sections", "tensorrt"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["status"] == "ok" and sorted(report["sections"]) == ["not_run", "tensorrt"]
    assert "gpu_check: ok in" in (tmp_path / "gpu_check.log").read_text()
