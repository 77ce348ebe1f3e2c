"""``recpipe <command> …``: thin entries over ``recpipe.stages`` and the library.

Each sub-command parses primitives and calls one library function; imports are lazy so
``recpipe --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, NoReturn

from recpipe import __version__
from recpipe.cli.console import EPILOG, EXIT_ERROR, EXIT_USAGE, Session, error_line
from recpipe.cli.partitions import partition_overrides, partitions_arg
from recpipe.fastexit import exit_now


def _print(result: Any) -> None:
    if is_dataclass(result):
        result = asdict(result)
    print(json.dumps(result, indent=2, default=str))


# --------------------------------------------------------------------------------------- commands
def cmd_data_generate(a: argparse.Namespace) -> int:
    from recpipe.config import load_config, parse_overrides
    from recpipe.data.synthetic import generate

    if (a.kind is None) == (a.config is None):
        both = ", not both" if a.kind else ""
        raise ValueError(f"give a kind (taobao, criteo) or --config <config.yaml>{both}")
    if a.config is None and (a.nulls is not None or a.lists or a.set):
        raise ValueError("--nulls, --lists and --set go with --config")
    if a.config is not None and (a.days is not None or a.start is not None):
        raise ValueError("--days and --start go with a kind (taobao, criteo), not --config")
    if a.config is not None:
        cfg = load_config(a.config, parse_overrides(a.set))
        r = generate("config", a.rows, a.out, seed=a.seed, config=cfg, nulls=a.nulls, lists=a.lists)
    else:
        r = generate(a.kind, a.rows, a.out, seed=a.seed, days=a.days, start=a.start)
    print(f"wrote {r.rows} rows to {a.out} ({len(r.files)} files, {r.seconds:.1f}s)")
    for name, task in r.tasks.items():
        print(f"{name}: positive_rate={task['positive_rate']:.4f} oracle_auc={task['oracle_auc']:.4f}")
    if a.days is not None:
        by_day = json.loads(Path(r.meta).read_text())["days"]
        for dt, day in by_day.items():
            print(f"dt={dt}: rows={day['rows']} oracle_auc={day['oracle_auc']:.4f}")
    return 0


def cmd_ingest(a: argparse.Namespace) -> int:
    import os

    from recpipe.config import load_config
    from recpipe.features.build import build_feature_spec
    from recpipe.stages import ingest

    cfg = load_config(a.config, partition_overrides(a))
    source, eval_source = ingest.configured_sources(cfg.data, a.source, os.environ)
    _print(
        ingest.run(
            source,
            a.out,
            cfg.data.label,
            cfg.data.split,
            neg_sample_rate=a.neg_sample_rate if a.neg_sample_rate is not None else cfg.data.neg_sample_rate,
            oracle_column=cfg.data.oracle_column,
            csv=cfg.csv_options(),
            spec=build_feature_spec(cfg),
            partitions=cfg.data.partitions,
            eval_source=eval_source,
        )
    )
    return 0


def cmd_fit(a: argparse.Namespace) -> int:
    from recpipe.config import parse_overrides
    from recpipe.stages import fit

    _print(fit.run(a.config, a.train, a.out, overrides=parse_overrides(a.set)))
    return 0


def _set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="config override, repeatable, e.g. --set data.csv.delimiter=';'",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="recpipe",
        description="Raw tables to a promoted, exported CTR model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="synthetic data").add_subparsers(dest="data_command", required=True)
    g = data.add_parser(
        "generate",
        help="generate Taobao or Criteo-like data, or rows for any config, with a known click model",
    )
    g.add_argument(
        "kind", nargs="?", choices=["taobao", "criteo"], help="which data: Taobao display ads or Criteo"
    )
    g.add_argument(
        "--config",
        help="instead of a kind: rows for every input column of this recpipe config (synthetic:config)",
    )
    g.add_argument("--nulls", type=float, default=None, help="--config: share of nulls per column (0.01)")
    g.add_argument("--lists", action="store_true", help="--config: multi-value columns as Parquet lists")
    _set_arg(g)
    g.add_argument("--rows", type=int, required=True, help="rows to generate")
    g.add_argument("--out", required=True, help="output folder (Parquet files and _meta.json)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument(
        "--days",
        type=int,
        default=None,
        help="data with time: the rows split over this many days, written as OUT/dt=YYYYMMDD/ folders",
    )
    g.add_argument("--start", default=None, help="--days: the first day, YYYYMMDD (default 20260101)")
    g.set_defaults(func=cmd_data_generate)

    i = sub.add_parser("ingest", help="source → Parquet train/eval splits")
    i.add_argument("--config", required=True, help="recpipe config YAML, e.g. configs/dlrm_criteo_small.yaml")
    i.add_argument(
        "--source",
        default=None,
        help="odps://project/tables/t[/dt=…], a Parquet/CSV file, folder, glob or URI, synthetic:taobao?rows=N "
        "(default: the config's data.train; a data.eval is kept as the eval split, not re-split)",
    )
    partitions_arg(i)
    i.add_argument("--out", required=True, help="output folder: train/, eval/ and _meta.json")
    i.add_argument(
        "--neg-sample-rate",
        type=float,
        default=None,
        help="keep this fraction of training negatives (default: the config's)",
    )
    _set_arg(i)
    i.set_defaults(func=cmd_ingest)

    f = sub.add_parser("fit", help="fit the FeatureSpec on the training split and write fg.json")
    f.add_argument("--config", required=True, help="recpipe config YAML, e.g. configs/dlrm_criteo_small.yaml")
    f.add_argument("--train", required=True, help="training split written by ingest (Parquet or CSV)")
    f.add_argument("--out", required=True, help="path of fg.json")
    _set_arg(f)
    f.set_defaults(func=cmd_fit)

    p.add_argument("--version", action="version", version=f"recpipe {__version__}")
    for register in _EXTRA:
        register(sub)
    _add_examples(p)
    return p


# One example per command, shown under its --help; the README walks the same folders (runs/demo).
CFG = "configs/dlrm_criteo_small.yaml"
EXAMPLES = {
    "data generate": "recpipe data generate criteo --rows 20000 --out runs/demo/raw",
    "ingest": f"recpipe ingest --config {CFG} --source runs/demo/raw --out runs/demo/data",
    "fit": f"recpipe fit --config {CFG} --train runs/demo/data/train --out runs/demo/data/fg.json",
    "train": f"recpipe train --config {CFG} --train runs/demo/data/train --eval runs/demo/data/eval "
    "--fg runs/demo/data/fg.json --out runs/demo/train --set train.max_steps=30",
    "evaluate": "recpipe evaluate --checkpoint runs/demo/train --data runs/demo/data/eval "
    "--out runs/demo/report.json --min-auc 0.55",
    "export": "recpipe export --checkpoint runs/demo/train --backends jit,onnx,rtp --data runs/demo/data/eval "
    "--out runs/demo/export",
    "register": "recpipe register --exported runs/demo/export --report runs/demo/report.json "
    "--model criteo-dlrm --runs runs/demo",
    "promote": "recpipe promote --model criteo-dlrm --version 1 --runs runs/demo",
    "models list": "recpipe models list criteo-dlrm --runs runs/demo",
    "models lineage": "recpipe models lineage criteo-dlrm --runs runs/demo",
    "run": "recpipe run --runs runs --config configs/dlrm_criteo_small.yaml --rows 20000",
    "pipeline compile": "recpipe pipeline compile --out pipeline.yaml",
    "pipeline submit": "recpipe pipeline submit --host http://localhost:8080 --param workers=2",
    "config import-tzrec": "recpipe config import-tzrec multi_tower_din_taobao.config -o configs/din.yaml",
}


def commands(p: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every leaf command of ``p`` by its name (``"models list"``), for the examples and the tests.

    Args:
        p (argparse.ArgumentParser): a parser with sub-commands.
        prefix (str): the names above ``p``.
    """
    found: dict[str, argparse.ArgumentParser] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                found.update(commands(sp, f"{prefix}{name} ") or {f"{prefix}{name}": sp})
    return found


