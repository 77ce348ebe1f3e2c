"""Seconds from ``recpipe train`` to its first training step, for a 1-process train on 1,000 rows, on this
tree and on the commit before issue 17's changes, in the same run.

The data (generated Criteo rows split into train/eval Parquet, a fitted ``fg.json``) is prepared once with
this tree's library; both trees then run exactly ``python -m recpipe.cli.main train --config
configs/dlrm_criteo_small.yaml … --set data.batch_size=256 --set train.max_steps=2`` with ``PYTHONPATH``
pointing at their own tree (the "before" tree is a ``git worktree`` of ``--before``, removed afterwards).
The clock stops at the first progress frame that counts a finished step (``| 1/…``). The runs alternate
(before, this tree, before, …) so machine load hits both alike; the medians are reported. For this tree the
phases are timed from its console lines: worker up (imports, process group) → planner → sharding → first
step.

Run: ``.venv/bin/python benchmarks/startup.py`` (about 2 minutes on 2 cores). Last line:
``startup: train_first_step_s=… train_first_step_s_before=…``.

``--quick`` (about 15 s): one run of each side, and the "before" side is this tree itself (``--before ''``):
no ``git worktree`` is added, so a quick run neither needs the old commit nor registers a worktree in the
repository; the data preparation, the two timed ``recpipe train`` runs and the phase parsing are the full
run's. Its JSON goes to a temp folder (``benchmarks/_common.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import host_cpu, parse_args, quick_out

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "startup.json"
CONFIG = "configs/dlrm_criteo_small.yaml"
# The last commit before issue 17's changes (one plain process already, no torchrun, for world size 1).
BEFORE = "6978580"
FIRST_STEP = re.compile(rb"\|\s*[1-9]\d*/\d+ ")
# Console lines that end each phase of this tree's worker (see recpipe.train.loop).
PHASES = {
    "worker_up_s": rb"embedding memory",
    "planner_s": rb"sharding plan for",
    "sharding_s": rb"step\(s\) of",
}


def prepare(folder: Path, rows: int) -> dict[str, str]:
    """Generated Criteo rows as train/eval Parquet splits and their fitted ``fg.json``."""
    from recpipe.config import SplitConfig
    from recpipe.stages import fit, ingest

    r = ingest.run(f"synthetic:criteo?rows={rows}", folder / "data", "label", SplitConfig(eval_fraction=0.2))
    fg = fit.run(ROOT / CONFIG, r.train_dir, folder / "data" / "fg.json")
    return {"train": r.train_dir, "eval": r.eval_dir, "fg": fg.fg_json}


def first_step(tree: Path, data: dict[str, str], out: Path) -> tuple[float, dict[str, float]]:
    """Seconds to the first finished step of ``recpipe train`` run from ``tree``, and when each phase ended."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "recpipe.cli.main", "train", "--config", str(tree / CONFIG),
           "--train", data["train"], "--eval", data["eval"], "--fg", data["fg"], "--out", str(out),
           "--set", "data.batch_size=256", "--set", "train.max_steps=2"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree), "RECPIPE_LOG_DIR": str(out.parent / "logs")}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    seen, marks, took = b"", {}, None
    while took is None:
        chunk = proc.stdout.read1(65536)
        if not chunk:
            break
        seen += chunk
        now = time.perf_counter() - t0
        for name, pattern in PHASES.items():
            if name not in marks and re.search(pattern, seen):
                marks[name] = now
        if FIRST_STEP.search(seen):
            took = now
    proc.stdout.read()  # let it finish (checkpoint, exit) so the next run starts on a quiet machine
    if proc.wait() != 0 or took is None:
        raise RuntimeError(f"train from {tree} failed:\n{seen.decode(errors='replace')[-3000:]}")
    return took, marks


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--before", default=BEFORE, help="commit to compare with (default: before issue 17; '': this tree)"
    )
    p.add_argument("--repeats", type=int, default=3, help="runs of each tree (alternating)")
    p.add_argument("--rows", type=int, default=1000, help="generated rows (80%% train)")
    p.add_argument("--out", type=Path, default=RESULTS, help="the JSON results file")
    a = parse_args(p, {"before": "", "repeats": 1, "out": quick_out(RESULTS.name)})
    work = Path(tempfile.mkdtemp(prefix="recpipe-startup-"))
    before = work / "before" if a.before else ROOT
    if a.before:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), a.before],
                       check=True, capture_output=True)  # fmt: skip
    try:
        data = prepare(work, a.rows)
        loads, times = [load()], {"before": [], "after": []}
        phases: list[dict[str, float]] = []
        for _ in range(a.repeats):
            for name, tree in (("before", before), ("after", ROOT)):
                took, marks = first_step(tree, data, work / f"out-{name}")
                times[name].append(round(took, 2))
                loads.append(load())
                if name == "after":
                    phases.append(marks)
    finally:
        if a.before:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
    after, prior = statistics.median(times["after"]), statistics.median(times["before"])
    # Phase lengths of this tree's median-length run: each phase ends where the next begins.
    marks = sorted(phases, key=lambda m: m.get("sharding_s", 0.0))[len(phases) // 2]
    ends = [marks.get(k, float("nan")) for k in PHASES] + [after]
    lengths = {k: round(e - s, 2) for k, s, e in zip([*PHASES, "first_step_s"], [0.0, *ends], ends)}
    result = {
        "rows": a.rows,
        "config": CONFIG,
        "before": a.before or "this tree",
        "train_first_step_s": after,
        "train_first_step_s_before": prior,
        "runs": times,
        "phases_after": lengths,
        "load_1min": loads,
        "cpus": os.cpu_count(),
        "cpu": host_cpu(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"runs (s): before {times['before']}, this tree {times['after']}; load {loads}")
    print("phases of this tree (s): " + ", ".join(f"{k}={v}" for k, v in lengths.items()))
    print(f"startup: train_first_step_s={after:.2f} train_first_step_s_before={prior:.2f}")


if __name__ == "__main__":
    main()
