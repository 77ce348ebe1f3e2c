"""Model quality against the oracle: MultiTowerDIN on generated Taobao data; DLRM, DeepFM, WideAndDeep,
MultiTower, DCNv2, DCNv1, MaskNet and xDeepFM on generated Criteo; the multi-task MMoE, DBMTL and PLE on Taobao's two labels.

The generators know every row's true click probability (``true_prob``), so the best AUC any model can
reach on the eval rows, the oracle AUC, is known. Each model is trained in this process (a 1-rank gloo
group, the trainer of ``recpipe.train.loop``) on the ``train/`` split that ``ingest`` writes and is
evaluated on its ``eval/`` split: Taobao's last day, Criteo's hashed 10%. Training reads only the
configured features, never ``true_prob``; the oracle AUC is ``ingest``'s AUC of ``true_prob`` on the
same eval rows.

Data density. The oracle knows every id's random effect (each user's, ad's and category's logit
offset; each Criteo value's). At the public Taobao dataset's density (a user per 12 rows, an ad per
25: what ``synthetic:taobao`` generates by default) a user is seen ~12 times with less than one click,
so no model can estimate its effect: at 2M rows an estimate of every effect from the training rows
that knows the click model's form and priors (``benchmarks/learnable_ceiling.py``) reaches 0.727 against an
oracle of 0.771. The oracle target
(within 0.01) is therefore measured on a catalogue dense enough for the effects to be learnable
from the rows trained (``--taobao-catalogue``, default ``users=4000&ads=2000``: ~1,750 impressions per
user at 8M rows, where the same estimate comes within 0.002 of the oracle), and Criteo's vocabularies
are capped (``--criteo-vocab``, default 10,000 values per column). The default-density run is reported
too (``din.default_density``), so the gap that comes from the data rather than from the model stays
visible.

Configs: ``configs/din_taobao_quality.yaml`` and ``configs/<model>_criteo_quality.yaml`` (the small
configs' features and models; batch 1024 and learning rates tuned for one pass; DIN with unnormalized
sigmoid attention weights, ``weighting: sigmoid``). One epoch, because a second pass over the same
rows memorizes the per-id embeddings and the eval AUC falls. The Criteo models share the generated data
of one set of options per run. Each model is measured on data it fits: MultiTower on Criteo (Taobao's
click model has a history term that only a model reading the click sequence, DIN, can see);
WideAndDeep and MultiTower on Criteo without the pair effects (``pairs=0``; an MLP over concatenated
embeddings learns the products of two columns' latent vectors slowly), DLRM, DeepFM and the cross models
(DCNv2, DCNv1, MaskNet, xDeepFM: ``configs/<model>_criteo_quality.yaml``, one group of every column, or
xDeepFM's wide and deep groups) with them.

Multi-task (``dbmtl``, ``mmoe``, ``ple``, and the single-task baselines ``single_clk`` and ``single_buy``):
the DIN run's Taobao rows, whose ``buy`` label (only after a click, ~12% of clicks) has its own oracle
(``true_buy_prob``), so each task's gap is measured. ``configs/dbmtl_taobao_quality.yaml`` is the DBMTL;
MMoE and PLE take the same towers (the deep tower and the DIN tower over ``click_50_seq``) and task towers
under their own head (3 experts of 64; PLE: 2 layers of 2 shared + 2 per-task experts of 64). The
single-task models are ``configs/din_taobao_quality.yaml`` on ``clk`` (the DIN run itself, when it runs
too) or on ``buy``. ``buy_vs_single_task``
is each head's buy AUC minus the single-task buy model's.

The DIN tower is ablated by the same MultiTowerDIN with the history mean-pooled
(``attention: mean_pool``) over ``--ablation-seeds`` training seeds on a smaller sample of the same
catalogue (``--ablation-rows``), where TorchEasyRec's softmax-normalized attention (``weighting:
softmax``) is trained too. Every run evaluates a few times during its epoch
(``curve``: AUC against rows trained).

Run: ``.venv/bin/python benchmarks/quality.py`` (about 12 minutes for DIN and for each multi-task
model, 10 for each Criteo model, on 2 idle cores; ``--only deepfm,wide_and_deep`` runs those, keeping the others'
results in ``--out``). The last line is ``quality: din_auc=… din_oracle_auc=… dlrm_auc=… … clk_oracle_auc=…
buy_oracle_auc=… dbmtl_clk_auc=… dbmtl_buy_auc=… …``.

``--quick``: every model and run of the full benchmark (DIN, its ablation with one training seed, the
default-density run, the multi-task models, the eight Criteo models) on 6,000 generated rows (4,000 for the
ablation and the default-density run), one evaluation per epoch, every table capped at 20,000 rows
(``--table-cap``) and no checkpoint written (none of the runs needs one); AUCs at that size mean nothing.
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

import pyarrow.parquet as pq
import torch
import yaml
from _common import host_cpu, parse_args, quick_out

from recpipe.auc import binary_auc
from recpipe.config import load_config
from recpipe.config.caps import cap_tables
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.stages import ingest
from recpipe.train.loop import METRICS_FILE

ROOT = Path(__file__).resolve().parent.parent
DIN_CONFIG = ROOT / "configs" / "din_taobao_quality.yaml"
DLRM_CONFIG = ROOT / "configs" / "dlrm_criteo_quality.yaml"
# The models trained on generated Criteo: each one's config, the generator options of the data it fits and
# its rows (None: ``--criteo-rows``). DLRM's dot products and DeepFM's FM term model the click model's
# low-rank pair effects; WideAndDeep and MultiTower (MLPs over concatenated embeddings) are measured on the
# same rows without them (pairs=0). DeepFM learns the pair effects more slowly than DLRM (at 12M rows it was
# still gaining 0.002 per 2.7M rows, 0.0100-0.0108 from the oracle): it is measured on 16M rows.
# (DeepFM on a factorization machine's pair effects over every column pair, pairs=2, did worse: RESULTS.md.)
CRITEO_MODELS: dict[str, tuple[Path, str, int | None]] = {
    "dlrm": (ROOT / "configs" / "dlrm_criteo_quality.yaml", "", None),
    "deepfm": (ROOT / "configs" / "deepfm_criteo_quality.yaml", "", 16_000_000),
    "wide_and_deep": (ROOT / "configs" / "wide_and_deep_criteo_quality.yaml", "pairs=0", None),
    "multi_tower": (ROOT / "configs" / "multi_tower_criteo_quality.yaml", "pairs=0", None),
    # The explicit-cross models (issue 29) on the pair-effect rows, as DLRM: DCNv2's and DCNv1's cross layers,
    # xDeepFM's CIN and MaskNet's multiplicative masks can express the products of two columns' vectors.
    # DCNv2 reads every column (DeepFM's FM term only the four that interact) and learns the pairs more slowly:
    # 0.0138 from the oracle at 12M rows, 0.0109 at 16M, 0.0105 at 20M with dense Adam 0.003; 0.0088 at 20M with
    # 0.001, its config's rate since 2026-12-04 (RESULTS.md): measured on 20M rows.
    "dcn_v2": (ROOT / "configs" / "dcn_v2_criteo_quality.yaml", "", 20_000_000),
    "dcn_v1": (ROOT / "configs" / "dcn_v1_criteo_quality.yaml", "", None),
    "mask_net": (ROOT / "configs" / "mask_net_criteo_quality.yaml", "", None),
    # xDeepFM's CIN (outer products of every map with every field) is slow on CPU: 2M rows (~5,000 rows/s).
    "xdeepfm": (ROOT / "configs" / "xdeepfm_criteo_quality.yaml", "", 2_000_000),
    # RocketLaunching (issue 29): the light net served, distilled from a booster trained beside it.
    "rocket_launching": (ROOT / "configs" / "rocket_launching_criteo_quality.yaml", "", None),
}
# Multi-task (issue 19) on the DIN run's Taobao rows: each label and its true probability, the DBMTL config
# (MMoE and PLE take its towers under their own head: ``multitask_config``) and the single-task baselines
# (the DIN config on one label).
TASKS = {"clk": "true_prob", "buy": "true_buy_prob"}
MULTITASK_CONFIG = ROOT / "configs" / "dbmtl_taobao_quality.yaml"
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
MULTITASK_MODELS = ("dbmtl", "mmoe", "ple", "single_clk", "single_buy")
MODELS = ("din", *CRITEO_MODELS, *MULTITASK_MODELS)
RESULTS = Path(__file__).resolve().parent / "results" / "quality.json"
TARGET_GAP = 0.01
CRITEO_ROWS = 12_000_000  # rows of every Criteo model that names none
SUMMARY_KEYS = (
    *(f"{m}_{k}" for m in ("din", *CRITEO_MODELS) for k in ("auc", "oracle_auc")),
    *(f"{label}_oracle_auc" for label in TASKS),
    *(f"{m}_{label}_auc" for m in MULTITASK_MODELS for label in TASKS),
)


def prepare(kind: str, rows: int, options: str, out: Path, config: Path, seed: int) -> ingest.IngestResult:
    """Generate ``rows`` rows of ``kind`` (generator ``options``, e.g. ``users=4000&ads=2000``) into
    ``out`` and split them as the config's ``data.split`` says."""
    cfg = load_config(config)
    uri = f"synthetic:{kind}?rows={rows}&seed={seed}" + (f"&{options}" if options else "")
    result = ingest.run(
        uri, out, label=cfg.data.label, split=cfg.data.split, oracle_column=cfg.data.oracle_column
    )
    shutil.rmtree(out / "raw", ignore_errors=True)  # the generator's unsplit copy
    return result


