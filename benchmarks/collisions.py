"""Collision-free embeddings: rows shared by distinct ids under ``id % num_buckets`` vs TorchRec managed
collision (zch) at the same table size, and the AUC on tail items for both.

Data: generated Taobao rows (``synthetic:taobao``), ads drawn with Zipf popularity (exponent 0.8) from a
catalogue of one ad per 25 rows, split by ``ingest`` into the first days (train) and the last day
(eval). Ad ids are distinct random integers below 846,812, the seed's ``num_buckets``.

Model: ``configs/din_taobao_small.yaml`` trained one epoch on one rank (the trainer of
``recpipe.train.loop``), twice on the same data from the same seed. The two runs differ only in the ``adgroup_id``
table, which the candidate ``adgroup_id`` and the history's ``click_50_seq__adgroup_id`` share: ``R``
rows reached by ``id % R`` (buckets), or ``R`` rows assigned by a managed-collision module (zch:
``zch: true, zch_size: R``). ``R`` is ``--table-ratio`` × the distinct ad ids of the training split
(candidates and history items), so the table is far smaller than the id space, as tables are sized in
practice, and about as large as the ids that occur.

- ``shared_row_fraction``: the fraction of the distinct ad ids of the training split whose row holds
  another of those ids too. Buckets: ``id % R``. zch: the trained model's remapping (ids without a row
  of their own share their rank's spare row).
- ``tail_auc``: AUC on the eval rows whose ad was the candidate fewer than 10 times in the training
  split (never included), from the model loaded from the final checkpoint. ``tail_oracle_auc`` is
  the generator's true click probability's AUC on the same rows, the best any model can do.

Everything is repeated for three data seeds (three catalogues and impression streams): the tail
holds ~26k eval rows and ~1.3k clicks per seed, so one tail AUC has a standard error near 0.008. The
last line gives the means over the seeds; the JSON has every seed and the paired differences.

Run: ``.venv/bin/python benchmarks/collisions.py`` (about 8 minutes on 2 shared cores; ``--seeds 0`` for
one world). The JSON goes to ``benchmarks/results/collisions.json``; the last line is
``collisions: shared_row_fraction_buckets=… shared_row_fraction_zch=… tail_auc_buckets=… tail_auc_zch=…``.
``--quick``: one seed of 6,000 rows, both variants trained and scored as in the full run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
import yaml
from _common import environment, parse_args, quick_out
from torchrec.sparse.jagged_tensor import JaggedTensor

from recpipe.auc import binary_auc
from recpipe.config import parse_config
from recpipe.eval.checkpoint import predict_dataset
from recpipe.features.build import build_feature_spec
from recpipe.features.hashing import zch_keys_from_ints
from recpipe.launch.worker import train
from recpipe.stages import ingest
from recpipe.train.checkpoint import load_model_for_inference

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "din_taobao_small.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "collisions.json"
ITEM = "adgroup_id"
HISTORY = "click_50_seq"
TAIL_SEEN = 10
VARIANTS = ("buckets", "zch")


def item_config(table_rows: int, zch: bool) -> dict[str, Any]:
    """The small DIN config with the ``adgroup_id`` table (candidate and history) of ``table_rows`` rows."""
    data = yaml.safe_load(CONFIG.read_text())
    item = {"zch": True, "zch_size": table_rows} if zch else {"num_buckets": table_rows}
    for f in data["features"]:
        if f["name"] == ITEM:
            f.update(item)
        for sub in f.get("sub_features", []):
            if sub["name"] == ITEM:
                sub.update(item)
    data["train"].update(checkpoint_every_steps=None, log_every_steps=100)
    return data


def training_ids(train_dir: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct candidate ad ids of the training split with their impression counts, and every distinct
    ad id the ``adgroup_id`` table sees there (candidates and history items)."""
    table = pq.read_table(train_dir, columns=[ITEM, HISTORY])
    candidates = table.column(ITEM).to_numpy()
    ids, counts = np.unique(candidates, return_counts=True)
    hist = pc.fill_null(table.column(HISTORY).combine_chunks(), "")
    items = pc.list_flatten(pc.split_pattern(hist, "|"))
    items = items.filter(pc.not_equal(items, ""))
    first = pc.list_element(pc.split_pattern(items, "\x03"), 0)
    hist_ids = pc.cast(first, pa.int64()).to_numpy()
    return ids, counts, np.union1d(ids, hist_ids)


