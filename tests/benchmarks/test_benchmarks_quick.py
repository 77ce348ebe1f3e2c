"""Every benchmark script runs in its ``--quick`` mode (``benchmarks/_common.py``): the script's own code path
at tiny sizes, as ``python benchmarks/<name>.py --quick`` from the repository root. It must exit 0, print the
benchmark's last line (``<name>: key=value …``, numbers where the full run prints numbers) and leave the
recorded results in ``benchmarks/results/`` untouched.

The scripts are found by glob, so a new benchmark is run here too (and fails if it has no ``--quick``);
``ELSEWHERE`` names the quick runs another test file makes (with the same last-line check).
Those whose quick run takes more than about 10 s on 2 cores are marked slow (CI runs them too).

A quick run uses one thread, so the selected scripts run two at a time (the machine's cores), the longest
first, when the module's first test asks for their results: about half the wall time of one after another.
``serving`` and ``serving_load`` both serve the model of one pipeline run: the fixture makes it once with
their own :func:`serving.train_and_register` (the quick rows, gate and table cap) and passes it as ``--runs``."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from quick_line import assert_last_line

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "_common.py")
# Quick runs another test file makes and checks with the same last-line check, and why there.
ELSEWHERE = {
    "gpu_check": "tests/benchmarks/test_gpu_check.py: its dry run is the quick run, under torch alone",
    "retrieval": "tests/pipelines/test_pair_run.py: its quick run serves that module's pair run (--runs)",
}
BENCHMARKS = [p for p in SCRIPTS if p.stem not in ELSEWHERE]
RESULTS = ROOT / "benchmarks" / "results"
# The last line's keys whose values are words; every other value must be a finite number.
TEXT_KEYS = {"learnable_ceiling": {"kind", "task"}}
WORKERS = 2  # quick runs at once: each uses one thread
# Quick runs over ~10 s and what takes the time; wall seconds on the 2-core dev machine (2026-12-01), alone at
# load ~2 .. inside this test at load ~5. The other four take 4-5 s (4-10 s at load 5).
# Longest first (the order they start in).
SLOW = {
    "serving_load": "a real MLflow scoring server under load for 3 s, after the shared pipeline run",
    "serving": "a real MLflow scoring server and batch scoring, after the shared pipeline run",
    "quality": "17 1-epoch trainings on 5 generated data sets (44-89 s, more with the four cross models)",
    "export_latency": "every backend exported, the AOTInductor compile of the whole model (39-91 s)",
    "scaling": "three launches, two of them 2-rank torchrun (33-61 s)",
    "startup": "two `recpipe train` processes to their first step (30-53 s)",
    "peers": "five 1-epoch trainings, three in processes that import FuxiCTR (and ray) or DeepCTR-Torch, and the "
    "peers' pip install when ~/.cache/recpipe/peers lacks it (32-42 s; 48 s with the 13 s install)",
    "shuffle": "four 1-epoch trainings on rewritten splits (20-35 s)",
    "collisions": "two 1-epoch trainings (12-27 s)",
    "train_step": "two full-size MultiTowerDIN models under DMP, ~3 GB (10-17 s)",
    "train_e2e": "four 1-epoch trainings of the tiny DIN config (12 s)",
}


def _params() -> list:
    return [
        pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if path.stem in SLOW else [])
        for path in BENCHMARKS
    ]


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*")) if p.is_file()
    }


def test_every_benchmark_is_found() -> None:
    assert {"din_attention", "fg_throughput", "export_latency"} <= {p.stem for p in BENCHMARKS}
    assert set(SLOW) <= {p.stem for p in BENCHMARKS}, "SLOW names a benchmark that is gone"
    for name, why in ELSEWHERE.items():
        test_file = ROOT / why.partition(":")[0]
        assert (ROOT / "benchmarks" / f"{name}.py").is_file() and '"--quick"' in test_file.read_text(), why


# The scripts that serve the model of a `recpipe run`, given as --runs; the rows and gate of their --quick.
SERVED = ("serving", "serving_load")
SERVED_ROWS, SERVED_MIN_AUC = 20_000, 0.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}  # gpu_check.py writes into $OUT when set
    env["PYTHONPATH"] = str(ROOT)
    return env


def _train_served(work: Path) -> Path:
    """One pipeline run for the SERVED scripts, by their own ``serving.train_and_register``."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'benchmarks'); "
        "from serving import QUICK_TABLE_CAP, train_and_register; "
        f"train_and_register(Path(sys.argv[1]), {SERVED_ROWS}, {SERVED_MIN_AUC}, QUICK_TABLE_CAP)"
    )
    subprocess.run([sys.executable, "-c", code, str(work)], cwd=ROOT, env=_env(), check=True, timeout=600)
    return work / "runs"


def _run_quick(script: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script.relative_to(ROOT)), "--quick", *extra],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def quick_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, subprocess.CompletedProcess], bool]:
    """Every selected script's quick run (``WORKERS`` at a time, slow ones first), and whether
    ``benchmarks/results/`` was left as it was."""
    selected = sorted(
        {
            item.callspec.params["script"]
            for item in request.session.items
            if hasattr(item, "callspec") and item.originalname == "test_quick_mode_prints_the_last_line"
        },
        key=lambda path: (list(SLOW).index(path.stem) if path.stem in SLOW else len(SLOW), path.stem),
    )
    served = [p for p in selected if p.stem in SERVED]
    recorded = _digests(RESULTS)
    with ThreadPoolExecutor(WORKERS) as pool:
        trained = pool.submit(_train_served, tmp_path_factory.mktemp("served")) if served else None
        futures = {p.stem: pool.submit(_run_quick, p) for p in selected if p not in served}
        if trained is not None:  # the others go on in the other thread meanwhile
            runs_dir = trained.result()
            futures.update({p.stem: pool.submit(_run_quick, p, "--runs", str(runs_dir)) for p in served})
        runs = {name: future.result() for name, future in futures.items()}
    return runs, _digests(RESULTS) == recorded


@pytest.mark.parametrize("script", _params())
def test_quick_mode_prints_the_last_line(
    script: Path, quick_runs: tuple[dict[str, subprocess.CompletedProcess], bool]
) -> None:
    name = script.stem
    proc = quick_runs[0][name]
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert_last_line(name, proc.stdout, TEXT_KEYS.get(name, set()))
    assert quick_runs[1], "a --quick run changed benchmarks/results/"