def shared_data(
    kind: str,
    rows: int,
    options: str,
    seed: int,
    tmp: Path,
    config: Path,
    shared: dict[str, ingest.IngestResult],
) -> ingest.IngestResult:
    """The split data of ``(kind, rows, options, seed)``, generated into ``tmp`` (split as ``config`` says)
    the first time it is asked for and kept in ``shared`` for the next model on the same rows."""
    key = f"{kind}-{rows}-{options}-{seed}"
    if key not in shared:
        shared[key] = prepare(kind, rows, options, tmp / key, config, seed)
    return shared[key]


def train_and_evaluate(
    config: Path,
    data: ingest.IngestResult,
    out: Path,
    evals: int,
    epochs: int | None = None,
    din: dict[str, str] | None = None,
    train_seed: int = 0,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``config`` on ``data``'s train split and evaluate on its eval split.

    Args:
        config (Path): the model's config.
        data (IngestResult): the splits.
        out (Path): the trainer's output folder (its metrics; no checkpoint is written).
        evals (int): evaluations per epoch (the last one is the final evaluation).
        epochs (int | None): overrides ``train.epochs``.
        din (dict | None): fields set on every DIN tower (``{"attention": "mean_pool"}`` for the ablation).
        train_seed (int): ``train.seed`` (the initial weights; the row order is fixed by the data).
        overrides (dict | None): more config overrides (``{"data.label": "buy"}``).

    Returns:
        dict: eval AUC, GAUC, logloss, rows, steps, seconds, ``curve`` (eval AUC against rows trained) and,
        for a multi-task model, ``tasks`` (each label's AUC, GAUC, logloss and positive rate).
    """
    cfg = load_config(config, overrides)
    steps_per_epoch = -(-data.train_rows // cfg.data.batch_size)
    overrides = {
        **(overrides or {}),
        # the last of ``evals`` evaluations per epoch is the final one, after the loop
        "train.eval_every_steps": max(1, -(-steps_per_epoch // max(evals, 1))),
        "train.seed": train_seed,
        "train.log_every_steps": 100,
        "train.checkpoint_every_steps": None,  # none mid-run, and none at the end (final_checkpoint=False)
        "train.checkpoint_every_seconds": None,
    }
    if epochs is not None:
        overrides["train.epochs"] = epochs
    cfg = cap_tables(load_config(config, overrides), TABLE_CAP)
    for tower in getattr(cfg.model, "din_towers", []):
        for field, value in (din or {}).items():
            setattr(tower, field, value)
    spec = build_feature_spec(cfg)  # ids by modulo/hash, explicit boundaries: nothing to fit
    t0 = time.perf_counter()
    result = train(cfg, spec, data.train_dir, data.eval_dir, out, resume=False, final_checkpoint=False)
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
    tasks = {
        label: {k: m[k] for k in ("auc", "gauc", "logloss", "positive_rate")}
        for label, m in (result.eval.get("tasks") or {}).items()
    }
    return {
        **({"tasks": tasks} if tasks else {}),
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


# --table-cap (quick runs): every table's rows capped; set once in main() before any training.
TABLE_CAP: int | None = None

Variant = tuple[str, dict[str, str]]  # a label and the DIN tower fields it sets
DEFAULT: Variant = ("default", {})
MEAN_POOL: Variant = ("mean_pool", {"attention": "mean_pool"})
SOFTMAX: Variant = ("softmax", {"weighting": "softmax"})


def run_model(
    name: str,
    kind: str,
    config: Path,
    rows: int,
    options: str,
    seed: int,
    tmp: Path,
    evals: int,
    epochs: int | None = None,
    variants: tuple[Variant, ...] = (DEFAULT,),
    train_seeds: tuple[int, ...] = (0,),
    shared: dict[str, ingest.IngestResult] | None = None,
) -> dict[str, Any]:
    """Generate and split ``rows`` rows, then train and evaluate each of ``variants`` with each of
    ``train_seeds`` (alternating, so changes in machine load hit all alike). ``runs`` holds the first
    seed's runs in full, ``seed_aucs`` every seed's AUC. With ``shared``, the data is generated once per
    ``(kind, rows, options, seed)`` and kept there for the next model."""
    t0 = time.perf_counter()
    data_dir = tmp / f"{name}-{rows}-data"
    if shared is not None:
        data = shared_data(kind, rows, options, seed, tmp, config, shared)
    else:
        data = prepare(kind, rows, options, data_dir, config, seed)
    prepare_s = time.perf_counter() - t0
    if data.oracle_auc is None:
        raise RuntimeError(f"{kind} data has no oracle column")
    print(
        f"{name}: {rows:,} rows of {kind}{f' ({options})' if options else ''} -> {data.train_rows:,} train / "
        f"{data.eval_rows:,} eval, oracle AUC {data.oracle_auc:.4f} (generated and split in {prepare_s:.0f}s)",
        flush=True,
    )
    report: dict[str, Any] = {
        "kind": kind,
        "config": str(config.relative_to(ROOT)),
        "rows": rows,
        "generator_options": options,
        "train_rows": data.train_rows,
        "eval_rows": data.eval_rows,
        "seed": seed,
        "oracle_auc": data.oracle_auc,
        "prepare_s": round(prepare_s, 1),
        "runs": {},
        "seed_aucs": {},
    }
    for train_seed in train_seeds:
        for label, din in variants:
            out = tmp / f"{name}-{rows}-{label}-{train_seed}"
            r = train_and_evaluate(config, data, out, evals, epochs, din, train_seed)
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
    if shared is None:
        shutil.rmtree(data_dir, ignore_errors=True)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def multitask_config(model: str, folder: Path) -> tuple[Path, dict[str, Any]]:
    """The config file and overrides of a multi-task benchmark model: the DBMTL config, its towers under an
    MMoE / PLE head (written into ``folder``), or the single-task DIN config on one label."""
    if model.startswith("single_"):
        label = model.removeprefix("single_")
        return DIN_CONFIG, {"data.label": label, "data.oracle_column": TASKS[label]}
    if model == "dbmtl":
        return MULTITASK_CONFIG, {}
    data = yaml.safe_load(MULTITASK_CONFIG.read_text())
    m = data["model"]
    towers = [{k: v for k, v in t.items() if not k.startswith("relation")} for t in m["task_towers"]]
    data["model"] = {"type": model, "towers": m["towers"], "din_towers": m["din_towers"],
                     "task_towers": towers, **HEADS[model]}  # fmt: skip
    data["name"] = f"taobao-{model}-quality"
    path = folder / f"{model}_taobao_quality.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, {}


def task_oracle_aucs(eval_dir: Path) -> dict[str, float]:
    """Each label's oracle AUC on the eval rows (its true probability against the drawn label)."""
    table = pq.read_table(eval_dir, columns=[*TASKS, *TASKS.values()])
    return {
        label: binary_auc(table[label].to_numpy(), table[truth].to_numpy()) for label, truth in TASKS.items()
    }


def run_multitask(
    models: list[str],
    rows: int,
    options: str,
    seed: int,
    tmp: Path,
    evals: int,
    epochs: int | None,
    shared: dict[str, ingest.IngestResult],
) -> dict[str, dict[str, Any]]:
    """Train each multi-task model (and single-task baseline) on the same Taobao rows; each one's report
    has ``tasks``: every label it predicts with its AUC, oracle AUC and gap."""
    data = shared_data("taobao", rows, options, seed, tmp, DIN_CONFIG, shared)
    oracle = task_oracle_aucs(Path(data.eval_dir))
    print(
        "multi-task oracle AUC on the same eval rows: " + ", ".join(f"{k} {v:.4f}" for k, v in oracle.items())
    )
    reports = {}
    for model in models:
        out = tmp / f"{model}-{rows}"
        config, overrides = multitask_config(model, tmp)
        r = train_and_evaluate(config, data, out, evals, epochs, overrides=overrides)
        shutil.rmtree(out, ignore_errors=True)
        label = model.removeprefix("single_")
        tasks = r.pop("tasks", None) or {label: {k: r[k] for k in ("auc", "gauc", "logloss")}}
        for t, m in tasks.items():
            m.update(oracle_auc=oracle[t], gap=oracle[t] - m["auc"])
        r.update(config=str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else config.name,
                 overrides=overrides, rows=rows, generator_options=options, tasks=tasks)  # fmt: skip
        reports[model] = r
        print(f"{model}: " + ", ".join(f"{t} AUC {m['auc']:.4f} (oracle {m['oracle_auc']:.4f}, gap {m['gap']:.4f})"
              for t, m in tasks.items()) + f"; {r['train_s']:.0f}s ({r['rows_per_s']:,} rows/s)", flush=True)  # fmt: skip
    return reports


def _differences(seed_aucs: dict[str, dict[str, float]], a: str, b: str) -> dict[str, Any]:
    diffs = [seed_aucs[a][s] - seed_aucs[b][s] for s in seed_aucs[a]]
    return {
        "by_seed": diffs,
        "mean": statistics.fmean(diffs),
        "sd": statistics.stdev(diffs) if len(diffs) > 1 else None,
        "ahead": f"{sum(d > 0 for d in diffs)}/{len(diffs)}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taobao-rows", type=int, default=8_000_000)
    parser.add_argument("--taobao-catalogue", default="users=4000&ads=2000", help="synthetic:taobao options")
    parser.add_argument(
        "--criteo-rows", type=int, default=None, help="rows of every Criteo model (default: 12M; DeepFM 16M)"
    )
    parser.add_argument("--criteo-vocab", default="max_vocab=10000", help="synthetic:criteo options")
    parser.add_argument("--ablation-rows", type=int, default=2_000_000)
    parser.add_argument(
        "--ablation-seeds", type=int, default=2, help="training seeds of the ablation runs (0 skips them)"
    )
    parser.add_argument(
        "--default-density-rows",
        type=int,
        default=2_000_000,
        help="rows of the default-density DIN run (0 skips)",
    )
    parser.add_argument("--epochs", type=int, default=None, help="override train.epochs (default: config)")
    parser.add_argument("--evals", type=int, default=4, help="evaluations per epoch of the headline runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated models to run, of {', '.join(MODELS)} (the others' results in --out are kept)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--table-cap",
        type=int,
        default=None,
        help="cap every embedding table at this many rows (ids by modulo/hash onto fewer rows; default: the "
        "configs' sizes; --quick: 20,000, since allocating full-size tables dominates a few steps)",
    )
    quick = {"taobao_rows": 6_000, "criteo_rows": 6_000, "ablation_rows": 4_000, "ablation_seeds": 1}
    args = parse_args(
        parser,
        {
            **quick,
            "default_density_rows": 4_000,
            "evals": 1,
            "table_cap": 20_000,
            "out": quick_out(RESULTS.name),
        },
    )
    global TABLE_CAP
    TABLE_CAP = args.table_cap
    only = MODELS if args.only is None else tuple(m.strip() for m in args.only.split(","))
    unknown = [m for m in only if m not in MODELS]
    if unknown:
        parser.error(f"--only: unknown models {unknown}; choose from {', '.join(MODELS)}")

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load_start = list(os.getloadavg())
    report: dict[str, Any] = {"benchmark": "quality", "target_gap": TARGET_GAP, "table_cap": args.table_cap}
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="recpipe-quality-") as tmp_dir:
        tmp = Path(tmp_dir)
        shared: dict[str, ingest.IngestResult] = {}  # data generated once per (kind, rows, options, seed)
        if "din" in only:
            din = run_model(
                "din", "taobao", DIN_CONFIG, args.taobao_rows, args.taobao_catalogue, args.seed, tmp,
                args.evals, args.epochs, shared=shared,
            )  # fmt: skip
            if args.ablation_seeds:
                din["ablation"] = run_model(
                    "din-ablation", "taobao", DIN_CONFIG, args.ablation_rows, args.taobao_catalogue, args.seed,
                    tmp, 1, args.epochs, variants=(DEFAULT, MEAN_POOL, SOFTMAX),
                    train_seeds=tuple(range(args.ablation_seeds)),
                )  # fmt: skip
            if args.default_density_rows:
                din["default_density"] = run_model(
                    "din-default-density", "taobao", DIN_CONFIG, args.default_density_rows, "", args.seed,
                    tmp, 1, args.epochs,
                )  # fmt: skip
            report["din"] = din
            runs = din["runs"]
            summary.update(
                din_auc=runs["default"]["auc"],
                din_oracle_auc=din["oracle_auc"],
                din_gap=runs["default"]["gap"],
                din_within_target=runs["default"]["gap"] <= TARGET_GAP,
            )
            if "ablation" in din:
                seed_aucs = din["ablation"]["seed_aucs"]
                summary["din_ablation_minus_meanpool"] = _differences(seed_aucs, "default", "mean_pool")
                summary["din_ablation_minus_softmax"] = _differences(seed_aucs, "default", "softmax")
            if "default_density" in din:
                dd = din["default_density"]
                summary["din_default_density_gap"] = dd["runs"]["default"]["gap"]
        multitask = [m for m in MULTITASK_MODELS if m in only]
        reports: dict[str, dict[str, Any]] = {}
        if "din" in report and "single_clk" in multitask:
            # The DIN run is the single-task click model: the same config on the same rows.
            multitask.remove("single_clk")
            run = report["din"]["runs"]["default"]
            clk = {k: run[k] for k in ("auc", "gauc", "logloss")}
            clk.update(oracle_auc=report["din"]["oracle_auc"], gap=run["gap"])
            reports["single_clk"] = {"same_run_as": "din", "tasks": {"clk": clk}}
        if multitask:
            reports.update(run_multitask(
                multitask, args.taobao_rows, args.taobao_catalogue, args.seed, tmp, args.evals, args.epochs,
                shared,
            ))  # fmt: skip
        for model, r in reports.items():
            report[model] = r
            for label, m in r["tasks"].items():
                summary.update({f"{label}_oracle_auc": m["oracle_auc"], f"{model}_{label}_auc": m["auc"],
                                f"{model}_{label}_gap": m["gap"]})  # fmt: skip
        for name, (config, fits, rows) in CRITEO_MODELS.items():
            if name not in only:
                continue
            options = "&".join(o for o in (args.criteo_vocab, fits) if o)
            result = run_model(
                name, "criteo", config, args.criteo_rows or rows or CRITEO_ROWS, options, args.seed, tmp, args.evals,
                args.epochs, shared=shared,
            )  # fmt: skip
            report[name] = result
            run = result["runs"]["default"]
            summary.update(
                {
                    f"{name}_auc": run["auc"],
                    f"{name}_oracle_auc": result["oracle_auc"],
                    f"{name}_gap": run["gap"],
                    f"{name}_within_target": run["gap"] <= TARGET_GAP,
                }
            )

    if "din_auc" in summary:
        for key, what in (
            ("din_ablation_minus_meanpool", "mean pool"),
            ("din_ablation_minus_softmax", "softmax"),
        ):
            if key in summary:
                d = summary[key]
                sd = f" ± {d['sd']:.4f} (sd)" if d["sd"] is not None else ""
                print(
                    f"ablation ({args.ablation_rows:,} rows): DIN (sigmoid) - {what} over {len(d['by_seed'])} "
                    f"seeds: {d['mean']:+.4f}{sd}, DIN ahead in {d['ahead']}"
                )
        if "din_default_density_gap" in summary:
            print(
                f"din at the default catalogue density: gap to oracle {summary['din_default_density_gap']:.4f}"
            )
    for name in MODELS:
        if f"{name}_gap" in summary:
            print(f"{name}: gap to oracle {summary[f'{name}_gap']:.4f} (target <= {TARGET_GAP})")
        for label in TASKS:
            if f"{name}_{label}_gap" in summary:
                print(
                    f"{name} ({label}): gap to oracle {summary[f'{name}_{label}_gap']:.4f} (target <= {TARGET_GAP})"
                )
    if args.only and args.out.exists():
        # Some models were rerun: keep the others' results (and say when each was measured).
        previous = json.loads(args.out.read_text())
        for other in MODELS:
            if other in only or other not in previous:
                continue
            report[other] = previous[other]
            report.setdefault("measured_separately", {})[other] = previous.get("measured_separately", {}).get(
                other, previous.get("environment")
            )
            summary.update(
                {k: v for k, v in previous.get("summary", {}).items() if k.startswith(f"{other}_")}
            )
        for label in TASKS:  # the multi-task oracles, unless rerun
            key = f"{label}_oracle_auc"
            if key not in summary and key in previous.get("summary", {}):
                summary[key] = previous["summary"][key]
        summary = {k: summary[k] for m in (*MODELS, *TASKS) for k in list(summary) if k.startswith(f"{m}_")}
    if "single_buy" in report:  # the rarer task is where sharing should pay
        single = report["single_buy"]["tasks"]["buy"]["auc"]
        report["buy_vs_single_task"] = {
            m: report[m]["tasks"]["buy"]["auc"] - single for m in ("dbmtl", "mmoe", "ple") if m in report
        }
        for m, d in report["buy_vs_single_task"].items():
            print(f"{m}: buy AUC {d:+.4f} vs the single-task buy model")
    report["summary"] = summary
    report["environment"] = {
        "torch": torch.__version__,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "cpu": host_cpu(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_avg_start": load_start,
        "load_avg_end": list(os.getloadavg()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("quality: " + " ".join(f"{k}={summary[k]:.4f}" for k in SUMMARY_KEYS if k in summary))


if __name__ == "__main__":
    main()
