"""Exact binary AUC with correct tie handling (Mann-Whitney U with average ranks).

At the bottom of the library (numpy only) because every layer needs it: the synthetic generators
report their oracle AUC, training and evaluation score models, export compares backends.
"""

from __future__ import annotations

import numpy as np


def binary_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC of ``scores`` for binary ``labels``; tied scores count one half.

    Args:
        labels (np.ndarray): ``(N,)`` 0/1 labels.
        scores (np.ndarray): ``(N,)`` real-valued scores (probabilities or logits).

    Returns:
        float: the AUC, or ``nan`` when only one class is present.

    Example::

        >>> binary_auc(np.array([0, 1, 1, 0]), np.array([0.1, 0.9, 0.5, 0.5]))
        0.875
    """
    labels = np.asarray(labels).astype(bool, copy=False).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if labels.shape != scores.shape:
        raise ValueError(f"labels {labels.shape} and scores {scores.shape} differ in shape")
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Average rank of each run of equal scores (1-based ranks).
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [sorted_scores.size]))
    avg_rank = (starts + ends + 1) / 2.0
    ranks = np.repeat(avg_rank, ends - starts)
    pos_rank_sum = ranks[labels[order]].sum()
    return float((pos_rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
