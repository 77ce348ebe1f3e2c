"""Import every config of a TorchEasyRec checkout's own tests and benchmarks, and train each one that imports.

For each ``*.config`` under ``tzrec/tests/configs`` and ``tzrec/benchmark/configs`` of a TorchEasyRec checkout
(a work tree, or a bare git directory read with ``git show``), in order:

1. ``recpipe.tzrec.import_tzrec`` with ``drop_custom_features`` (``--drop-custom-features``: a user's compiled FG
   operator recpipe cannot run is left out, and the row names each one dropped) — imported, or refused with
   every reason (each at its line);
2. an imported config trains ``--steps`` steps of ``--batch`` rows on ``synthetic:config`` rows generated for
   it (``recpipe.data.synthetic``; a relative ``vocab_file`` read from the checkout, as TorchEasyRec's tests
   run from its root), with ``on_bad_row: error`` as imported, tables capped at ``--max-rows``
   rows (the 40M-bucket Criteo tables do not fit this machine; the model, features and optimizers are the
   imported ones), then evaluates on generated eval rows; a retrieval model (dssm, dssm_v2) trains by
   ``recpipe.train.retrieval.train_retrieval`` with sampled negatives from an item table of the generated rows'
   items, and reports recall@K over that catalogue.

Prints one markdown table row a config (``| config | result | reasons |``) and a last line
``tzrec_sweep: configs=N imported=I trained=T refused=R``. docs/tzrec.md records a run's table.

Run: ``.venv/bin/python scripts/tzrec_sweep.py /work/.mirror/alibaba+TorchEasyRec/repo`` (a few minutes).
TorchEasyRec's files are read, never copied into recpipe.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import tempfile
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from recpipe.config import ConfigError, parse_config
from recpipe.config.catalogue import RETRIEVAL_MODELS
from recpipe.data.sources import open_source
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import evaluate_retrieval_from_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fit import fit_feature_spec, fit_needs
from recpipe.launch.worker import train
from recpipe.stages import ingest
from recpipe.train.retrieval import train_retrieval
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError

FOLDERS = ("tzrec/tests/configs", "tzrec/benchmark/configs")


def _configs(root: Path) -> list[tuple[str, str]]:
    """(path, text) of every config, from a work tree or a bare git directory."""
    if (root / FOLDERS[0]).is_dir():
        return [
            (str(p.relative_to(root)), p.read_text())
            for folder in FOLDERS
            for p in sorted((root / folder).rglob("*.config"))
        ]
    names = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", "HEAD", *FOLDERS],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    out = []
    for name in sorted(n for n in names if n.endswith(".config")):
        text = subprocess.run(
            ["git", "-C", str(root), "show", f"HEAD:{name}"], check=True, capture_output=True, text=True
        ).stdout
        out.append((name, text))
    return out


REASON_CHARS = 120


def reason(message: str, limit: int = REASON_CHARS) -> str:
    """A problem's message as a table reason: its first clause (before ``"; "``), of that the phrase before its
    first ``": "`` when the phrase has three words or more (``unsupported field 'x'``, not ``num_class 2``: the
    detail after it is a list or an explanation), and past ``limit`` characters whole words with ``…``.

    Example::

        reason("model 'dssm' is not supported; supported: dlrm, …")   # "model 'dssm' is not supported"
    """
    clause = message.split("; ", 1)[0].strip()
    head = clause.split(": ", 1)[0]
    if head != clause and len(head.split()) >= 3:
        clause = head
    if len(clause) > limit:
        clause = clause[: limit + 1].rsplit(" ", 1)[0].rstrip(" ,;:(") + " …"
    return clause


def _capped(data: dict[str, Any], max_rows: int, steps: int, batch: int) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            for key in ("num_buckets", "hash_bucket_size", "zch_size"):
                if item.get(key) and item[key] > max_rows:
                    item[key] = max_rows
    data["data"].update(batch_size=batch, num_workers=0, train=None, eval=None)
    data["train"].update(max_steps=steps, log_every_steps=steps, checkpoint_every_steps=None, epochs=1)
    return data


def _checkout_file(root: Path, name: str, tmp: Path) -> Path | None:
    """A file of the checkout (a work tree's, or a bare git directory's ``HEAD:<name>`` written under ``tmp``),
    or None when it has none."""
    if (root / name).is_file():
        return root / name
    shown = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{name}"], capture_output=True)
    if shown.returncode != 0:
        return None
    out = tmp / "checkout" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shown.stdout)
    return out


def _with_checkout_files(data: dict[str, Any], root: Path, tmp: Path) -> dict[str, Any]:
    """Relative ``vocab_file`` paths read from the checkout, as TorchEasyRec's tests run from its root
    (``data/test/id_vocab_list_1``)."""
    data = copy.deepcopy(data)
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            name = item.get("vocab_file")
            if name and not Path(name).is_absolute() and not Path(name).exists():
                found = _checkout_file(root, name, tmp)
                if found is not None:
                    item["vocab_file"] = str(found)
    return data


def _train_retrieval(cfg: Any, raw: Path, tmp: Path, args: argparse.Namespace) -> str:
    """A retrieval model: ``--steps`` steps of ``train_retrieval`` on the generated rows (the first 90%), its
    negatives drawn from an item table of those rows' distinct items (their ``attr_fields`` columns, weight 1;
    the imported table's path and graph-learn format replaced), then recall@K over that catalogue."""
    source = open_source(str(raw))
    rows = pa.Table.from_batches([sb.batch for sb in source.iter_batches()], schema=source.schema())
    ns = cfg.data.negative_sampler
    if ns is not None:
        rows = rows.filter(pc.is_valid(rows.column(ns.item_id_field)))  # a positive needs an item
        ids = rows.column(ns.item_id_field).to_numpy(zero_copy_only=False)
        _, first = np.unique(ids, return_index=True)
        items = rows.take(pa.array(first)).select(list(dict.fromkeys([ns.item_id_field, *ns.attr_fields])))
        items = items.append_column(ns.weight_field, pa.array(np.ones(items.num_rows)))
        pq.write_table(items, tmp / "items.parquet")
        section = ns.model_copy(update={"input_path": str(tmp / "items.parquet"), "attr_delimiter": None})
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"negative_sampler": section})})
    n_train = rows.num_rows * 9 // 10
    spec = fit_feature_spec(cfg, open_source(str(raw))) if fit_needs(cfg) else build_feature_spec(cfg)
    run = train_retrieval(cfg, spec, rows.slice(0, n_train), steps=args.steps)
    if ns is None:
        return f"trains ({len(run.losses)} steps of {args.batch} rows, in-batch negatives; no item table to evaluate)"
    scores = evaluate_retrieval_from_config(cfg, run.model, spec, rows.slice(n_train))
    recall = ", ".join(f"recall@{k} {s.recall:.3f}" for k, s in scores.items())
    return (
        f"trains ({len(run.losses)} steps of {args.batch} rows on synthetic:config, {ns.num_sample} sampled "
        f"negatives; eval {recall})"
    )


