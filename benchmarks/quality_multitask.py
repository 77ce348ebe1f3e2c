"""Multi-task quality against each task's oracle: MMoE, DBMTL and PLE on generated Taobao data with two labels,
click (``clk``) and buy (``buy``: only after a click, ~12% of clicks, ~0.6% of rows), against two single-task
MultiTowerDINs (one trained on ``clk``, one on ``buy``).

The generator knows both true probabilities (``true_prob``, ``true_buy_prob``), so each task's oracle AUC on
the eval rows is known. The catalogue is dense (``users=4000&ads=2000``, as in ``benchmarks/quality.py``) so
the per-id effects can be learnt from the rows trained. ``configs/dbmtl_taobao_quality.yaml`` is the DBMTL;
MMoE and PLE take the same towers (the deep tower and the DIN tower over ``click_50_seq``) and task towers
under their own head (3 experts of 64; PLE: 2 layers of 2 shared + 2 per-task experts of 64). The single-task
models are ``configs/din_taobao_quality.yaml`` with ``data.label`` ``clk`` or ``buy``. One epoch each, one
thread, in this process (a 1-rank gloo group, the trainer of ``recpipe.train.loop``).

Run: ``.venv/bin/python benchmarks/quality_multitask.py`` (about 4 minutes per model at the default 2M rows
on 2 idle cores). The last line is ``quality_multitask: <model>_<label>_auc=… <label>_oracle_auc=… …``; the
JSON is ``benchmarks/results/quality_multitask.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch
import yaml
from quality import prepare

from recpipe.auc import binary_auc
from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.train.loop import train

ROOT = Path(__file__).resolve().parent.parent
DBMTL_CONFIG = ROOT / "configs" / "dbmtl_taobao_quality.yaml"
DIN_CONFIG = ROOT / "configs" / "din_taobao_quality.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "quality_multitask.json"
TARGET_GAP = 0.01
LABELS = {"clk": "true_prob", "buy": "true_buy_prob"}  # label column → its true probability
EXPERT = {"hidden_units": [64]}
HEADS: dict[str, dict[str, Any]] = {
    "mmoe": {"expert_mlp": EXPERT, "num_experts": 3},
    "ple": {
        "extraction_networks": [
            {"network_name": f"layer{i}", "expert_num_per_task": 2, "share_num": 2,
             "task_expert_net": EXPERT, "share_expert_net": EXPERT}
            for i in (1, 2)
        ]
    },
}  # fmt: skip
MODELS = ("dbmtl", "mmoe", "ple", "single_clk", "single_buy")


def config_of(model: str) -> dict[str, Any]:
    """The raw config of ``model``: the DBMTL config, its towers under an MMoE / PLE head, or the
    single-task DIN config on one label."""
    if model.startswith("single_"):
        data = yaml.safe_load(DIN_CONFIG.read_text())
        data["data"]["label"] = model.removeprefix("single_")
        data["data"]["oracle_column"] = LABELS[data["data"]["label"]]
        return data
    data = yaml.safe_load(DBMTL_CONFIG.read_text())
    if model != "dbmtl":
        m = data["model"]
        towers = [{k: v for k, v in t.items() if not k.startswith("relation")} for t in m["task_towers"]]
        data["model"] = {"type": model, "towers": m["towers"], "din_towers": m["din_towers"],
                         "task_towers": towers, **HEADS[model]}  # fmt: skip
    return data


def oracle_aucs(eval_dir: str) -> dict[str, float]:
    """Each label's oracle AUC on the eval rows (its true probability against the drawn label)."""
    table = pq.read_table(eval_dir, columns=[*LABELS, *LABELS.values()])
    return {
        label: binary_auc(table[label].to_numpy(), table[truth].to_numpy()) for label, truth in LABELS.items()
    }


def run(model: str, data: Any, out: Path, evals: int) -> dict[str, Any]:
    """Train ``model`` one epoch on the train split; its eval AUC, GAUC and logloss per label."""
    raw = config_of(model)
    cfg = parse_config(raw)
    steps = -(-data.train_rows // cfg.data.batch_size)
    raw["train"].update(
        eval_every_steps=max(1, -(-steps // evals)), log_every_steps=100, checkpoint_every_steps=None
    )
    cfg = parse_config(raw)
    t0 = time.perf_counter()
    result = train(cfg, build_feature_spec(cfg), data.train_dir, data.eval_dir, out, resume=False)
    tasks = result.eval.get("tasks") or {cfg.data.label: result.eval}
    return {
        "tasks": {
            label: {k: m[k] for k in ("auc", "gauc", "logloss", "positive_rate")}
            for label, m in tasks.items()
        },
        "steps": result.steps,
        "train_s": round(result.seconds, 1),
        "wall_s": round(time.perf_counter() - t0, 1),
        "rows_per_s": round(result.rows_per_second),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--catalogue", default="users=4000&ads=2000", help="synthetic:taobao options")
    parser.add_argument("--only", default=None, help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--evals", type=int, default=2, help="evaluations per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    only = MODELS if args.only is None else tuple(m.strip() for m in args.only.split(","))
    if unknown := [m for m in only if m not in MODELS]:
        parser.error(f"--only: unknown models {unknown}; choose from {', '.join(MODELS)}")
    torch.set_num_threads(args.threads)
    load_start, started = list(os.getloadavg()), time.perf_counter()
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.only and args.out.exists() else {}
    report.update(
        benchmark="quality_multitask", target_gap=TARGET_GAP, rows=args.rows, catalogue=args.catalogue
    )
    with tempfile.TemporaryDirectory(prefix="recpipe-quality-mt-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = prepare("taobao", args.rows, args.catalogue, tmp / "data", DBMTL_CONFIG, args.seed)
        oracle = oracle_aucs(data.eval_dir)
        report["oracle_auc"] = oracle
        print(f"{args.rows:,} rows -> {data.train_rows:,} train / {data.eval_rows:,} eval; oracle AUC "
              + ", ".join(f"{k} {v:.4f}" for k, v in oracle.items()), flush=True)  # fmt: skip
        for model in only:
            r = run(model, data, tmp / model, args.evals)
            for label, m in r["tasks"].items():
                m["gap"] = oracle[label] - m["auc"]
            report.setdefault("models", {})[model] = r
            print(f"{model}: " + ", ".join(f"{k} AUC {m['auc']:.4f} (gap {m['gap']:.4f})" for k, m in r["tasks"].items())
                  + f"; {r['train_s']:.0f}s ({r['rows_per_s']:,} rows/s)", flush=True)  # fmt: skip
    models = report.get("models", {})
    summary: dict[str, float] = {f"{label}_oracle_auc": v for label, v in report["oracle_auc"].items()}
    for model, r in models.items():
        summary.update({f"{model}_{label}_auc": m["auc"] for label, m in r["tasks"].items()})
    if "single_buy" in models:
        single = models["single_buy"]["tasks"]["buy"]["auc"]
        report["buy_vs_single_task"] = {
            m: models[m]["tasks"]["buy"]["auc"] - single for m in ("dbmtl", "mmoe", "ple") if m in models
        }
    report["summary"] = summary
    report["environment"] = {
        "torch": torch.__version__, "threads": args.threads, "cpus": os.cpu_count(), "machine": platform.machine(),
        "python": platform.python_version(), "load_avg_start": load_start, "load_avg_end": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for m, d in report.get("buy_vs_single_task", {}).items():
        print(f"{m}: buy AUC {d:+.4f} vs the single-task buy model")
    print("quality_multitask: " + " ".join(f"{k}={v:.4f}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
