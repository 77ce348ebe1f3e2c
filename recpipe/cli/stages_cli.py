"""``recpipe train|evaluate|export|register|promote|models``: thin entries over ``recpipe.stages``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

from recpipe.cli.console import EXIT_GATE, job_succeeded
from recpipe.config import parse_overrides
from recpipe.config.catalogue import DEFAULT_BACKENDS, EXPORT_BACKENDS

# The gate's thresholds (GateConfig's fields) and what each flag says.
GATE_THRESHOLDS = {
    "min_auc": "lowest AUC (default: eval.gate of the config)",
    "max_auc_drop": "largest AUC drop vs the champion (default: the config's)",
    "max_logloss_rise": "largest logloss rise vs the champion (default: the config's)",
    "max_psi": "largest PSI of any feature vs the training split, needs --train-data (default: the config's)",
    "min_recall_at_k": "a retrieval model's lowest recall@K over the catalogue (default: the config's)",
    "max_recall_drop": "a retrieval model's largest recall@K drop vs the champion (default: the config's)",
}


def _print(result: Any) -> None:
    if is_dataclass(result):
        result = asdict(result)
    print(json.dumps(result, indent=2, default=str))


def _tracking_uri(a: argparse.Namespace, must_exist: bool = False) -> str:
    """The store of ``--tracking-uri`` / ``--runs`` (:func:`recpipe.pipeline.params.resolve_tracking_uri`);
    ``must_exist``: a command that only reads the registry, which never creates an empty store."""
    from recpipe.pipeline import resolve_tracking_uri

    return resolve_tracking_uri(a.tracking_uri, None, runs=a.runs, must_exist=must_exist)


def _run_log(a: argparse.Namespace) -> Any:
    """The MLflow run ``--run-id`` in ``--tracking-uri`` (a pipeline's run), or nothing recorded."""
    from recpipe.runlog import NULL_LOG

    if not a.run_id:
        return NULL_LOG
    from recpipe.tracking import open_run_log

    return open_run_log(a.run_id, _tracking_uri(a, must_exist=True))


# ------------------------------------------------------------------------------------------ commands
def cmd_train(a: argparse.Namespace) -> int:
    from recpipe.stages import train

    overrides = parse_overrides(a.set)
    if a.init_from:
        overrides["train.init_from"] = a.init_from
    registry = a.init_from and a.init_from.startswith("models:/")
    r = train.run(
        a.config,
        a.train,
        a.eval,
        a.out,
        fg_json=a.fg,
        workers=a.workers,
        gpus_per_worker=a.gpus_per_worker,
        nproc_per_node=a.nproc_per_node,
        launcher="local",  # the command line trains on this machine; clusters go through the pipeline
        overrides=overrides,
        log=_run_log(a),
        resume=a.resume,
        tracking_uri=_tracking_uri(a, must_exist=True) if registry else None,
    )
    job_succeeded()
    _print(r)
    return 0


def cmd_evaluate(a: argparse.Namespace) -> int:
    from recpipe.stages import evaluate

    uri = _tracking_uri(a, must_exist=True) if a.champion_model else a.tracking_uri
    r = evaluate.run(
        a.checkpoint,
        a.data,
        a.out,
        config_path=a.config,
        champion_model=a.champion_model,
        tracking_uri=uri,
        min_auc=a.min_auc,
        max_auc_drop=a.max_auc_drop,
        max_logloss_rise=a.max_logloss_rise,
        train_data=a.train_data,
        max_psi=a.max_psi,
        min_recall_at_k=a.min_recall_at_k,
        max_recall_drop=a.max_recall_drop,
    )
    print(r.describe())
    if not r.gate_passed:
        print("recpipe evaluate: gate FAILED:", file=sys.stderr)
        for line in r.gate_reasons:
            if line.startswith("FAIL"):
                print(f"  {line}", file=sys.stderr)
        return EXIT_GATE
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from recpipe.export.manifest import ExportError
    from recpipe.stages import export

    try:
        r = export.run(a.checkpoint, a.backends, a.out, data_uri=a.data, log=_run_log(a))
    except ExportError as err:
        print(f"recpipe export: {err}", file=sys.stderr)
        return 1
    print(r.describe())
    return 0 if r.ok else 1


def cmd_register(a: argparse.Namespace) -> int:
    from recpipe.stages import register

    r = register.run(
        a.exported,
        a.report,
        a.model,
        _tracking_uri(a),
        data_digest=a.data_digest,
        log=_run_log(a),
    )
    _print(r)
    return 0


def cmd_promote(a: argparse.Namespace) -> int:
    from recpipe import tracking
    from recpipe.stages import promote

    if not a.rollback and a.version is None:
        raise ValueError("give --version N, or --rollback")
    try:
        r = promote.run(
            a.model,
            a.version,
            _tracking_uri(a, must_exist=True),
            force=a.force,
            reason=a.reason,
            rollback=a.rollback,
        )
    except tracking.PromotionRefused as err:
        print(f"recpipe promote: refused: {a.model} v{err.version}:", file=sys.stderr)
        for line in err.reasons:
            print(f"  {line}", file=sys.stderr)
        print("  (use --force --reason '…' to override)", file=sys.stderr)
        return 1
    print(r.outcome())
    return 0


def cmd_models_list(a: argparse.Namespace) -> int:
    from recpipe.stages import promote

    uri = _tracking_uri(a, must_exist=True)
    versions = promote.list_versions(a.name, uri)
    if a.json:
        _print(versions)
        return 0
    if not versions:
        print(f"no registered versions of {a.name!r} in {uri}")
        return 0
    print(f"{'version':>7}  {'aliases':<22} {'auc':>8} {'gauc':>8} {'logloss':>8}  gate  run")
    for v in versions:
        m = v["metrics"]

        def num(key: str, m: dict[str, Any] = m) -> str:
            # "-" for a metric that is missing or nan (GAUC without a user column)
            return f"{m[key]:.4f}" if m.get(key) is not None and math.isfinite(m[key]) else "-"

        gate = {True: "pass", False: "FAIL", None: "-"}[v["gate_passed"]]
        aliases = ",".join(v["aliases"]) or "-"
        print(
            f"{v['version']:>7}  {aliases:<22} {num('auc'):>8} {num('gauc'):>8} {num('logloss'):>8}  {gate:<4}  {v['run_id']}"
        )
    return 0


def _partitions_text(names: list[str] | None) -> str:
    """A version's added partitions in one cell: all of them up to three, else first..last (count)."""
    if names is None:
        return "? (no chain tags)"
    if len(names) <= 3:
        return ",".join(names) or "-"
    return f"{names[0]}..{names[-1]} ({len(names)})"


def cmd_models_lineage(a: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from recpipe.stages import promote

    chain = promote.lineage(a.name, _tracking_uri(a, must_exist=True), a.version)
    if a.json:
        _print(chain)
        return 1 if chain["end"] == "cycle" else 0
    print(f"lineage of {chain['model']} from v{chain['version']}, newest first")
    print(
        f"{'version':>7}  {'aliases':<20} {'auc':>8}  gate  {'created (UTC)':<19}  {'parent':<8} {'run':<32}  added"
    )
    for e in chain["entries"]:
        name = f"{e['version']}" if e["model"] == chain["model"] else f"{e['model']}/{e['version']}"
        if e["deleted"]:
            print(f"{name:>7}  (deleted)  run {e['run_id'] or 'unknown'}")
            continue
        auc = f"{e['auc']:.4f}" if e["auc"] is not None and math.isfinite(e["auc"]) else "-"
        gate = {True: "pass", False: "FAIL", None: "-"}[e["gate_passed"]]
        created = datetime.fromtimestamp(e["created_at"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        p = e["parent"]
        parent = (
            "root"
            if p is None
            else (f"v{p['version']}" if p["model"] == e["model"] else f"{p['model']}/{p['version']}")
        )
        aliases = ",".join(e["aliases"]) or "-"
        print(
            f"{name:>7}  {aliases:<20} {auc:>8}  {gate:<4}  {created:<19}  {parent:<8} {e['run_id']:<32}  "
            f"{_partitions_text(e['partitions_added'])}"
        )
        if e["incomplete"]:
            print(f"{'':>9}incomplete: {e['incomplete']}")
    if chain["problem"]:
        print(chain["problem"], file=sys.stderr if chain["end"] == "cycle" else sys.stdout)
    return 1 if chain["end"] == "cycle" else 0


# -------------------------------------------------------------------------------------------- parser
STORE_HELP = (
    "the store: --tracking-uri > --runs > MLFLOW_TRACKING_URI > RECPIPE_RUNS/mlflow.db > ./runs/mlflow.db"
)


def _tracking_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI, e.g. http://mlflow:5000 (" + STORE_HELP + ")",
    )
    p.add_argument(
        "--runs",
        default=None,
        help="the runs folder whose mlflow.db to use, as given to `recpipe run --runs` (default: RECPIPE_RUNS)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add the stage sub-commands to ``recpipe``'s parser."""
    t = sub.add_parser("train", help="train a model on this machine (CPU or GPUs) into a checkpoint folder")
    t.add_argument("--config", required=True, help="recpipe config YAML, e.g. configs/dlrm_criteo_small.yaml")
    t.add_argument("--train", required=True, help="training split (Parquet or CSV) written by ingest")
    t.add_argument("--eval", required=True, help="eval split (Parquet or CSV), validated on during training")
    t.add_argument("--out", required=True, help="output folder (checkpoints)")
    t.add_argument("--fg", default=None, help="fitted fg.json (default: built from the config)")
    t.add_argument(
        "--nproc-per-node", type=int, default=None, help="processes (default: workers x max(1, GPUs))"
    )
    t.add_argument("--workers", type=int, default=1, help="nodes to stand in for: processes = workers x GPUs")
    t.add_argument(
        "--gpus-per-worker", type=int, default=0, help="GPUs per node (0: CPU, one process per node)"
    )
    t.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="config override, e.g. train.max_steps=100"
    )
    t.add_argument(
        "--resume",
        choices=["auto", "never", "must"],
        default="auto",
        help="auto: continue from a checkpoint in --out if there is one (default); never: start fresh; "
        "must: fail unless there is one",
    )
    t.add_argument(
        "--init-from",
        default=None,
        help="warm start (train.init_from): models:/NAME@alias, models:/NAME/<version> or a checkpoint "
        "folder; weights, optimizer state and zch remaps of that run, from step 0 (pass its fg.json as --fg, "
        "or none)",
    )
    t.add_argument(
        "--verbose", action="store_true", help="show dependency warnings and failing ranks' whole output"
    )
    t.add_argument("--run-id", default=None, help="MLflow run to log to")
    _tracking_arg(t)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("evaluate", help="evaluate a checkpoint and gate it (exit 3 when the gate fails)")
    e.add_argument(
        "--checkpoint", required=True, help="training output folder (its latest checkpoint) or a ckpt-<step>"
    )
    e.add_argument("--data", required=True, help="eval Parquet dataset")
    e.add_argument(
        "--train-data", default=None, help="training split: the eval data's drift is measured against it"
    )
    e.add_argument("--out", required=True, help="report JSON (candidate, champion, gate)")
    e.add_argument("--config", default=None, help="config for the gate (default: the checkpoint's)")
    e.add_argument("--champion-model", default=None, help="registered model whose @champion to re-evaluate")
    for threshold, what in GATE_THRESHOLDS.items():  # one flag per GateConfig number; unset: the config's
        e.add_argument(f"--{threshold.replace('_', '-')}", type=float, default=None, help=f"gate: {what}")
    _tracking_arg(e)
    e.set_defaults(func=cmd_evaluate)

    x = sub.add_parser("export", help="export a checkpoint to serving backends, parity-checked")
    x.add_argument(
        "--checkpoint", required=True, help="training output folder (its latest checkpoint) or a ckpt-<step>"
    )
    x.add_argument(
        "--backends",
        default=None,
        help=f"comma-separated, of {','.join(EXPORT_BACKENDS)} (default: {','.join(DEFAULT_BACKENDS)}; a "
        "retrieval model: aoti, its user tower, with the item embeddings and FAISS index)",
    )
    x.add_argument("--out", required=True, help="export folder: one sub-folder per backend")
    x.add_argument("--data", required=True, help="held-out rows with labels for the parity check")
    x.add_argument("--run-id", default=None, help="MLflow run to record the parity on")
    _tracking_arg(x)
    x.set_defaults(func=cmd_export)

    r = sub.add_parser("register", help="log the pyfunc model and register a version with alias challenger")
    r.add_argument("--exported", required=True, help="folder written by `recpipe export`")
    r.add_argument("--report", required=True, help="report JSON written by `recpipe evaluate`")
    r.add_argument("--model", required=True, help="registered model name")
    r.add_argument("--run-id", default=None, help="MLflow run to attach to (default: a new run)")
    r.add_argument("--data-digest", default=None, help="digest of the eval data, recorded as lineage")
    _tracking_arg(r)
    r.set_defaults(func=cmd_register)

    p = sub.add_parser("promote", help="move alias champion (or roll it back)")
    p.add_argument("--model", required=True, help="registered model name")
    p.add_argument("--version", type=int, default=None, help="version to make champion")
    p.add_argument("--rollback", action="store_true", help="point champion at the previous champion")
    p.add_argument("--force", action="store_true", help="promote although the gate did not pass")
    p.add_argument("--reason", default=None, help="why (required with --force)")
    _tracking_arg(p)
    p.set_defaults(func=cmd_promote)

    m = sub.add_parser("models", help="registered models").add_subparsers(
        dest="models_command", required=True
    )
    ml = m.add_parser("list", help="versions of a registered model with aliases, metrics and gate result")
    ml.add_argument("name", help="registered model name")
    ml.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _tracking_arg(ml)
    ml.set_defaults(func=cmd_models_list)
    mg = m.add_parser(
        "lineage", help="the chain of a version back to its root: parents, partitions, AUC, gate"
    )
    mg.add_argument("name", help="registered model name")
    mg.add_argument(
        "--version", type=int, default=None, help="where to start (default: champion, else latest)"
    )
    mg.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _tracking_arg(mg)
    mg.set_defaults(func=cmd_models_lineage)
