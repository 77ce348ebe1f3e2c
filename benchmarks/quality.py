"""Model quality against the oracle: MultiTowerDIN on generated Taobao data, DLRM on generated Criteo.

The generators know every row's true click probability (``true_prob``), so the best AUC any model can
reach on the eval rows, the oracle AUC, is known. Each model is trained in this process (a 1-rank gloo
group, the trainer of ``recpipe.train.loop``) on the ``train/`` split that ``ingest`` writes and is
evaluated on its ``eval/`` split: Taobao's last day, Criteo's hashed 10%. Training reads only the
configured features, never ``true_prob``; the oracle AUC is ``ingest``'s AUC of ``true_prob`` on the
same eval rows.

Configs: ``configs/din_taobao_quality.yaml`` and ``configs/dlrm_criteo_quality.yaml`` (the small
configs' features and models; batch 1024 and learning rates tuned for one pass). One epoch, because a
second pass over the same rows memorizes the per-id embeddings and the eval AUC falls (both models).

The DIN tower is ablated by the same MultiTowerDIN with the history mean-pooled
(``attention: mean_pool``). Besides the headline runs, smaller runs give the AUC and gap against data
size (``rows_curve``), and every run evaluates a few times during its epoch (``curve``: AUC against
rows trained). On Taobao the catalogue grows with the rows (a user per 12 rows, an ad per 25), so more
rows do not mean more impressions per id and the gap barely moves with size; on Criteo the
vocabularies are fixed and the gap shrinks with rows.

Run: ``.venv/bin/python benchmarks/quality.py`` (about 15 minutes on 2 shared cores: ~6.5 for the
DIN runs, ~7 for DLRM). The last line is
``quality: din_auc=… din_oracle_auc=… dlrm_auc=… dlrm_oracle_auc=…``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.stages import ingest
from recpipe.train.loop import METRICS_FILE, train

ROOT = Path(__file__).resolve().parent.parent
DIN_CONFIG = ROOT / "configs" / "din_taobao_quality.yaml"
DLRM_CONFIG = ROOT / "configs" / "dlrm_criteo_quality.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "quality.json"
TARGET_GAP = 0.01
SUMMARY_KEYS = ("din_auc", "din_oracle_auc", "dlrm_auc", "dlrm_oracle_auc")


def prepare(kind: str, rows: int, out: Path, config: Path, seed: int) -> ingest.IngestResult:
    """Generate ``rows`` rows of ``kind`` into ``out`` and split them as the config's ``data.split`` says."""
    cfg = load_config(config)
    result = ingest.run(
        f"synthetic:{kind}?rows={rows}&seed={seed}",
        out,
        label=cfg.data.label,
        split=cfg.data.split,
        oracle_column=cfg.data.oracle_column,
    )
    shutil.rmtree(out / "raw", ignore_errors=True)  # the generator's unsplit copy
    return result


