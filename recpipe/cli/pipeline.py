"""``recpipe run`` (the whole pipeline on this machine with kfp.local) and ``recpipe pipeline
compile|submit|schedule``."""

from __future__ import annotations

import argparse
from typing import Any

from recpipe.cli.console import EXIT_ERROR, EXIT_GATE, EXIT_OK
from recpipe.cli.partitions import partitions_arg
from recpipe.config import ParameterError
from recpipe.config.catalogue import LOCAL_RUN_BACKENDS


def cmd_run(a: argparse.Namespace) -> int:
    from pipelines.local_run import run_local
    from recpipe.cli.partitions import partition_overrides
    from recpipe.pipeline.lifecycle import OUTCOME_REJECTED

    common = {
        "runs_dir": a.runs,
        "config": a.config,
        "data_source": a.data,
        "rows": a.rows,
        "workers": a.workers,
        "gpus_per_worker": a.gpus_per_worker,
        "backends": a.backends,
        "min_auc": a.min_auc,
        "auto_promote": not a.no_promote,
        "verbose": a.verbose,
        "tracking_uri": a.tracking_uri,
        "runner": a.runner,
    }
    if a.ranker_config:
        return _run_pair(a)
    if a.ranker_data or a.ranker_set:
        raise ParameterError("ranker_data", "--ranker-data and --ranker-set need --ranker-config")
    if a.days is not None:
        return _replay(a, common)
    overrides = partition_overrides(a)
    if a.init_from:
        overrides["train.init_from"] = a.init_from
    summary = run_local(overrides=overrides, **common)
    print(summary.format())
    if summary.status != "FINISHED":
        return EXIT_ERROR
    # A rejected model is a normal end of the pipeline, but a script must tell it from a new version.
    return EXIT_GATE if (summary.outcome or "").startswith(OUTCOME_REJECTED) else EXIT_OK


def _run_pair(a: argparse.Namespace) -> int:
    """``recpipe run --config RETRIEVER --ranker-config RANKER``: the pair pipeline (pipelines/pair_run.py)."""
    from pipelines.pair_run import run_pair_local
    from recpipe.config import parse_overrides
    from recpipe.pipeline.lifecycle import OUTCOME_REJECTED

    given = {
        "--days": a.days,
        "--partitions": a.partitions,
        "--init-from": a.init_from,
        "--min-auc": a.min_auc,
    }
    unsupported = [flag for flag, value in given.items() if value is not None]
    if a.runner != "subprocess" or a.workers != 1:
        unsupported += ["--runner"] * (a.runner != "subprocess") + ["--workers"] * (a.workers != 1)
    if unsupported:
        raise ParameterError(
            "ranker_config",
            f"a pair run does not take {', '.join(unsupported)} yet (--set / --ranker-set do)",
        )
    summary = run_pair_local(
        runs_dir=a.runs, config=a.config, ranker_config=a.ranker_config, data_source=a.data,
        ranker_data_source=a.ranker_data, rows=a.rows, gpus_per_worker=a.gpus_per_worker, backends=a.backends,
        auto_promote=not a.no_promote, overrides=parse_overrides(a.set),
        ranker_overrides=parse_overrides(a.ranker_set), verbose=a.verbose, tracking_uri=a.tracking_uri,
    )  # fmt: skip
    print(summary.format())
    if summary.status != "FINISHED":
        return EXIT_ERROR
    return EXIT_GATE if (summary.outcome or "").startswith(OUTCOME_REJECTED) else EXIT_OK


