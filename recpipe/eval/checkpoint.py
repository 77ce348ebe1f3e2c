"""Scoring a model over a dataset: inside training (every rank, sharded model: the trainer's
:class:`~recpipe.train.loop.Evaluate`) or from a checkpoint (one process, any writer world size). Every row
is counted exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torchrec.distributed import DistributedModelParallel

from recpipe.batch import Batch
from recpipe.config import CsvOptions
from recpipe.eval.metrics import gather_across_ranks, weighted_auc
from recpipe.eval.report import EvalReport, build_report
from recpipe.eval.tasks import task_accumulators, task_metrics, update_tasks
from recpipe.features.fg import FGStats
from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.domains import select_domain_tasks
from recpipe.train.checkpoint import CheckpointMeta, load_model_for_inference, resolve_checkpoint
from recpipe.train.data import StepBatches


def _task_logits(model: nn.Module, batch: Batch, spec: FeatureSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's logits and labels, a column per task: a domain-tower model's of each row's domain tower
    (the trainer's TrainModel reads them so already; a plain model gives every domain's)."""
    if isinstance(model, DistributedModelParallel):  # a PipelineStep: (loss, (logits, ...))
        logits = model(batch)[1][0]
        return logits, batch.labels if spec.domain_label is None else batch.labels[:, :-1]
    logits = model(batch.dense, batch.sparse)
    if spec.domain_label is None:
        return logits, batch.labels
    return select_domain_tasks(logits, batch.labels, spec.domain_num)