def shared_fraction(rows: np.ndarray) -> float:
    """Fraction of ids (one row number each) whose row is also another id's."""
    _, inverse, per_row = np.unique(rows, return_inverse=True, return_counts=True)
    return float((per_row[inverse] > 1).mean())


def zch_rows(model: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    """Rows the trained model's managed-collision module gives ``ids`` (eval mode: nothing admitted)."""
    mcc = model.embeddings.mc_ec._managed_collision_collection
    module = mcc._managed_collision_modules[ITEM]
    module.eval()
    keys = torch.from_numpy(zch_keys_from_ints(ids))
    jt = JaggedTensor(values=keys, lengths=torch.ones(len(keys), dtype=torch.int32))
    return module.remap({ITEM: jt})[ITEM].values().numpy()


def run_variant(
    name: str, table_rows: int, data: ingest.IngestResult, out: Path, counts: dict[int, int], ids: np.ndarray
) -> dict[str, Any]:
    """Train one variant, score the eval split with the final checkpoint, measure tail AUC and row sharing."""
    cfg = parse_config(item_config(table_rows, zch=name == "zch"), f"<{name}>")
    spec = build_feature_spec(cfg)
    t0 = time.perf_counter()
    result = train(cfg, spec, data.train_dir, data.eval_dir, out, resume=False)
    train_s = time.perf_counter() - t0
    model, spec, _ = load_model_for_inference(out)
    # GAUC groups set to the candidate ad id: predictions come back with their rows' ad ids
    labels, logits, ads = predict_dataset(
        model, dataclasses.replace(spec, group_column=ITEM), data.eval_dir, 4096
    )
    assert ads is not None
    seen = np.array([counts.get(int(a), 0) for a in ads])
    tail = seen < TAIL_SEEN
    eval_table = pq.read_table(data.eval_dir, columns=[ITEM, "true_prob"])
    if not np.array_equal(eval_table.column(ITEM).to_numpy(), ads):
        raise RuntimeError("eval rows came back in another order than the files hold them")
    oracle = eval_table.column("true_prob").to_numpy()
    rows = zch_rows(model, ids) if name == "zch" else ids % table_rows
    return {
        "table_rows": table_rows,
        "shared_row_fraction": shared_fraction(rows),
        "auc": binary_auc(labels, logits),
        "trainer_eval_auc": result.eval["auc"] if result.eval else None,
        "tail_auc": binary_auc(labels[tail], logits[tail]),
        "tail_oracle_auc": binary_auc(labels[tail], oracle[tail]),
        "tail_seen_auc": binary_auc(labels[tail & (seen > 0)], logits[tail & (seen > 0)]),
        "head_auc": binary_auc(labels[~tail], logits[~tail]),
        "tail_rows": int(tail.sum()),
        "tail_positives": int(labels[tail].sum()),
        "tail_unseen_rows": int((seen == 0).sum()),
        "eval_rows": len(labels),
        "steps": result.steps,
        "train_s": round(train_s, 1),
    }


def run_seed(seed: int, rows: int, table_ratio: float, work: Path) -> dict[str, Any]:
    """Generate and split one synthetic world, size the table, train and measure both variants."""
    cfg = parse_config(item_config(1000, zch=False))
    data = ingest.run(
        f"synthetic:taobao?rows={rows}&seed={seed}",
        work / "data",
        label=cfg.data.label,
        split=cfg.data.split,
        oracle_column=cfg.data.oracle_column,
    )
    shutil.rmtree(work / "data" / "raw", ignore_errors=True)
    cand, cand_counts, ids = training_ids(data.train_dir)
    counts = dict(zip(cand.tolist(), cand_counts.tolist()))
    table_rows = max(4, round(table_ratio * len(ids)))
    print(
        f"seed {seed}: {data.train_rows:,} train / {data.eval_rows:,} eval rows; {len(ids):,} distinct ad ids in "
        f"training ({len(cand):,} as candidates, {int((cand_counts < TAIL_SEEN).sum()):,} of them seen < "
        f"{TAIL_SEEN} times); adgroup_id table: {table_rows:,} rows",
        flush=True,
    )
    variants = {name: run_variant(name, table_rows, data, work / name, counts, ids) for name in VARIANTS}
    for name, v in variants.items():
        print(
            f"seed {seed} {name:7s}: shared rows {v['shared_row_fraction']:.4f}  auc {v['auc']:.4f}  "
            f"tail auc {v['tail_auc']:.4f} (oracle {v['tail_oracle_auc']:.4f}, {v['tail_rows']:,} rows)  "
            f"head auc {v['head_auc']:.4f}  {v['train_s']:.0f}s",
            flush=True,
        )
    return {
        "seed": seed,
        "train_rows": data.train_rows,
        "eval_rows": data.eval_rows,
        "oracle_auc": data.oracle_auc,
        "distinct_training_ids": len(ids),
        "distinct_candidate_ids": len(cand),
        "table_rows": table_rows,
        "variants": variants,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="generated Taobao rows (train + eval)")
    parser.add_argument(
        "--table-ratio", type=float, default=1.0, help="adgroup_id table rows per distinct training ad id"
    )
    parser.add_argument("--seeds", default="0,1,2", help="data (and catalogue) seeds, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument(
        "--work", type=Path, default=None, help="keep data and runs here (default: a temp dir)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parse_args(parser, {"rows": 6_000, "seeds": "0", "out": quick_out(RESULTS.name)})
    torch.set_num_threads(args.threads)
    seeds = [int(x) for x in args.seeds.split(",")]
    started, load_before = time.perf_counter(), os.getloadavg()
    runs = []
    for seed in seeds:
        work = (
            (args.work / f"seed-{seed}")
            if args.work
            else Path(tempfile.mkdtemp(prefix="recpipe-collisions-"))
        )
        try:
            runs.append(run_seed(seed, args.rows, args.table_ratio, work))
        finally:
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, dict[str, float]] = {}
    for name in VARIANTS:
        summary[name] = {
            key: statistics.mean(r["variants"][name][key] for r in runs)
            for key in ("shared_row_fraction", "auc", "tail_auc", "head_auc", "tail_oracle_auc")
        }
    diffs = [r["variants"]["zch"]["tail_auc"] - r["variants"]["buckets"]["tail_auc"] for r in runs]
    summary["tail_auc_zch_minus_buckets"] = {
        "mean": statistics.mean(diffs),
        "stdev": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
        "per_seed": diffs,
    }
    report = {
        "benchmark": "collisions",
        "summary": summary,
        "runs": runs,
        "config": {
            "model": str(CONFIG.relative_to(ROOT)),
            "rows": args.rows,
            "seeds": seeds,
            "table_ratio": args.table_ratio,
            "tail": f"eval rows whose {ITEM} was the candidate < {TAIL_SEEN} times in training",
            "threads": args.threads,
        },
        "environment": environment(started, load_before),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    b, z, d = summary["buckets"], summary["zch"], summary["tail_auc_zch_minus_buckets"]
    print(
        f"mean over seeds {seeds}: auc buckets {b['auc']:.4f} zch {z['auc']:.4f}; head auc buckets "
        f"{b['head_auc']:.4f} zch {z['head_auc']:.4f}; tail auc zch - buckets {d['mean']:+.4f} ± {d['stdev']:.4f}"
    )
    print(
        f"collisions: shared_row_fraction_buckets={b['shared_row_fraction']:.4f} "
        f"shared_row_fraction_zch={z['shared_row_fraction']:.4f} "
        f"tail_auc_buckets={b['tail_auc']:.4f} tail_auc_zch={z['tail_auc']:.4f}"
    )


if __name__ == "__main__":
    main()