def _replay(a: argparse.Namespace, common: dict) -> int:
    """``recpipe run --days``: one run per day (pipelines/replay.py); exit 1 when a run failed."""
    from pipelines.replay import replay_days
    from recpipe.config import parse_overrides

    if a.partitions is not None or a.init_from:
        raise ValueError(
            "--days sets each run's partitions and warm start: leave out --partitions / --init-from"
        )

    def show(selector: str, summary: Any) -> None:
        print(f"== recpipe run --days: data.partitions={selector}")
        print(summary.format(), flush=True)

    summaries = replay_days(a.days, window=a.window, overrides=parse_overrides(a.set), on_run=show, **common)
    outcomes = ", ".join(f"{s.outcome or s.status}" for s in summaries)
    print(f"replayed {len(summaries)} day(s): {outcomes}")
    return EXIT_OK if all(s.status == "FINISHED" for s in summaries) else EXIT_ERROR


def cmd_compile(a: argparse.Namespace) -> int:
    from pipelines.training_pipeline import compile_pipeline

    print(f"wrote {compile_pipeline(a.out)}")
    return 0


def cmd_submit(a: argparse.Namespace) -> int:
    from pipelines.submit import submit
    from recpipe.config import parse_overrides

    r = submit(
        a.host, parse_overrides(a.param), experiment=a.experiment, run_name=a.run_name, namespace=a.namespace
    )
    print(f"submitted run {r['run_id']}")
    print(r["url"])
    return 0


