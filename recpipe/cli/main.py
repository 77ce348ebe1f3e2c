"""``recpipe <command> …``: thin entries over ``recpipe.stages`` and the library.

Each sub-command parses primitives and calls one library function; imports are lazy so
``recpipe --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

from recpipe.cli.console import EPILOG, EXIT_ERROR, EXIT_USAGE, Session, error_line


def _print(result: Any) -> None:
    if is_dataclass(result):
        result = asdict(result)
    print(json.dumps(result, indent=2, default=str))


# --------------------------------------------------------------------------------------- commands
def cmd_data_generate(a: argparse.Namespace) -> int:
    from recpipe.data.synthetic import generate

    r = generate(a.kind, a.rows, a.out, seed=a.seed)
    print(f"wrote {r.rows} rows to {a.out} ({len(r.files)} files, {r.seconds:.1f}s)")
    print(f"positive_rate={r.positive_rate:.4f} oracle_auc={r.oracle_auc:.4f}")
    return 0


def cmd_ingest(a: argparse.Namespace) -> int:
    from recpipe.config import load_config, parse_overrides
    from recpipe.features.build import build_feature_spec
    from recpipe.stages import ingest

    cfg = load_config(a.config, parse_overrides(a.set))
    _print(
        ingest.run(
            a.source,
            a.out,
            cfg.data.label,
            cfg.data.split,
            neg_sample_rate=a.neg_sample_rate if a.neg_sample_rate is not None else cfg.data.neg_sample_rate,
            oracle_column=cfg.data.oracle_column,
            csv=cfg.csv_options(),
            spec=build_feature_spec(cfg),
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
    g = data.add_parser("generate", help="generate Taobao or Criteo-like data with a known click model")
    g.add_argument("kind", choices=["taobao", "criteo"])
    g.add_argument("--rows", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    g.set_defaults(func=cmd_data_generate)

    i = sub.add_parser("ingest", help="source → Parquet train/eval splits")
    i.add_argument("--config", required=True)
    i.add_argument(
        "--source", required=True, help="odps://…, a Parquet/CSV path or URI, synthetic:taobao?rows=N"
    )
    i.add_argument("--out", required=True)
    i.add_argument("--neg-sample-rate", type=float, default=None)
    _set_arg(i)
    i.set_defaults(func=cmd_ingest)

    f = sub.add_parser("fit", help="fit the FeatureSpec on the training split and write fg.json")
    f.add_argument("--config", required=True)
    f.add_argument("--train", required=True)
    f.add_argument("--out", required=True, help="path of fg.json")
    _set_arg(f)
    f.set_defaults(func=cmd_fit)

    for register in _EXTRA:
        register(sub)
    return p


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


# predict: batch scoring with an exported model.
from recpipe.cli import predict_cli as _predict_cli  # noqa: E402

_EXTRA += [_predict_cli.register]


if __name__ == "__main__":
    sys.exit(main())
