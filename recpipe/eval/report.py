"""The evaluation report: every number the gate, the registry and the plots need, as one JSON file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from recpipe.eval.metrics import EvalMetrics, MetricAccumulator

# Scalar fields logged as MLflow metrics (oracle_auc only when present): every EvalMetrics field.
SCALAR_METRICS = tuple(f.name for f in fields(EvalMetrics))


@dataclass(frozen=True)
class EvalReport(EvalMetrics):
    """Metrics of one model on one evaluation set: the scalar :class:`~recpipe.eval.metrics.EvalMetrics`
    (``auc``, ``gauc``, ``gauc_users``, ``gauc_skipped_users``, ``logloss``, ``calibration``,
    ``mean_prediction``, ``positive_rate``, ``rows``, ``oracle_auc``) and:

    Args:
        threshold (float): the probability threshold of ``confusion``.
        confusion (dict[str, int]): ``tp``, ``fp``, ``tn``, ``fn`` at ``threshold``.
        roc (dict[str, list[float]]): ``fpr``, ``tpr``, ``thresholds``; at most 200 points.
        calibration_curve (dict[str, list[float]]): ``mean_prediction``, ``observed_rate``, ``count``
            per equal-count bin.
        neg_sample_rate (float): the negative sampling rate predictions were re-calibrated with.
        model (dict[str, Any]): what was evaluated: name, version, run id, checkpoint, ...
        data_rows (dict[str, int]): the pass over the data: ``rows_read`` = ``rows_used`` + ``rows_skipped``
            (bad rows under ``on_bad_row: skip``), ``truncated_histories`` (empty when not counted).
        tasks (dict[str, dict]): a multi-task model's metrics of every task, by label column (the
            top-level numbers are the primary task's); empty for a single-task model.

    Example::

        r = build_report(acc, threshold=0.5, model_info={"name": "din", "version": 3})
        r.metrics()                                  # {"auc": 0.71, "gauc": 0.64, "logloss": 0.21, ...}
        json.dumps(json_safe(r.to_dict()), allow_nan=False)   # strict JSON: NaN as null
    """

    threshold: float = 0.5
    confusion: dict[str, int] = field(default_factory=dict)
    roc: dict[str, list[float]] = field(default_factory=dict)
    calibration_curve: dict[str, list[float]] = field(default_factory=dict)
    neg_sample_rate: float = 1.0
    model: dict[str, Any] = field(default_factory=dict)
    data_rows: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The scalar metrics, for MLflow ``log_metrics`` (``oracle_auc`` only when known); a multi-task
        model's every task's too, as ``<label>.<metric>`` (``buy.auc``), side by side."""
        out = {k: float(getattr(self, k)) for k in SCALAR_METRICS if getattr(self, k) is not None}
        for label, values in self.tasks.items():
            out.update(
                {f"{label}.{k}": float(values[k]) for k in SCALAR_METRICS if values.get(k) is not None}
            )
        return out


def json_safe(value: Any) -> Any:
    """``value`` with NaN/inf floats as None and numpy scalars as Python numbers (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return value


def build_report(
    acc: MetricAccumulator,
    threshold: float = 0.5,
    model_info: dict[str, Any] | None = None,
    tasks: dict[str, dict[str, Any]] | None = None,
    data_rows: dict[str, int] | None = None,
) -> EvalReport:
    """Compute an ``EvalReport`` from everything ``acc`` has seen (``tasks``: every task's metrics of a
    multi-task model, :func:`~recpipe.eval.tasks.task_metrics`; ``data_rows``: the pass's row counts)."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    m = acc.compute()
    return EvalReport(
        **m.to_dict(),
        threshold=threshold,
        confusion=acc.confusion(threshold),
        roc=acc.roc_curve(),
        calibration_curve=acc.calibration_curve(),
        neg_sample_rate=acc.neg_sample_rate,
        model=dict(model_info or {}),
        data_rows=dict(data_rows or {}),
        tasks=dict(tasks or {}),
    )


def verdict_lines(
    psi_max: float | None,
    drift_top: list[tuple[str, float]],
    champion_source: str,
    passed: bool,
    reasons: list[str],
) -> list[str]:
    """The end of an evaluate step's summary, ranking or retrieval: drift (when measured), where the champion's
    figures came from, the gate's verdict and its reasons."""
    lines = []
    if psi_max is not None:
        top = ", ".join(f"{k} {v:.4f}" for k, v in drift_top)
        lines.append(f"drift: psi max {psi_max:.4f} ({top})")
    lines.append(f"champion: {champion_source}")
    lines.append(f"gate: {'PASSED' if passed else 'FAILED'}")
    lines += [f"  {r}" for r in reasons]
    return lines
