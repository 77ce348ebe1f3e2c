"""The training reader's shuffle on sorted logs: the same generated Taobao rows, sorted by user and by time, vs
shuffled beforehand, each trained with the default reader (``data.shuffle: true``).

Real logs come sorted: by time, or (a dump of per-user tables) by user. Read in file order, a model trains on
one user's rows in a run of steps and ends the epoch on the last users or hours. The reader's shuffle
(recpipe/data/shuffle.py: row groups permuted per epoch, then the rows of every ``data.shuffle_buffer_rows``)
should make the order of the files not matter: the goal is the sorted runs within 0.002 AUC of the shuffled
one. The same sorted-by-user rows read in file order (``data.shuffle: false``) show what the shuffle is for.

Data: ``synthetic:taobao`` with the quality benchmark's dense catalogue (``users=4000&ads=2000``: every user's
effect is learnable, so an order that starves some users shows), split by ingest (eval = the last day),
``configs/din_taobao_quality.yaml``, one epoch, one torch thread. The train split is written three ways, in
row groups of 65,536 as ingest writes them: sorted by ``user_id`` (then time), sorted by ``time_stamp``, and
in a random permutation.

Run: ``.venv/bin/python benchmarks/shuffle.py`` (about 12 minutes on 2 idle cores at 2M rows). Last line:
``shuffle: auc_sorted=… auc_shuffled=… auc_sorted_by_time=… auc_sorted_unshuffled=… sorted_minus_shuffled=…``
(``auc_sorted``: by user).

``--quick``: 6,000 rows, the same runs; AUCs at that size mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import quality
import torch
from _common import environment, parse_args, quick_out
from quality import DIN_CONFIG, prepare, train_and_evaluate

RESULTS = Path(__file__).resolve().parent / "results" / "shuffle.json"
GOAL = 0.002
ROW_GROUP = 65_536


def _rewrite(train_dir: str, out: Path, order: str, seed: int) -> str:
    """The train split's rows in ``order`` (``user``, ``time`` or ``random``), one file of 65,536-row groups."""
    table = pq.read_table(train_dir)
    if order == "user":
        idx = pc.sort_indices(table, [("user_id", "ascending"), ("time_stamp", "ascending")])
    elif order == "time":
        idx = pc.sort_indices(table, [("time_stamp", "ascending")])
    else:
        idx = pa.array(np.random.default_rng(seed).permutation(table.num_rows))
    out.mkdir(parents=True)
    pq.write_table(table.take(idx), out / "part-00000.parquet", row_group_size=ROW_GROUP)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="generated Taobao rows (train + eval)")
    parser.add_argument("--catalogue", default="users=4000&ads=2000", help="synthetic:taobao options")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table-cap", type=int, default=None, help="cap every table (default: the config's)")
    args = parse_args(parser, {"rows": 6_000, "table_cap": 20_000, "out": quick_out(RESULTS.name)})
    quality.TABLE_CAP = args.table_cap  # its train_and_evaluate trains every run here
    torch.set_num_threads(args.threads)
    started, load_before = time.perf_counter(), os.getloadavg()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="recpipe-shuffle-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = prepare("taobao", args.rows, args.catalogue, tmp / "data", DIN_CONFIG, args.seed)
        print(
            f"shuffle: {data.train_rows:,} train / {data.eval_rows:,} eval rows, oracle AUC {data.oracle_auc:.4f}",
            flush=True,
        )
        orders = {
            "sorted": "user",
            "sorted_by_time": "time",
            "shuffled": "random",
            "sorted_unshuffled": "user",
        }
        written: dict[str, str] = {}
        for name, order in orders.items():
            train_dir = written.get(order) or _rewrite(
                data.train_dir, tmp / f"train-{order}", order, args.seed
            )
            written[order] = train_dir
            overrides = {"data.shuffle": name != "sorted_unshuffled"}
            r = train_and_evaluate(
                DIN_CONFIG,
                dataclasses.replace(data, train_dir=train_dir),
                tmp / f"run-{name}",
                evals=1,
                overrides=overrides,
            )
            runs[name] = {k: r[k] for k in ("auc", "gauc", "logloss", "train_s", "rows_per_s")}
            runs[name]["order"], runs[name]["reader_shuffle"] = order, overrides["data.shuffle"]
            print(
                f"shuffle [{name}: rows by {order}, reader shuffle {overrides['data.shuffle']}]: AUC {r['auc']:.4f} "
                f"GAUC {r['gauc']:.4f} in {r['train_s']:.0f}s ({r['rows_per_s']:,} rows/s)",
                flush=True,
            )
    summary = {
        "auc_sorted": runs["sorted"]["auc"],
        "auc_shuffled": runs["shuffled"]["auc"],
        "auc_sorted_by_time": runs["sorted_by_time"]["auc"],
        "auc_sorted_unshuffled": runs["sorted_unshuffled"]["auc"],
        "sorted_minus_shuffled": runs["sorted"]["auc"] - runs["shuffled"]["auc"],
    }
    report = {
        "benchmark": "shuffle",
        "rows": args.rows,
        "catalogue": args.catalogue,
        "oracle_auc": data.oracle_auc,
        "goal": f"|auc_sorted - auc_shuffled| <= {GOAL} (and by time)",
        "runs": runs,
        "summary": summary,
        "environment": environment(started, load_before),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("shuffle: " + " ".join(f"{k}={v:.4f}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