def train_and_evaluate(
    config: Path,
    data: ingest.IngestResult,
    out: Path,
    evals: int,
    epochs: int | None = None,
    attention: str | None = None,
    train_seed: int = 0,
) -> dict[str, Any]:
    """Train ``config`` on ``data``'s train split and evaluate on its eval split.

    Args:
        config (Path): the model's config.
        data (IngestResult): the splits.
        out (Path): the trainer's output folder (metrics, the final checkpoint).
        evals (int): evaluations per epoch (the last one is the final evaluation).
        epochs (int | None): overrides ``train.epochs``.
        attention (str | None): replaces every DIN tower's ``attention`` (``"mean_pool"`` for the ablation).
        train_seed (int): ``train.seed`` (the initial weights; the row order is fixed by the data).

    Returns:
        dict: eval AUC, GAUC, logloss, rows, steps, seconds, and ``curve`` (eval AUC against rows trained).
    """
    cfg = load_config(config)
    steps_per_epoch = -(-data.train_rows // cfg.data.batch_size)
    overrides: dict[str, Any] = {
        # the last of ``evals`` evaluations per epoch is the final one, after the loop
        "train.eval_every_steps": max(1, -(-steps_per_epoch // max(evals, 1))),
        "train.seed": train_seed,
        "train.log_every_steps": 100,
        "train.checkpoint_every_steps": None,  # the final one only
    }
    if epochs is not None:
        overrides["train.epochs"] = epochs
    cfg = load_config(config, overrides)
    if attention is not None:
        for tower in cfg.model.din_towers:
            tower.attention = attention
    spec = build_feature_spec(cfg)  # ids by modulo/hash, explicit boundaries: nothing to fit
    t0 = time.perf_counter()
    result = train(cfg, spec, data.train_dir, data.eval_dir, out, resume=False)
    wall = time.perf_counter() - t0
    if result.eval is None:
        raise RuntimeError(f"training {config} returned no evaluation")
    records = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    curve = [
        {
            "step": r["step"],
            "rows_trained": min(r["step"] * cfg.data.batch_size, result.rows_trained),
            "auc": r["eval_auc"],
            "logloss": r["eval_logloss"],
        }
        for r in records
        if "eval_auc" in r
    ]
    return {
        "auc": result.eval["auc"],
        "gauc": result.eval.get("gauc"),
        "logloss": result.eval["logloss"],
        "eval_rows": result.eval["rows"],
        "train_rows": data.train_rows,
        "epochs": result.epochs_completed,
        "steps": result.steps,
        "batch_size": cfg.data.batch_size,
        "train_s": round(result.seconds, 1),
        "wall_s": round(wall, 1),
        "rows_per_s": round(result.rows_per_second),
        "curve": curve,
    }


def run_model(
    name: str,
    kind: str,
    config: Path,
    rows: int,
    seed: int,
    tmp: Path,
    evals: int,
    epochs: int | None = None,
    attentions: tuple[str | None, ...] = (None,),
    train_seeds: tuple[int, ...] = (0,),
) -> dict[str, Any]:
    """Generate and split ``rows`` rows, then train and evaluate each of ``attentions`` with each of
    ``train_seeds`` (alternating, so changes in machine load hit all alike). ``runs`` holds the first
    seed's runs in full, ``seed_aucs`` every seed's AUC."""
    t0 = time.perf_counter()
    data_dir = tmp / f"{name}-{rows}-data"
    data = prepare(kind, rows, data_dir, config, seed)
    prepare_s = time.perf_counter() - t0
    if data.oracle_auc is None:
        raise RuntimeError(f"{kind} data has no oracle column")
    print(
        f"{name}: {rows:,} rows of {kind} -> {data.train_rows:,} train / {data.eval_rows:,} eval, "
        f"oracle AUC {data.oracle_auc:.4f} (generated and split in {prepare_s:.0f}s)",
        flush=True,
    )
    report: dict[str, Any] = {
        "kind": kind,
        "config": str(config.relative_to(ROOT)),
        "rows": rows,
        "train_rows": data.train_rows,
        "eval_rows": data.eval_rows,
        "seed": seed,
        "oracle_auc": data.oracle_auc,
        "prepare_s": round(prepare_s, 1),
        "runs": {},
        "seed_aucs": {},
    }
    for train_seed in train_seeds:
        for attention in attentions:
            label = attention or "default"
            out = tmp / f"{name}-{rows}-{label}-{train_seed}"
            r = train_and_evaluate(config, data, out, evals, epochs, attention, train_seed)
            shutil.rmtree(out, ignore_errors=True)
            r["gap"] = data.oracle_auc - r["auc"]
            report["runs"].setdefault(label, r)
            report["seed_aucs"].setdefault(label, {})[str(train_seed)] = r["auc"]
            curve = " ".join(f"{c['rows_trained'] / 1e6:.2f}M:{c['auc']:.4f}" for c in r["curve"])
            print(
                f"{name} [{label}, seed {train_seed}]: AUC {r['auc']:.4f} (oracle {data.oracle_auc:.4f}, "
                f"gap {r['gap']:.4f}); {r['epochs']} epoch of {r['train_rows']:,} rows in {r['train_s']:.0f}s "
                f"({r['rows_per_s']:,} rows/s); eval AUC by rows trained: {curve}",
                flush=True,
            )
    shutil.rmtree(data_dir, ignore_errors=True)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def rows_curve(
    name: str, kind: str, config: Path, sizes: list[int], seed: int, tmp: Path
) -> list[dict[str, Any]]:
    """AUC, oracle AUC and gap of one run per data size (one evaluation each)."""
    points = []
    for rows in sizes:
        r = run_model(f"{name}-curve", kind, config, rows, seed, tmp, evals=1)
        run = r["runs"]["default"]
        points.append(
            {
                "rows": rows,
                "train_rows": r["train_rows"],
                "oracle_auc": r["oracle_auc"],
                "auc": run["auc"],
                "gap": run["gap"],
                "train_s": run["train_s"],
            }
        )
    return points


def _sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taobao-rows", type=int, default=2_000_000)
    parser.add_argument("--criteo-rows", type=int, default=12_000_000)
    parser.add_argument(
        "--ablation-seeds", type=int, default=3, help="training seeds of DIN and of the mean-pool ablation"
    )
    parser.add_argument("--epochs", type=int, default=None, help="override train.epochs (default: config)")
    parser.add_argument("--evals", type=int, default=4, help="evaluations per epoch of the headline runs")
    parser.add_argument("--taobao-curve", type=_sizes, default=_sizes("250000,1000000"))
    parser.add_argument("--criteo-curve", type=_sizes, default=_sizes("500000,2000000"))
    parser.add_argument("--no-curve", action="store_true", help="skip the smaller runs of rows_curve")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--only", choices=["din", "dlrm"], default=None, help="run one model only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    report: dict[str, Any] = {"benchmark": "quality", "target_gap": TARGET_GAP}
    with tempfile.TemporaryDirectory(prefix="recpipe-quality-") as tmp_dir:
        tmp = Path(tmp_dir)
        if args.only in (None, "din"):
            din = run_model(
                "din", "taobao", DIN_CONFIG, args.taobao_rows, args.seed, tmp, args.evals, args.epochs,
                attentions=(None, "mean_pool"), train_seeds=tuple(range(args.ablation_seeds)),
            )  # fmt: skip
            if not args.no_curve:
                din["rows_curve"] = rows_curve("din", "taobao", DIN_CONFIG, args.taobao_curve, args.seed, tmp)
            report["din"] = din
        if args.only in (None, "dlrm"):
            dlrm = run_model(
                "dlrm", "criteo", DLRM_CONFIG, args.criteo_rows, args.seed, tmp, args.evals, args.epochs
            )
            if not args.no_curve:
                dlrm["rows_curve"] = rows_curve(
                    "dlrm", "criteo", DLRM_CONFIG, args.criteo_curve, args.seed, tmp
                )
            report["dlrm"] = dlrm

    summary: dict[str, Any] = {}
    if "din" in report:
        din, runs = report["din"], report["din"]["runs"]
        by_seed = din["seed_aucs"]
        diffs = [by_seed["default"][s] - by_seed["mean_pool"][s] for s in by_seed["default"]]
        summary.update(
            din_auc=runs["default"]["auc"],
            din_oracle_auc=din["oracle_auc"],
            din_gap=runs["default"]["gap"],
            din_meanpool_auc=runs["mean_pool"]["auc"],
            din_within_target=runs["default"]["gap"] <= TARGET_GAP,
            din_minus_meanpool_by_seed=diffs,
            din_minus_meanpool_mean=statistics.fmean(diffs),
            din_minus_meanpool_sd=statistics.stdev(diffs) if len(diffs) > 1 else None,
            din_beats_meanpool_seeds=f"{sum(d > 0 for d in diffs)}/{len(diffs)}",
        )
        sd = summary["din_minus_meanpool_sd"]
        print(
            f"ablation: din_auc={summary['din_auc']:.4f} din_meanpool_auc={summary['din_meanpool_auc']:.4f} "
            f"(seed 0); DIN - mean pool over {len(diffs)} seeds: {summary['din_minus_meanpool_mean']:+.4f}"
            + (f" ± {sd:.4f} (sd)" if sd is not None else "")
            + f", DIN ahead in {summary['din_beats_meanpool_seeds']}"
        )
    if "dlrm" in report:
        run = report["dlrm"]["runs"]["default"]
        summary.update(
            dlrm_auc=run["auc"],
            dlrm_oracle_auc=report["dlrm"]["oracle_auc"],
            dlrm_gap=run["gap"],
            dlrm_within_target=run["gap"] <= TARGET_GAP,
        )
    for name in ("din", "dlrm"):
        if f"{name}_gap" in summary:
            print(f"{name}: gap to oracle {summary[f'{name}_gap']:.4f} (target <= {TARGET_GAP})")
    report["summary"] = summary
    report["environment"] = {
        "torch": torch.__version__,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_avg_end": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("quality: " + " ".join(f"{k}={summary[k]:.4f}" for k in SUMMARY_KEYS if k in summary))


if __name__ == "__main__":
    main()