def _add_examples(p: argparse.ArgumentParser) -> None:
    for name, sp in commands(p).items():
        example = EXAMPLES.get(name)
        lines = [f"example:\n  {example}"] if example else []
        if sp.epilog:  # a command's own epilog (its example) comes first
            lines.insert(0, sp.epilog)
        sp.epilog = "\n\n".join([*lines, EPILOG])
        sp.formatter_class = argparse.RawDescriptionHelpFormatter


# Later layers (train, evaluate, export, registry, pipeline) add their sub-commands here.
_EXTRA: list = []


def exit_code(err: BaseException) -> int:
    """The exit code of a command that raised ``err``: 2 for a bad argument, config, parameter or data
    that does not fit the config (``ValueError``, ``FileNotFoundError``), 1 for anything else, including
    a bad row, a corrupt artifact and a failed training job.

    Args:
        err (BaseException): what the command raised.
    """
    # By name: importing the classes would load torch for every command.
    names = {c.__name__ for c in type(err).__mro__}
    if names & {"TrainingFailed", "BadRowError", "IntegrityError"}:
        return EXIT_ERROR
    if isinstance(err, ValueError | FileNotFoundError):
        return EXIT_USAGE
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run one ``recpipe`` command; returns its exit code (0 success, 1 error, 2 usage or config, 3 gate
    rejected). A failure shows one line and the path of the log file holding its traceback.

    Args:
        argv (list[str] | None): the arguments (default ``sys.argv[1:]``).
    """
    args = build_parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    with Session(args.command, verbose=verbose, argv=sys.argv[1:] if argv is None else argv) as session:
        try:
            return int(args.func(args) or 0)
        except KeyboardInterrupt as err:
            return session.fail(err, 130, "interrupted")
        except Exception as err:  # noqa: BLE001 - every failure becomes one line and an exit code
            code = exit_code(err)
            if "TrainingFailed" in {c.__name__ for c in type(err).__mro__}:
                return session.fail(err, code, f"training failed: {error_line(str(err))}")
            return session.fail(err, code)


# pipelines: stage sub-commands (train, evaluate, export, register, promote, models) and run/pipeline.
from recpipe.cli import pipeline as _pipeline_cli  # noqa: E402
from recpipe.cli import stages_cli as _stages_cli  # noqa: E402

_EXTRA += [_stages_cli.register, _pipeline_cli.register]


# tzrec: `recpipe config import-tzrec` (TorchEasyRec pipeline configs → recpipe YAML).
from recpipe.cli import tzrec_cli as _tzrec_cli  # noqa: E402

_EXTRA += [_tzrec_cli.register]


# predict and serve: batch scoring with an export, MLflow's scoring server for a registered version.
from recpipe.cli import serving_cli as _serving_cli  # noqa: E402

_EXTRA += [_serving_cli.register]


def entry() -> NoReturn:
    """The ``recpipe`` console script: :func:`main`, then the process ends without the interpreter's
    finalization (:mod:`recpipe.fastexit`: 1-2 s once torch and mlflow are loaded)."""
    exit_now(main())


if __name__ == "__main__":
    entry()