@torch.no_grad()
def predict_dataset(
    model: nn.Module,
    spec: FeatureSpec,
    uri: str,
    global_batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    on_bad_row: Literal["error", "skip"] = "error",
    csv: CsvOptions | None = None,
    device: torch.device | None = None,
    stats: FGStats | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Labels, logits and GAUC groups of this rank's rows of ``uri``.

    Rank ``r`` of ``world_size`` predicts its part (its ``rows_per_rank``) of every global batch of
    ``global_batch_size`` rows, as in training (see :mod:`recpipe.train.data`), so the ranks together
    cover each row once and run the same number of batches, which a sharded (DistributedModelParallel)
    model needs: then every rank must call this. A plain model (``forward(dense, sparse) -> logits``)
    works with any ``world_size``.

    Args:
        model (nn.Module): a plain ranking model, or the trainer's DMP-wrapped PipelineStep.
        spec (FeatureSpec): FG for ``uri``.
        uri (str): the data.
        global_batch_size (int): rows per batch over all ranks (the config's ``data.batch_size``); one
            process alone predicts all of them.
        rank (int), world_size (int): this process's share.
        on_bad_row (str), csv (CsvOptions | None): FG and CSV options.
        device (torch.device | None): where batches go (default: the model's device, else CPU).
        stats (FGStats | None): receives this rank's rows read / used / skipped / truncated.

    Returns:
        tuple: ``labels (N,) float32``, ``logits (N,) float32`` (``(N, T)`` both for a multi-task model; a
        model with domain towers' ``(N, T)`` of each row's domain tower and its task labels), ``groups (N,)
        int64`` or None.

    Example::

        model, spec, cfg = load_model_for_inference("runs/x/train")
        labels, logits, groups = predict_dataset(model, spec, "runs/x/data/eval", 8192)
    """
    if device is None:
        p = next(iter(model.parameters()), None)
        device = p.device if p is not None and p.device.type != "meta" else torch.device("cpu")
    was_training = model.training
    model.eval()
    labels: list[np.ndarray] = []
    logits: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    reader = StepBatches(uri, spec, global_batch_size, rank, world_size, on_bad_row=on_bad_row, csv=csv)
    try:
        for sb in reader:
            out, label = _task_logits(model, sb.batch.to(device), spec)
            out, label = out.float().cpu(), label.cpu()
            n = sb.real_rows
            labels.append(label[:n].numpy())
            logits.append(out[:n].numpy())
            if sb.batch.groups is not None:
                groups.append(sb.batch.groups[:n].numpy())
    finally:
        model.train(was_training)
    if stats is not None:
        stats.add(reader.stats)
    cat = np.concatenate
    return (
        cat(labels) if labels else np.zeros(0, np.float32),
        cat(logits) if logits else np.zeros(0, np.float32),
        cat(groups) if groups else None,
    )


def evaluate_distributed(
    model: nn.Module,
    spec: FeatureSpec,
    uri: str,
    global_batch_size: int,
    rank: int,
    world_size: int,
    neg_sample_rate: float = 1.0,
    group: Any = None,
    on_bad_row: Literal["error", "skip"] = "error",
    csv: CsvOptions | None = None,
    oracle_column: str | None = None,
) -> dict[str, Any]:
    """Metrics of ``model`` over all of ``uri``, computed by every rank together; the result on every
    rank (predictions are gathered over ``group``, a gloo group, the default one when None): the
    :class:`~recpipe.eval.metrics.EvalMetrics` fields, and a multi-task model's every task under ``tasks``.
    ``oracle_auc`` is the AUC of ``oracle_column`` against the primary label over every row of ``uri``
    (a Parquet split, no row skipped), the same as :func:`evaluate_checkpoint` reports; else None."""
    labels, logits, groups = predict_dataset(
        model, spec, uri, global_batch_size, rank, world_size, on_bad_row, csv
    )
    accs = update_tasks(task_accumulators(spec.task_labels, neg_sample_rate), labels, logits, groups)
    if world_size > 1:
        accs = {name: gather_across_ranks(acc, group=group) for name, acc in accs.items()}
    out = (
        accs[spec.label].compute().to_dict()
    )  # the primary task's numbers; a multi-task model's all under "tasks"
    tasks = task_metrics(accs)
    if tasks:
        out["tasks"] = tasks
    if oracle_column and on_bad_row == "error":
        out["oracle_auc"] = _oracle_auc(uri, spec.label, oracle_column, int(out["rows"]))
    return out


def _oracle_auc(uri: str, label: str, oracle_column: str, rows: int) -> float | None:
    """AUC of the data's true probabilities against its labels (the model's predictions play no part),
    when ``uri`` is Parquet with both columns and the ``rows`` the model was scored on."""
    table = _read_columns(uri, [label, oracle_column])
    if table is None or table.num_rows != rows:
        return None
    return float(weighted_auc(_floats(table.column(label)), _floats(table.column(oracle_column)), None))


def _read_columns(uri: str, columns: list[str]) -> Any:
    """``columns`` of a Parquet source as a pyarrow Table; None when it is not Parquet or lacks one."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(uri, columns=columns)
    except (KeyError, ValueError, OSError):
        return None


def _floats(column: Any) -> np.ndarray:
    """A label or probability column as float64, nulls 0: numbers, booleans or numeric text (as FG reads
    a label)."""
    import pyarrow as pa

    return np.asarray(column.cast(pa.float64()).fill_null(0.0).to_numpy(), dtype=np.float64)


def evaluate_checkpoint(
    ckpt_dir: str | Path,
    data_uri: str,
    global_batch_size: int | None = None,
    on_bad_row: Literal["error", "skip"] | None = None,
    threshold: float = 0.5,
    oracle_column: str | None = None,
) -> EvalReport:
    """The evaluation report (AUC, GAUC, logloss, calibration, ROC, confusion at ``threshold``) of a
    checkpoint, written by any number of ranks, on ``data_uri``, in this process alone.

    Args:
        ckpt_dir (str | Path): a ``ckpt-<step>`` folder or a training output folder (its latest).
        data_uri (str): evaluation data.
        global_batch_size (int | None): rows per batch (default: the config's ``data.batch_size``).
        on_bad_row (str | None): FG's bad-row policy (default: the config's).
        threshold (float): decision threshold of the confusion matrix.
        oracle_column (str | None): the data's true click probability, if it has one: its AUC is reported
            (only when no row can be skipped, so the rows line up with the predictions).

    Returns:
        EvalReport: metrics, curves and ``model`` (``checkpoint``, ``step``, ``config_digest``).

    Example::

        evaluate_checkpoint("runs/x/train", "runs/x/data/eval").auc   # 0.74
    """
    ckpt = resolve_checkpoint(ckpt_dir)
    model, spec, cfg = load_model_for_inference(ckpt)
    policy = on_bad_row or cfg.data.on_bad_row
    fg_stats = FGStats()
    labels, logits, groups = predict_dataset(
        model,
        spec,
        data_uri,
        global_batch_size or cfg.data.batch_size,
        on_bad_row=policy,
        csv=cfg.csv_options(),
        stats=fg_stats,
    )
    oracle = None
    if oracle_column and policy == "error":  # rows in file order, none dropped
        table = _read_columns(data_uri, [oracle_column])
        if table is not None and table.num_rows == len(labels):
            oracle = _floats(table.column(oracle_column))
    accs = update_tasks(
        task_accumulators(spec.task_labels, cfg.data.neg_sample_rate), labels, logits, groups, oracle
    )
    info = {"checkpoint": str(ckpt), "step": CheckpointMeta.read(ckpt).step, "config_digest": cfg.digest()}
    rows = {
        "rows_read": fg_stats.rows_read,
        "rows_used": fg_stats.rows_emitted,
        "rows_skipped": fg_stats.rows_skipped,
        "truncated_histories": fg_stats.truncated_histories,
    }
    return build_report(
        accs[spec.label], threshold=threshold, model_info=info, tasks=task_metrics(accs), data_rows=rows
    )