def _train(data: dict[str, Any], tmp: Path, args: argparse.Namespace) -> str:
    data = _with_checkout_files(data, args.checkout, tmp)
    cfg = parse_config(_capped(data, args.max_rows, args.steps, args.batch))
    raw = tmp / "raw"
    generate("config", args.rows, raw, seed=0, config=cfg)
    if cfg.model.type in RETRIEVAL_MODELS:
        return _train_retrieval(cfg, raw, tmp, args)
    split = ingest.run(str(raw), tmp / "data", label=cfg.data.label, split=cfg.data.split,
                       oracle_column=cfg.data.oracle_column)  # fmt: skip
    spec = fit_feature_spec(cfg, open_source(split.train_dir)) if fit_needs(cfg) else build_feature_spec(cfg)
    result = train(cfg, spec, split.train_dir, split.eval_dir, tmp / "run", resume=False)
    auc = result.eval["auc"] if result.eval else float("nan")
    return f"trains ({result.steps} steps of {args.batch} rows on synthetic:config, eval AUC {auc:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a TorchEasyRec work tree or bare git directory")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rows", type=int, default=2000, help="generated rows (train + eval)")
    parser.add_argument("--max-rows", type=int, default=10_000, help="table rows cap for the runs")
    parser.add_argument("--no-train", action="store_true", help="import only")
    parser.add_argument("--only", default="", help="only the configs whose path holds this text")
    args = parser.parse_args()
    torch.set_num_threads(1)
    counts: Counter[str] = Counter()
    print("| config | result | reasons |\n|---|---|---|")
    for name, text in _configs(args.checkout):
        if args.only not in name:
            continue
        counts["configs"] += 1
        try:
            imported = import_tzrec(text, source=name, drop_custom_features=True)
        except ConfigError as err:  # the importer wrote a config recpipe refuses: an importer bug, reported
            counts["refused"] += 1
            print(f"| `{name}` | import error | {str(err).splitlines()[-1].strip()[:200]} |", flush=True)
            continue
        except TzrecImportError as err:
            counts["refused"] += 1
            reasons = sorted({reason(p.message) for p in err.problems})
            print(f"| `{name}` | refused ({len(err.problems)}) | {'; '.join(reasons)} |", flush=True)
            continue
        counts["imported"] += 1
        result = f"imports (model `{imported.data['model']['type']}`)"
        if imported.dropped:
            result += f" with custom features dropped ({', '.join(imported.dropped)})"
        if not args.no_train:
            with tempfile.TemporaryDirectory(prefix="recpipe-tzrec-sweep-") as tmp:
                try:
                    result = f"{result}; {_train(imported.data, Path(tmp), args)}"
                    counts["trained"] += 1
                except Exception as err:  # reported, the sweep goes on
                    last = traceback.format_exception_only(err)[-1].strip().replace("|", "/")
                    result = f"{result}; does not train: {last[:300]}"
        print(f"| `{name}` | {result} | |", flush=True)
    print(
        f"tzrec_sweep: configs={counts['configs']} imported={counts['imported']} "
        f"trained={counts['trained']} refused={counts['refused']}"
    )


if __name__ == "__main__":
    main()
