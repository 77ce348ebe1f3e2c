"""The per-process training entry: ``python -m recpipe.launch.worker --config ... --train ... --set ...``.

Every launcher starts exactly this (:func:`recpipe.launch.command.worker_command`): alone, it forms a
1-process group; under torchrun (here, or in a PyTorchJob's pods) it joins the group torchrun's environment
names (see :mod:`recpipe.train.dist`). Arguments only, the environment is not a switch. Errors are recorded
for torchrun (``@record``), which shows the failing rank's traceback.

It stands above both the trainer and evaluation: :func:`train` is :func:`recpipe.train.loop.train` with
the periodic and final evaluation of :func:`recpipe.eval.checkpoint.evaluate_distributed` (the trainer
imports no evaluation code). A retrieval model (``RETRIEVAL_MODELS``) trains through
:func:`recpipe.train.retrieval_job.train_retrieval_job` instead, scored by recall@K over the catalogue.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from recpipe.config import RecpipeConfig, load_config, parse_overrides
from recpipe.config.catalogue import RETRIEVAL_MODELS
from recpipe.eval.checkpoint import evaluate_distributed
from recpipe.eval.retrieval import retrieval_metrics
from recpipe.fastexit import exit_now
from recpipe.features.fit import check_spec_matches, fit_feature_spec
from recpipe.features.spec import FG_JSON, FeatureSpec
from recpipe.train.loop import train as train_loop
from recpipe.train.retrieval_job import RetrievalEvaluate, train_retrieval_job

# The trainer with its periodic and final evaluation on ``eval_uri`` (the oracle AUC of ``data.oracle_column``
# included): what every worker runs, and what a caller that trains in its own process (tests, benchmarks) calls,
# as ``train(cfg, spec, train_uri, eval_uri, out_dir, resume=True)``.
train = functools.partial(train_loop, evaluate=evaluate_distributed)


def retrieval_evaluate(cfg: RecpipeConfig) -> RetrievalEvaluate:
    """The final evaluation of a retrieval run: recall@K and hit-rate@K at ``eval.recall_at_k``."""
    return functools.partial(retrieval_metrics, ks=tuple(cfg.eval.recall_at_k))


def find_spec(cfg: RecpipeConfig, spec_path: str | None, out_dir: Path, train_uri: str) -> FeatureSpec:
    """The FeatureSpec: ``spec_path``, else ``fg.json`` in the output folder or beside the training data,
    else fitted from the training data (deterministic, so every rank fits the same one)."""
    if spec_path:
        spec = FeatureSpec.load(spec_path)
        check_spec_matches(spec, cfg, spec_path)  # fitted from another feature definition: refused
        return spec
    for candidate in (out_dir / FG_JSON, Path(train_uri) / FG_JSON, Path(train_uri).parent / FG_JSON):
        if candidate.is_file():
            spec = FeatureSpec.load(candidate)
            check_spec_matches(spec, cfg, str(candidate))
            return spec
    from recpipe.data.sources import open_source

    return fit_feature_spec(cfg, open_source(train_uri, csv=cfg.csv_options()))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m recpipe.launch.worker", description=__doc__)
    p.add_argument("--config", required=True, help="recpipe config YAML")
    p.add_argument("--train", required=True, help="training data URI")
    p.add_argument("--eval", default=None, help="evaluation data URI (optional)")
    p.add_argument(
        "--out", required=True, help="output folder: metrics.jsonl, checkpoints/, train_result.json"
    )
    p.add_argument("--spec", default=None, help="fitted FeatureSpec (fg.json); default: found or fitted")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable"
    )
    p.add_argument("--no-resume", action="store_true", help="start fresh even if checkpoints exist")
    return p


@record
def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, train, return 0 (errors propagate: torchrun records them)."""
    args = build_parser().parse_args(argv)
    cfg = load_config(args.config, parse_overrides(args.set))
    out_dir = Path(args.out)
    spec = find_spec(cfg, args.spec, out_dir, args.train)
    if cfg.model.type in RETRIEVAL_MODELS:
        train_retrieval_job(cfg, spec, args.train, args.eval, out_dir, evaluate=retrieval_evaluate(cfg))
    else:
        train(cfg, spec, args.train, args.eval, out_dir, resume=not args.no_resume)
    return 0


if __name__ == "__main__":
    exit_now(main())  # a failure raises out of main: torchrun's record, traceback and exit code as ever
