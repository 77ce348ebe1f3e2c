"""Streaming evaluation metrics for CTR models: exact AUC, GAUC, logloss, calibration.

Batches are collected as they come (numpy arrays or torch tensors) and every metric is computed once
at the end from all rows, so AUC is exact rather than a bucketed approximation. ``state()`` and
``merge()`` let each rank evaluate its own shard and count every row exactly once after
``gather_across_ranks``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from recpipe.auc import binary_auc

if TYPE_CHECKING:
    import torch

# Probabilities are clipped to [EPS, 1 - EPS] for logloss; logits to the matching +-LOGIT_CLIP.
EPS = 1e-7
LOGIT_CLIP = math.log((1.0 - EPS) / EPS)

ArrayLike: TypeAlias = "np.ndarray | torch.Tensor | Sequence[float] | Sequence[int]"


def to_numpy(x: ArrayLike) -> np.ndarray:
    """A flat numpy view of ``x`` (a torch tensor is detached and moved to CPU first).

    torch is not imported here: a tensor exists only where it was (the register and gate steps read
    reports and numpy arrays, and their processes do without torch's ~1.5 s import)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16 or x.dtype == torch.float16:
            x = x.float()
        x = x.numpy()
    return np.asarray(x).reshape(-1)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function in float64."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def recalibrate(p: Any, neg_sample_rate: float) -> Any:
    """Map probabilities predicted by a model trained on negative-down-sampled data back to the
    original distribution: ``p / (p + (1 - p) / rate)``.

    Args:
        p (float | np.ndarray | torch.Tensor): predicted probabilities.
        neg_sample_rate (float): fraction of negatives kept at training time, in ``(0, 1]``.

    Returns:
        The re-calibrated probabilities, of the same type as ``p``.

    Example::

        >>> recalibrate(0.5, 0.1)  # odds 1:1 on 10%-sampled negatives are 1:10 in reality
        0.0909...
    """
    if not 0.0 < neg_sample_rate <= 1.0:
        raise ValueError(f"neg_sample_rate must be in (0, 1], got {neg_sample_rate}")
    return p / (p + (1.0 - p) / neg_sample_rate)


def _check_labels(labels: np.ndarray) -> np.ndarray:
    if labels.size and not np.all((labels == 0) | (labels == 1)):
        bad = np.unique(labels[(labels != 0) & (labels != 1)])[:5]
        raise ValueError(f"labels must be 0 or 1, found {bad.tolist()}")
    return labels.astype(np.int8, copy=False)


def logloss(
    labels: np.ndarray,
    preds: np.ndarray,
    *,
    from_logits: bool,
    weights: np.ndarray | None = None,
) -> float:
    """Mean binary cross-entropy; probabilities clipped to ``[EPS, 1-EPS]`` (logits to the same range).

    From logits it is ``max(x, 0) - x*y + log1p(exp(-|x|))``, which never overflows.
    """
    y = np.asarray(labels, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    if from_logits:
        x = np.clip(np.asarray(preds, dtype=np.float64), -LOGIT_CLIP, LOGIT_CLIP)
        loss = np.maximum(x, 0.0) - x * y + np.log1p(np.exp(-np.abs(x)))
    else:
        p = np.clip(np.asarray(preds, dtype=np.float64), EPS, 1.0 - EPS)
        loss = -(y * np.log(p) + (1.0 - y) * np.log1p(-p))
    if weights is None:
        return float(loss.mean())
    return float(np.sum(loss * weights) / np.sum(weights))


@dataclass(frozen=True)
class GroupedAuc:
    """Per-group AUC (``nan`` for a group with a single class) and each group's counts."""

    auc: np.ndarray
    positives: np.ndarray
    negatives: np.ndarray
    rows: np.ndarray


def grouped_auc(
    groups: np.ndarray, labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None
) -> GroupedAuc:
    """Exact (tie-correct, optionally weighted) AUC of every group, in one sort and no Python loop.

    Rows are sorted by (group, score); runs of equal (group, score) are tie blocks. A positive in a
    block beats every negative in lower blocks of its group and half the negatives of its own block:
    ``AUC_g = sum_blocks pos_w * (neg_w_below + neg_w_block / 2) / (P_g * N_g)``.

    Args:
        groups (np.ndarray): ``(N,)`` group ids (any sortable dtype).
        labels (np.ndarray): ``(N,)`` 0/1 labels.
        scores (np.ndarray): ``(N,)`` scores; only their order matters.
        weights (np.ndarray, optional): ``(N,)`` non-negative row weights.
    """
    groups = np.asarray(groups)
    if groups.dtype == object:  # e.g. user ids from pandas, possibly with None: sort as strings
        groups = groups.astype(str)
    _, codes = np.unique(groups, return_inverse=True)
    codes = codes.reshape(-1)
    scores = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((scores, codes))
    g, s = codes[order], scores[order]
    y = np.asarray(labels, dtype=np.float64)[order]
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    n = g.size
    if n == 0:
        empty = np.zeros(0)
        return GroupedAuc(empty, empty, empty, empty)
    new_block = np.ones(n, dtype=bool)
    new_block[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    block = np.cumsum(new_block) - 1
    block_group = g[new_block]
    pos_w = np.bincount(block, weights=w * y)
    neg_w = np.bincount(block, weights=w * (1.0 - y))
    # Negative weight in strictly lower blocks of the same group.
    neg_before = np.cumsum(neg_w) - neg_w
    first_block_of_group = np.flatnonzero(np.r_[True, block_group[1:] != block_group[:-1]])
    group_offset = neg_before[first_block_of_group]
    blocks_per_group = np.diff(np.r_[first_block_of_group, block_group.size])
    neg_below = neg_before - np.repeat(group_offset, blocks_per_group)
    wins = pos_w * (neg_below + 0.5 * neg_w)
    n_groups = int(block_group.max()) + 1
    u = np.bincount(block_group, weights=wins, minlength=n_groups)
    p = np.bincount(block_group, weights=pos_w, minlength=n_groups)
    q = np.bincount(block_group, weights=neg_w, minlength=n_groups)
    rows = np.bincount(g, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = np.where((p > 0) & (q > 0), u / (p * q), np.nan)
    return GroupedAuc(auc=auc, positives=p, negatives=q, rows=rows)


def weighted_auc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Exact AUC; with ``weights`` equal to sklearn's ``roc_auc_score(..., sample_weight=weights)``."""
    if weights is None:
        return binary_auc(labels, scores)
    res = grouped_auc(np.zeros(np.asarray(labels).size, dtype=np.int8), labels, scores, weights)
    return float(res.auc[0]) if res.auc.size else float("nan")


def gauc(
    groups: np.ndarray, labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None
) -> tuple[float, int, int]:
    """Group AUC: the impression-weighted mean of per-group AUC over groups with both classes.

    Impressions are rows, or the sum of row weights when ``weights`` is given.

    Returns:
        tuple[float, int, int]: (gauc, groups used, groups skipped for having a single class).
    """
    res = grouped_auc(groups, labels, scores, weights)
    valid = ~np.isnan(res.auc)
    used, skipped = int(valid.sum()), int((~valid).sum())
    if used == 0:
        return float("nan"), 0, skipped
    impressions = res.rows if weights is None else res.positives + res.negatives
    imp = impressions[valid].astype(np.float64)
    return float(np.sum(res.auc[valid] * imp) / np.sum(imp)), used, skipped


def roc_curve(
    labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None, max_points: int = 200
) -> dict[str, list[float]]:
    """ROC points (fpr, tpr, threshold) at distinct score thresholds, thinned to at most ``max_points``.

    A row is predicted positive when ``score >= threshold``. The first point (0, 0) has threshold
    ``max(score) + 1`` (sklearn's old convention, which keeps the list JSON-safe).
    """
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    y = np.asarray(labels, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(-s, kind="mergesort")
    s, y, w = s[order], y[order], w[order]
    last_of_run = np.r_[s[1:] != s[:-1], True] if s.size else np.zeros(0, dtype=bool)
    tps = np.cumsum(w * y)[last_of_run]
    fps = np.cumsum(w * (1.0 - y))[last_of_run]
    thresholds = s[last_of_run]
    tps, fps = np.r_[0.0, tps], np.r_[0.0, fps]
    thresholds = np.r_[(thresholds[0] + 1.0) if thresholds.size else 1.0, thresholds]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
    if fpr.size > max_points:
        # Keep points evenly spaced along the curve's length, always including both ends.
        step = np.hypot(np.diff(np.nan_to_num(fpr)), np.diff(np.nan_to_num(tpr)))
        length = np.r_[0.0, np.cumsum(step)]
        targets = np.linspace(0.0, length[-1], max_points)
        keep = np.unique(np.r_[0, np.searchsorted(length, targets), fpr.size - 1].clip(0, fpr.size - 1))
        fpr, tpr, thresholds = fpr[keep], tpr[keep], thresholds[keep]
        if fpr.size > max_points:  # unique() may leave one extra only when rounding collides
            sel = np.r_[np.linspace(0, fpr.size - 2, max_points - 1).astype(int), fpr.size - 1]
            fpr, tpr, thresholds = fpr[sel], tpr[sel], thresholds[sel]
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "thresholds": thresholds.tolist()}


def calibration_curve(
    labels: np.ndarray, probs: np.ndarray, weights: np.ndarray | None = None, n_bins: int = 10
) -> dict[str, list[float]]:
    """Mean prediction vs observed positive rate in ``n_bins`` equal-count bins of the prediction.

    Equal-count (quantile) bins because CTR predictions crowd near zero; equal-width bins would put
    almost every row in the first bin.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=np.float64)
    if p.size == 0:
        return {"mean_prediction": [], "observed_rate": [], "count": []}
    edges = np.unique(np.quantile(p, np.linspace(0.0, 1.0, n_bins + 1)))
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, max(edges.size - 2, 0))
    nb = max(edges.size - 1, 1)
    wsum = np.bincount(idx, weights=w, minlength=nb)
    keep = wsum > 0
    mean_pred = np.bincount(idx, weights=w * p, minlength=nb)[keep] / wsum[keep]
    observed = np.bincount(idx, weights=w * y, minlength=nb)[keep] / wsum[keep]
    count = np.bincount(idx, minlength=nb)[keep]
    return {
        "mean_prediction": mean_pred.tolist(),
        "observed_rate": observed.tolist(),
        "count": count.astype(float).tolist(),
    }


@dataclass(frozen=True)
class EvalMetrics:
    """The scalar metrics of one evaluation; ``nan`` where undefined (e.g. a single class)."""

    auc: float
    gauc: float
    gauc_users: int
    gauc_skipped_users: int
    logloss: float
    calibration: float
    mean_prediction: float
    positive_rate: float
    rows: int
    oracle_auc: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_COLUMNS = ("labels", "scores", "groups", "weights", "oracle")


class MetricAccumulator:
    """Collects evaluation batches and computes exact metrics over all of them.

    Args:
        from_logits (bool): predictions are logits (True) or probabilities (False).
        neg_sample_rate (float): fraction of negatives the model saw in training; predictions are
            re-calibrated to the original distribution for logloss, calibration and the confusion
            matrix (AUC and GAUC do not change: the map is monotone).

    Example::

        >>> acc = MetricAccumulator(from_logits=True)
        >>> acc.update(labels=torch.tensor([0, 1, 1]), preds=torch.tensor([-2.0, 0.5, 3.0]),
        ...            groups=torch.tensor([7, 7, 9]))  # B = 3 rows, 2 users
        >>> m = acc.compute()
        >>> m.rows, m.auc, m.gauc_users, m.gauc_skipped_users
        (3, 1.0, 1, 1)
    """

    def __init__(self, from_logits: bool = True, neg_sample_rate: float = 1.0) -> None:
        if not 0.0 < neg_sample_rate <= 1.0:
            raise ValueError(f"neg_sample_rate must be in (0, 1], got {neg_sample_rate}")
        self.from_logits = from_logits
        self.neg_sample_rate = float(neg_sample_rate)
        self._chunks: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
        # Which optional columns this accumulator carries; fixed by the first non-empty batch.
        self._has: dict[str, bool] | None = None
        self._cache: dict[str, np.ndarray | None] | None = None
        self._metrics: EvalMetrics | None = None  # compute()'s result until the next rows arrive

    # ----------------------------------------------------------------------------- collecting
    def update(
        self,
        labels: ArrayLike,
        preds: ArrayLike,
        groups: ArrayLike | None = None,
        weights: ArrayLike | None = None,
        oracle: ArrayLike | None = None,
    ) -> None:
        """Add one batch of ``B`` rows: labels ``(B,)``, predictions ``(B,)`` and optional group ids
        (e.g. user ids), row weights and oracle true click probabilities, each ``(B,)``."""
        cols = {
            "labels": _check_labels(to_numpy(labels)),
            "scores": to_numpy(preds),
            "groups": None if groups is None else to_numpy(groups),
            "weights": None if weights is None else to_numpy(weights).astype(np.float64, copy=False),
            "oracle": None if oracle is None else to_numpy(oracle),
        }
        n = cols["labels"].size
        for k, v in cols.items():
            if v is not None and v.size != n:
                raise ValueError(f"{k} has {v.size} rows but labels have {n}")
        if cols["scores"].dtype.kind not in "fiu":
            raise ValueError(f"predictions must be numeric, got dtype {cols['scores'].dtype}")
        if n == 0:
            return
        if cols["weights"] is not None and np.any(cols["weights"] < 0):
            raise ValueError("weights must be non-negative")
        self._add(cols)

    def _add(self, cols: dict[str, np.ndarray | None]) -> None:
        has = {k: cols[k] is not None for k in ("groups", "weights", "oracle")}
        if self._has is None:
            self._has = has
        elif has != self._has:
            diff = sorted(k for k in has if has[k] != self._has[k])
            raise ValueError(f"every batch must carry the same optional columns; {diff} differ")
        for k, v in cols.items():
            if v is not None:
                self._chunks[k].append(v)
        self._cache = None
        self._metrics = None

    @property
    def rows(self) -> int:
        return int(sum(c.size for c in self._chunks["labels"]))

    # ------------------------------------------------------------------------ merge / state
    def state(self) -> dict[str, Any]:
        """A picklable snapshot (concatenated columns) for ``merge`` on another rank or process."""
        arrays = self._arrays()
        return {
            "from_logits": self.from_logits,
            "neg_sample_rate": self.neg_sample_rate,
            "columns": {k: v for k, v in arrays.items() if v is not None} if self.rows else {},
        }

    def merge(self, other: MetricAccumulator | dict[str, Any]) -> MetricAccumulator:
        """Add every row of ``other`` (an accumulator or its ``state()``) to this one; returns self."""
        st = other.state() if isinstance(other, MetricAccumulator) else other
        if st["from_logits"] != self.from_logits or st["neg_sample_rate"] != self.neg_sample_rate:
            raise ValueError(
                "cannot merge accumulators with different settings: "
                f"from_logits {st['from_logits']} vs {self.from_logits}, "
                f"neg_sample_rate {st['neg_sample_rate']} vs {self.neg_sample_rate}"
            )
        cols = st["columns"]
        if cols:
            self._add({k: cols.get(k) for k in _COLUMNS})
        return self

    # ---------------------------------------------------------------------------- results
    def _arrays(self) -> dict[str, np.ndarray | None]:
        if self._cache is None:
            cache: dict[str, np.ndarray | None] = {}
            for k in _COLUMNS:
                chunks = self._chunks[k]
                cache[k] = np.concatenate(chunks) if chunks else None
                # Concatenate once and keep the single array: later calls and state() reuse it.
                self._chunks[k] = [cache[k]] if chunks else []
            if cache["labels"] is None:
                cache["labels"] = np.zeros(0, dtype=np.int8)
                cache["scores"] = np.zeros(0)
            self._cache = cache
        return self._cache

    def calibrated_scores(self) -> np.ndarray:
        """Predictions after negative-sampling re-calibration, as logits or probabilities per
        ``from_logits`` (float64)."""
        s = np.asarray(self._arrays()["scores"], dtype=np.float64)
        if self.neg_sample_rate == 1.0:
            return s
        if self.from_logits:
            return s + math.log(self.neg_sample_rate)
        return recalibrate(s, self.neg_sample_rate)

    def probabilities(self) -> np.ndarray:
        """Re-calibrated predicted probabilities, float64 ``(N,)``."""
        s = self.calibrated_scores()
        return sigmoid(s) if self.from_logits else s

    def compute(self) -> EvalMetrics:
        """All scalar metrics over every row seen so far (computed once until more rows arrive: a report
        and a multi-task evaluation both ask for them)."""
        if self._metrics is None:
            self._metrics = self._compute()
        return self._metrics

    def _compute(self) -> EvalMetrics:
        a = self._arrays()
        y, s, w = a["labels"], a["scores"], a["weights"]
        n = int(y.size)
        probs = self.probabilities()
        if n and w is not None and float(np.sum(w)) > 0:
            pos_rate = float(np.sum(w * y) / np.sum(w))
            mean_pred = float(np.sum(w * probs) / np.sum(w))
        elif n:
            pos_rate, mean_pred = float(y.mean()), float(probs.mean())
        else:
            pos_rate = mean_pred = float("nan")
        if a["groups"] is not None:
            g_auc, used, skipped = gauc(a["groups"], y, s, w)
        else:
            g_auc, used, skipped = float("nan"), 0, 0
        oracle_auc = None if a["oracle"] is None else weighted_auc(y, a["oracle"], w)
        return EvalMetrics(
            auc=weighted_auc(y, s, w) if n else float("nan"),
            gauc=g_auc,
            gauc_users=used,
            gauc_skipped_users=skipped,
            logloss=logloss(y, self.calibrated_scores(), from_logits=self.from_logits, weights=w),
            calibration=mean_pred / pos_rate if pos_rate > 0 else float("nan"),
            mean_prediction=mean_pred,
            positive_rate=pos_rate,
            rows=n,
            oracle_auc=oracle_auc,
        )

    def confusion(self, threshold: float = 0.5) -> dict[str, int]:
        """Row counts of the confusion matrix when predicting positive for ``probability >= threshold``."""
        y = self._arrays()["labels"].astype(bool)
        pred = self.probabilities() >= threshold
        return {
            "tp": int(np.sum(pred & y)),
            "fp": int(np.sum(pred & ~y)),
            "tn": int(np.sum(~pred & ~y)),
            "fn": int(np.sum(~pred & y)),
        }

    def roc_curve(self, max_points: int = 200) -> dict[str, list[float]]:
        """ROC points over re-calibrated probabilities, at most ``max_points``."""
        a = self._arrays()
        return roc_curve(a["labels"], self.probabilities(), a["weights"], max_points)

    def calibration_curve(self, n_bins: int = 10) -> dict[str, list[float]]:
        a = self._arrays()
        return calibration_curve(a["labels"], self.probabilities(), a["weights"], n_bins)


def gather_across_ranks(acc: MetricAccumulator, group: Any = None) -> MetricAccumulator:
    """Merge the accumulators of all ranks so each rank holds every row exactly once.

    A no-op (returns ``acc``) when ``torch.distributed`` is not initialized. Uses
    ``all_gather_object``, which pickles each rank's columns: fine for evaluation sets of tens of
    millions of rows; with NCCL, ``torch.cuda.set_device`` must have been called.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return acc
    states: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(states, acc.state(), group=group)
    merged = MetricAccumulator(from_logits=acc.from_logits, neg_sample_rate=acc.neg_sample_rate)
    for st in states:
        merged.merge(st)
    return merged
