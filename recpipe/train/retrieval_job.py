"""The retrieval model's training job: what a ``recpipe train`` worker runs for ``model.type: dssm|dssm_v2``.

It reads the training and evaluation splits and the catalogue (``data.negative_sampler``), trains with
:func:`recpipe.train.retrieval.train_retrieval`, scores the evaluation split through the ``evaluate`` the
worker passes (recall@K over the whole catalogue: the trainer imports no evaluation code), and writes what the
later stages read from a ranking run: ``metrics.jsonl``, ``checkpoints/ckpt-<step>`` (DCP, sealed, so
:func:`~recpipe.train.checkpoint.load_model_for_inference` loads it) and ``train_result.json``.

One process only: the retrieval trainer is unsharded and its sampled negatives are shared by the whole batch;
splitting a batch over ranks would need a per-rank sampler and an all-gather of the item side, not built yet.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from recpipe.config import RecpipeConfig
from recpipe.data.negative_sampler import ItemTable, load_item_table
from recpipe.data.sources import open_source
from recpipe.features.spec import FeatureSpec
from recpipe.train.checkpoint import CheckpointMeta, save_checkpoint
from recpipe.train.dist import init_distributed, shutdown
from recpipe.train.result import TrainResult
from recpipe.train.retrieval_check import check_retrieval_train_config

METRICS_FILE = "metrics.jsonl"

# (model, spec, eval rows, catalogue) -> flat metrics ({"recall_at_50": ..., "hit_rate_at_50": ...}).
RetrievalEvaluate = Callable[[torch.nn.Module, FeatureSpec, pa.Table, ItemTable], dict[str, Any]]


def read_rows(uri: str, cfg: RecpipeConfig) -> pa.Table:
    """All rows of ``uri`` in memory (the retrieval trainer draws its batches from one table)."""
    source = open_source(uri, csv=cfg.csv_options())
    return pa.Table.from_batches([sb.batch for sb in source.iter_batches()], schema=source.schema())


def train_retrieval_job(
    cfg: RecpipeConfig,
    spec: FeatureSpec,
    train_uri: str,
    eval_uri: str | None,
    out_dir: Path,
    evaluate: RetrievalEvaluate | None = None,
    environ: Mapping[str, str] | None = None,
) -> TrainResult:
    """Train ``cfg.model`` (a retrieval model) on ``train_uri`` and write its checkpoint and result.

    Args:
        cfg (RecpipeConfig): the config; ``data.negative_sampler`` names the catalogue.
        spec (FeatureSpec): the fitted FeatureSpec.
        train_uri (str), eval_uri (str | None): the splits (rows of positives).
        out_dir (Path): output folder (``metrics.jsonl``, ``checkpoints/``, ``train_result.json``).
        evaluate (RetrievalEvaluate | None): scores the evaluation split at the end (None: no evaluation).
        environ (Mapping | None): the environment for the item table's ``{NAME}`` placeholders (default
            the process's).

    Raises:
        ValueError: a world of more than one process, no ``data.negative_sampler``, or a ``train:`` option
            the retrieval trainer does not implement.

    Example::

        result = train_retrieval_job(cfg, spec, "data/train", "data/eval", Path("runs/x/train"),
                                     evaluate=retrieval_metrics_of(cfg))   # recpipe.eval.retrieval
        result.eval["recall_at_50"]
    """
    from recpipe.train.retrieval import train_retrieval

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise ValueError(
            f"model {cfg.model.type!r}: the retrieval trainer runs in one process (its sampled negatives are "
            f"shared by the whole batch), got a world of {world}: train with nproc_per_node 1 and workers 1"
        )
    check_retrieval_train_config(cfg)
    if cfg.data.negative_sampler is None:
        raise ValueError(
            f"model {cfg.model.type!r}: data.negative_sampler (the item catalogue) is needed to train and to "
            "score recall over the catalogue"
        )
    t0 = time.perf_counter()
    env = dict(os.environ if environ is None else environ)
    items = load_item_table(cfg.data.negative_sampler, cfg.data.params, env)
    rows = read_rows(train_uri, cfg)
    if rows.num_rows < cfg.data.batch_size:
        raise ValueError(
            f"{train_uri}: {rows.num_rows} training rows, fewer than one batch (data.batch_size "
            f"{cfg.data.batch_size})"
        )
    if cfg.train.threads_per_rank:
        torch.set_num_threads(cfg.train.threads_per_rank)
    # The item table's weights are each item's sampling probability: the in-batch log-Q too.
    run = train_retrieval(cfg, spec, rows, items, seed=cfg.train.seed, item_log_q=True, environ=env)
    train_seconds = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_metrics(out_dir / METRICS_FILE, run.losses, cfg.train.log_every_steps)
    t_eval = time.perf_counter()
    metrics = None
    if evaluate is not None and eval_uri:
        metrics = evaluate(run.model, spec, read_rows(eval_uri, cfg), items)
    eval_seconds = time.perf_counter() - t_eval
    steps = len(run.losses)
    t_ckpt = time.perf_counter()
    ckpt = _save(out_dir, run.model, cfg, spec, steps, rows.num_rows)
    ckpt_seconds = time.perf_counter() - t_ckpt
    rows_trained = steps * cfg.data.batch_size
    window = run.losses[-cfg.train.log_every_steps :]
    rate = rows_trained / max(train_seconds, 1e-9)
    result = TrainResult(
        steps=steps,
        epochs_completed=rows_trained // rows.num_rows,
        rows_trained=rows_trained,
        seconds=round(time.perf_counter() - t0, 3),
        rows_per_second=rate,
        steady_rows_per_second=rate,
        rows_per_cpu_second=rate,
        final_loss=sum(window) / len(window) if window else None,
        eval=metrics,
        checkpoint=str(ckpt),
        world_size=1,
        rows={"rows_read": rows.num_rows, "rows_used": rows.num_rows, "rows_skipped": 0},
        train_seconds=train_seconds,
        eval_seconds=eval_seconds,
        checkpoint_seconds=ckpt_seconds,
        final_checkpoint_seconds=ckpt_seconds,
    )
    result.write(out_dir)
    return result


def _write_metrics(path: Path, losses: list[float], every: int) -> None:
    """One line per ``every`` steps: the mean loss of the window (the ranking loop's ``metrics.jsonl`` shape)."""
    lines = []
    for end in range(every, len(losses) + every, every):
        window = losses[end - every : end]
        if window:
            step = min(end, len(losses))
            lines.append(json.dumps({"step": step, "loss": sum(window) / len(window)}))
    path.write_text("".join(line + "\n" for line in lines))


def _save(
    out_dir: Path, model: torch.nn.Module, cfg: RecpipeConfig, spec: FeatureSpec, steps: int, epoch_rows: int
) -> Path:
    """The model as a one-rank DCP checkpoint, the ranking loop's format. No optimizer state: a retrieval run
    does not resume (it trains again from the start)."""
    env = init_distributed()
    try:
        meta = CheckpointMeta(
            step=steps,
            epoch=(steps * cfg.data.batch_size) // epoch_rows,
            position=0,
            epoch_rows=epoch_rows,
            rows_trained=steps * cfg.data.batch_size,
            world_size=1,
            global_batch_size=cfg.data.batch_size,
            config_digest=cfg.digest(),
            spec_digest=spec.digest(),
        )
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return save_checkpoint(out_dir, meta, state, {}, cfg, spec, cfg.train.keep_last_checkpoints)
    finally:
        shutdown(env)
