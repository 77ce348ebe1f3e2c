"""How closely two models' logits agree on the same labelled rows, task by task: the largest logit
difference and both AUCs (the metric side of an export's parity check, :mod:`recpipe.export.parity`).

Torch-free (numpy and the shared exact AUC), so a serving process can check agreement without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recpipe.auc import binary_auc

# Two AUCs agree when they are equal to this many decimals.
AUC_DECIMALS = 4


@dataclass(frozen=True)
class TaskAgreement:
    """One task's agreement of ``backend`` logits with ``reference`` logits.

    Args:
        max_abs_logit_diff (float): ``max |backend - reference|`` (``inf`` when a backend logit is not finite).
        auc_reference (float), auc_backend (float): both AUCs on the rows' labels.
        same_auc (bool): the AUCs agree to :data:`AUC_DECIMALS` decimals (or both are undefined).
    """

    max_abs_logit_diff: float
    auc_reference: float
    auc_backend: float
    same_auc: bool


def by_task(logits: np.ndarray) -> np.ndarray:
    """Logits as ``(N, T)`` float64 (``(N,)`` and ``(N, 1)`` are one task)."""
    x = np.asarray(logits, np.float64)
    return x.reshape(x.shape[0], -1)


def logit_agreement(
    reference: np.ndarray, backend: np.ndarray, labels: np.ndarray, tasks: list[str]
) -> dict[str, TaskAgreement]:
    """Every task's :class:`TaskAgreement`, by name in ``tasks`` (one per logit column).

    Args:
        reference (np.ndarray), backend (np.ndarray): logits ``(N,)`` or ``(N, T)``.
        labels (np.ndarray): ``(N,)`` or ``(N, T)`` 0/1 labels.
        tasks (list[str]): the task (label column) names, in column order.

    Raises:
        ValueError: the two logit arrays differ in shape.
    """
    reference, backend = by_task(reference), by_task(backend)
    if reference.shape != backend.shape:
        raise ValueError(f"backend returned logits {backend.shape} for eager logits {reference.shape}")
    labels = np.asarray(labels).reshape(reference.shape[0], -1)
    finite = bool(np.isfinite(backend).all())
    out = {}
    for t, name in enumerate(tasks):
        e, b, y = reference[:, t], backend[:, t], labels[:, t]
        diff = float(np.max(np.abs(e - b))) if finite else float("inf")
        auc_e, auc_b = binary_auc(y, e), binary_auc(y, b)
        same = abs(auc_e - auc_b) < 0.5 * 10**-AUC_DECIMALS or (np.isnan(auc_e) and np.isnan(auc_b))
        out[name] = TaskAgreement(diff, auc_e, auc_b, bool(same))
    return out