def cmd_schedule(a: argparse.Namespace) -> int:
    from pipelines.submit import schedule
    from recpipe.config import parse_overrides

    r = schedule(
        a.host, a.cron, partitions=a.partition, init_from=a.init_from, arguments=parse_overrides(a.param),
        experiment=a.experiment, namespace=a.namespace, catchup=a.catchup, **({"name": a.name} if a.name else {}),
    )  # fmt: skip
    print(f"scheduled recurring run {r['recurring_run_id']}: cron {r['cron']!r} (KFP's 6 fields, UTC)")
    given = {"partitions": a.partition, "init_from": a.init_from}
    print("each run: " + ", ".join(f"{k} {v or '(the config)'}" for k, v in given.items()))
    print(r["url"])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``pipeline compile|submit|schedule`` to ``recpipe``'s parser."""
    r = sub.add_parser("run", help="run the whole pipeline here (kfp.local, embedded MLflow, generated data)")
    r.add_argument(
        "--runs",
        default=None,
        help="folder for runs and the MLflow store <runs>/mlflow.db (default: RECPIPE_RUNS, else ./runs)",
    )
    r.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store instead of <runs>/mlflow.db "
        "(--tracking-uri > --runs > MLFLOW_TRACKING_URI > RECPIPE_RUNS/mlflow.db > ./runs/mlflow.db)",
    )
    r.add_argument(
        "--config", default="configs/din_taobao_small.yaml", help="recpipe config YAML (default: %(default)s)"
    )
    r.add_argument(
        "--data",
        default=None,
        help="data source, checked against the config's columns (default: the config's data.train, else "
        "generated data of the config's kind, synthetic:taobao or synthetic:criteo, else synthetic:config for "
        "the config's own columns); a data.eval in the config is kept as the eval split",
    )
    r.add_argument(
        "--ranker-config",
        default=None,
        help="a ranking config to run as the pair of --config's retrieval model: both trained, gated, exported "
        "and registered in one pipeline run, promoted together only if both gates pass (docs/retrieval.md)",
    )
    r.add_argument(
        "--ranker-data",
        default=None,
        help="with --ranker-config: the ranker's data (give --data too; default: both generated from one world)",
    )
    r.add_argument(
        "--ranker-set",
        action="append",
        metavar="KEY=VALUE",
        help="with --ranker-config: the ranker's overrides",
    )
    r.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows of generated data (default 1,000,000; a retrieval config's 200,000; ignored with --data)",
    )
    r.add_argument("--workers", type=int, default=1, help="nodes a cluster run would have (here: processes)")
    r.add_argument(
        "--gpus-per-worker", type=int, default=None, help="torchrun processes per worker (CPU here)"
    )
    r.add_argument(
        "--backends", default=None, help=f"export backends (default: {','.join(LOCAL_RUN_BACKENDS)})"
    )
    r.add_argument("--min-auc", type=float, default=None, help="gate AUC floor (default: the config's)")
    r.add_argument("--no-promote", action="store_true", help="register as challenger only")
    r.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="config override, e.g. train.max_steps=50"
    )
    partitions_arg(r)
    r.add_argument("--verbose", action="store_true", help="stream every step's logs")
    r.add_argument(
        "--init-from",
        default=None,
        help="warm start (train.init_from): models:/NAME@champion or a checkpoint folder",
    )
    r.add_argument(
        "--days",
        default=None,
        help="replay days in order, one run per day, each warm-started from the champion and gated on its "
        "day: a selector of the data's days (dt=20260101..20260114, last:7) or, without --data, a number of "
        "generated days (e.g. 3)",
    )
    r.add_argument(
        "--window",
        type=int,
        default=1,
        help="with --days: training days before each day (default: %(default)s)",
    )
    r.add_argument(
        "--runner",
        choices=("subprocess", "containers"),
        default="subprocess",
        help="subprocess: every step a process here (default); containers: every step in its image "
        "(docker or podman; `make images` first)",
    )
    r.set_defaults(func=cmd_run)

    p = sub.add_parser("pipeline", help="the Kubeflow pipeline").add_subparsers(
        dest="pipeline_command", required=True
    )
    c = p.add_parser("compile", help="compile to KFP IR YAML")
    c.add_argument("--out", default="pipeline.yaml", help="IR YAML to write (default: %(default)s)")
    c.set_defaults(func=cmd_compile)
    s = p.add_parser("submit", help="submit a run to a Kubeflow Pipelines endpoint (token from KFP_TOKEN)")
    s.add_argument("--host", required=True, help="KFP API endpoint, e.g. http://localhost:8080")
    s.add_argument("--experiment", default="recpipe", help="KFP experiment (default: %(default)s)")
    s.add_argument("--run-name", default=None, help="KFP run name (default: generated)")
    s.add_argument("--namespace", default=None, help="Kubeflow profile namespace (multi-user installs)")
    s.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="pipeline parameter, e.g. workers=4"
    )
    s.set_defaults(func=cmd_submit)
    from recpipe.pipeline.params import DAILY_PARTITIONS, INIT_FROM_CHAMPION_IF_ANY

    d = p.add_parser(
        "schedule",
        help="create a recurring run (cron) whose runs train on their scheduled day's partitions",
        epilog="example: recpipe pipeline schedule --host http://localhost:8080 --cron '0 3 * * *' "
        "--partition 'dt={date-1}' --param data_source=s3://logs/clicks",
    )
    d.add_argument(
        "--cron",
        required=True,
        help="when: 5-field crontab ('0 3 * * *': 03:00 daily) or KFP's 6 fields (second first); UTC",
    )
    d.add_argument(
        "--partition",
        default=DAILY_PARTITIONS,
        help="partitions of each run; {date} = its scheduled day (UTC, YYYYMMDD), {date-N} = N days before "
        "(default: %(default)s: train on the day before yesterday, gate on yesterday, the newest selected day; "
        "a rolling week of training: 'dt={date-8}..{date-1}')",
    )
    d.add_argument(
        "--init-from",
        default=INIT_FROM_CHAMPION_IF_ANY,
        help="warm start of each run (default: %(default)s: the champion's version, from scratch while "
        "there is none; '' keeps the config's train.init_from)",
    )
    d.add_argument("--host", required=True, help="KFP API endpoint, e.g. http://localhost:8080")
    d.add_argument("--experiment", default="recpipe", help="KFP experiment (default: %(default)s)")
    d.add_argument("--name", default=None, help="recurring run name (default: recpipe-daily)")
    d.add_argument("--namespace", default=None, help="Kubeflow profile namespace (multi-user installs)")
    d.add_argument("--catchup", action="store_true", help="after a pause, one run per missed time")
    d.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="pipeline parameter, e.g. workers=4"
    )
    d.set_defaults(func=cmd_schedule)
