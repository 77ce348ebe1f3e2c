"""Per-task metrics of a multi-task model: one :class:`MetricAccumulator` per label column.

A single-task evaluation has labels and logits ``(N,)``; a multi-task one ``(N, T)``, one column per label
of ``FeatureSpec.task_labels`` (the primary label first; a domain-tower model's logits are those of each row's
domain tower, :func:`~recpipe.models.blocks.domains.select_domain_tasks`). The primary task's metrics stay the report's
top-level numbers (what single-task tools read); every task's are under ``tasks[<label>]``.

Negative down-sampling keeps every row of the primary label's positives and a fraction of its negatives,
so only the primary task's predictions are re-calibrated with ``neg_sample_rate``; the other tasks' are
reported as predicted (their base rate under that sampling is not a function of the rate alone).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recpipe.eval.metrics import MetricAccumulator


def task_accumulators(
    names: list[str], neg_sample_rate: float = 1.0, from_logits: bool = True
) -> dict[str, MetricAccumulator]:
    """An empty accumulator per label column in ``names`` (the primary first: only its predictions are
    re-calibrated with ``neg_sample_rate``); :func:`update_tasks` fills them."""
    return {
        name: MetricAccumulator(from_logits=from_logits, neg_sample_rate=neg_sample_rate if t == 0 else 1.0)
        for t, name in enumerate(names)
    }


def update_tasks(
    accumulators: dict[str, MetricAccumulator],
    labels: np.ndarray,
    preds: np.ndarray,
    groups: np.ndarray | None = None,
    oracle: np.ndarray | None = None,
) -> dict[str, MetricAccumulator]:
    """Add rows to every task's accumulator: ``labels``/``preds`` ``(N,)`` (one task) or ``(N, T)``, one
    column per accumulator in order; ``oracle`` is the primary task's. Returns ``accumulators``.

    Raises:
        ValueError: not one column per task, or labels and predictions differ in shape.
    """
    if labels.shape != preds.shape:
        raise ValueError(f"labels {labels.shape} and predictions {preds.shape} differ in shape")
    columns = 1 if labels.ndim == 1 else labels.shape[1]
    if len(accumulators) != columns:
        raise ValueError(f"{columns} label column(s) but tasks {list(accumulators)}")
    for t, acc in enumerate(accumulators.values()):
        y = labels if labels.ndim == 1 else labels[:, t]
        p = preds if preds.ndim == 1 else preds[:, t]
        acc.update(labels=y, preds=p, groups=groups, oracle=oracle if t == 0 else None)
    return accumulators


def task_metrics(accumulators: dict[str, MetricAccumulator]) -> dict[str, dict[str, Any]]:
    """Every task's scalar metrics (``auc``, ``gauc``, ``logloss``, ...), by label column; empty for a
    single-task model (its numbers are the report's own)."""
    if len(accumulators) < 2:
        return {}
    return {name: acc.compute().to_dict() for name, acc in accumulators.items()}
