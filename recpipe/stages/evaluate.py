"""evaluate: the candidate checkpoint's metrics, the champion re-evaluated on the same rows, the gate.

The champion is the registry version under alias ``champion`` of ``champion_model``. It is re-scored on
the same eval data through its registered pyfunc model (the RTP export with FG inside, scoring raw
columns); when that is impossible the numbers recorded on the version at registration are used, and the
gate's ``champion_source`` says so. The report JSON holds the candidate, the champion and the decision.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recpipe.config import ParameterError, gate_overrides
from recpipe.eval.report import json_safe
from recpipe.runlog import NULL_LOG, RunLog, failing

PYFUNC_BATCH_ROWS = 65_536


@dataclass
class ChampionEval:
    """How the champion did on this eval data (or, not re-evaluated, at its registration)."""

    version: int
    source: str
    report: Any  # EvalReport | dict with auc, logloss


@dataclass
class EvaluateResult:
    report_path: str
    auc: float
    gauc: float
    logloss: float
    oracle_auc: float | None
    rows: int
    gate_passed: bool
    gate_reasons: list[str]
    champion_source: str
    champion_version: int | None
    champion_auc: float | None
    threshold: float
    confusion_matrix: list[list[int]]  # [[tn, fp], [fn, tp]] at ``threshold``
    roc_fpr: list[float] = field(default_factory=list)
    roc_tpr: list[float] = field(default_factory=list)
    roc_thresholds: list[float] = field(default_factory=list)
    data_rows: dict[str, int] = field(default_factory=dict)  # rows read / used / skipped / truncated

    def kfp_metrics(self) -> dict[str, float]:
        """The finite scalar metrics (KFP ``Metrics`` JSON has no NaN)."""
        values = {"auc": self.auc, "gauc": self.gauc, "logloss": self.logloss, "oracle_auc": self.oracle_auc}
        return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}

    def describe(self) -> str:
        # No user column (Criteo): GAUC has no groups; say so instead of printing nan.
        gauc = f"gauc {self.gauc:.4f}" if math.isfinite(self.gauc) else "gauc - (no user column)"
        lines = [f"auc {self.auc:.4f}  {gauc}  logloss {self.logloss:.4f}  rows {self.rows}"]
        if self.oracle_auc is not None:
            lines[0] += f"  (oracle auc {self.oracle_auc:.4f})"
        if self.data_rows:
            r = self.data_rows
            lines.append(
                f"data: read {r.get('rows_read')}, used {r.get('rows_used')}, skipped {r.get('rows_skipped')}, "
                f"truncated histories {r.get('truncated_histories')}"
            )
        lines.append(f"champion: {self.champion_source}")
        lines.append(f"gate: {'PASSED' if self.gate_passed else 'FAILED'}")
        lines += [f"  {r}" for r in self.gate_reasons]
        return "\n".join(lines)


def _finite(values: list[float], lo: float = 0.0, hi: float = 1.0) -> list[float]:
    """ROC thresholds start at +inf; KFP wants finite numbers (a threshold above every score is 1.0)."""
    return [
        min(max(float(v), lo), hi) if math.isfinite(float(v)) else (hi if float(v) > 0 else lo)
        for v in values
    ]


def _confusion(c: dict[str, int]) -> list[list[int]]:
    return [[int(c.get("tn", 0)), int(c.get("fp", 0))], [int(c.get("fn", 0)), int(c.get("tp", 0))]]


def score_pyfunc(
    model: Any,
    data_dir: str,
    label: str | list[str],
    group_column: str | None,
    neg_sample_rate: float = 1.0,
) -> Any:
    """An ``EvalReport`` of a pyfunc model (raw columns in, click probabilities out) on ``data_dir``; a
    multi-task model's (one probability column per label of ``label``) with every task's under ``tasks``."""
    import numpy as np
    import pyarrow as pa

    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.eval.report import build_report
    from recpipe.eval.tasks import task_accumulators, task_metrics, update_tasks

    labels_of = [label] if isinstance(label, str) else list(label)
    accs = task_accumulators(labels_of, neg_sample_rate, from_logits=False)
    for sb in open_source(data_dir).iter_batches(Shard(0, 1)):
        table = pa.Table.from_batches([sb.batch])
        for start in range(0, table.num_rows, PYFUNC_BATCH_ROWS):
            part = table.slice(start, PYFUNC_BATCH_ROWS)
            pred = np.asarray(model.predict(part.to_pandas()), dtype=np.float64)
            y = np.stack([part.column(c).to_numpy(zero_copy_only=False) for c in labels_of], axis=1)
            if len(labels_of) == 1:  # one task: (N,) labels and probabilities
                pred, y = pred.reshape(-1), y[:, 0]
            groups = None
            if group_column and group_column in part.column_names:
                groups = np.asarray(part.column(group_column).to_numpy(zero_copy_only=False))
            update_tasks(accs, y.astype(np.float64), pred.reshape(y.shape), groups)
    report = build_report(accs[labels_of[0]])
    report.tasks = task_metrics(accs)
    return report


def champion_eval(
    model_name: str, tracking_uri: str, data_dir: str, label: str | list[str], group_column: str | None
) -> ChampionEval | None:
    """The champion's numbers on ``data_dir``; None when ``model_name`` has no champion."""
    from recpipe import tracking

    champ = tracking.get_version_by_alias(tracking_uri, model_name, tracking.ALIAS_CHAMPION)
    if champ is None:
        return None
    v = champ["version"]
    try:
        model = tracking.load_pyfunc_model(tracking_uri, f"models:/{model_name}/{v}")
        report = score_pyfunc(model, data_dir, label, group_column)
        return ChampionEval(
            v, f"v{v} re-evaluated on the same eval data (registered pyfunc: RTP export, FG inside)", report
        )
    except Exception as err:  # noqa: BLE001 - fall back to the registered numbers, and say so
        metrics = champ["metrics"]
        if metrics.get("auc") is None or metrics.get("logloss") is None:
            raise RuntimeError(
                f"champion v{v} of {model_name!r} could not be re-evaluated ({err}) and has no metric tags"
            ) from err
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        return ChampionEval(
            v, f"v{v} metrics recorded at its registration (not re-evaluated: {why})", metrics
        )


def run(
    checkpoint: str,
    data_dir: str,
    out: str,
    config_path: str | None = None,
    champion_model: str | None = None,
    tracking_uri: str | None = None,
    min_auc: float | str | None = None,
    max_auc_drop: float | str | None = None,
    max_logloss_rise: float | str | None = None,
    log: RunLog = NULL_LOG,
) -> EvaluateResult:
    """Evaluate ``checkpoint`` on ``data_dir``, re-evaluate the champion, gate, and write the report to ``out``.

    Args:
        checkpoint (str): a training output folder or one ``ckpt-<step>`` in it.
        data_dir (str): eval Parquet dataset.
        out (str): report JSON path (``candidate``, ``champion``, ``gate``); plots are written beside it.
        config_path (str | None): config whose ``eval`` section (gate, threshold, GAUC group) applies;
            default the checkpoint's own.
        champion_model (str | None): registered model whose ``@champion`` the candidate is gated against.
        tracking_uri (str | None): the MLflow registry holding ``champion_model`` (needed with it).
        min_auc, max_auc_drop, max_logloss_rise (float | str | None): gate thresholds overriding the
            config's ``eval.gate`` when set (:func:`recpipe.config.gate_overrides`).
        log (RunLog): records the metrics, the decision as tags, the report and its plots.
    """
    from recpipe.config import load_config
    from recpipe.eval.checkpoint import evaluate_checkpoint
    from recpipe.eval.gate import decide, decide_tasks
    from recpipe.train.checkpoint import read_config, resolve_checkpoint

    with failing(log, "evaluate"):
        cfg = load_config(config_path) if config_path else read_config(resolve_checkpoint(checkpoint))
        gate = cfg.eval.gate.model_copy(update=gate_overrides(min_auc, max_auc_drop, max_logloss_rise))
        candidate = evaluate_checkpoint(
            checkpoint, data_dir, threshold=cfg.eval.threshold, oracle_column=cfg.data.oracle_column
        )
        champion = None
        if champion_model:
            if not tracking_uri:
                raise ParameterError("tracking_uri", "is needed to find the champion")
            group = cfg.eval.gauc_group or cfg.data.group_column
            champion = champion_eval(champion_model, tracking_uri, data_dir, cfg.data.labels, group)
        source = {"champion_source": champion.source} if champion else {}
        # A multi-task model: every task gated on its own, against the champion's same task.
        if candidate.tasks:
            gates = {label: cfg.eval.task_gates.get(label, gate) for label in candidate.tasks}
            decision = decide_tasks(candidate.tasks, _task_results(champion), gates, **source)
        else:
            decision = decide(candidate, champion.report if champion else None, gate, **source)
        out_path = Path(out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "candidate": candidate.to_dict(),
            "champion": None if champion is None else {"version": champion.version, "source": champion.source,
                                                       "metrics": _metrics_dict(champion.report)},
            "gate": decision.to_dict(),
            "checkpoint": str(checkpoint),
            "data": str(data_dir),
        }  # fmt: skip
        out_path.write_text(json.dumps(json_safe(doc), indent=2, sort_keys=True, allow_nan=False))
        _log(log, candidate, champion, decision, out_path)
    return EvaluateResult(
        report_path=str(out_path),
        auc=float(candidate.auc),
        gauc=float(candidate.gauc),
        logloss=float(candidate.logloss),
        oracle_auc=candidate.oracle_auc,
        rows=int(candidate.rows),
        gate_passed=decision.passed,
        gate_reasons=list(decision.reasons),
        champion_source=decision.champion_source,
        champion_version=champion.version if champion else None,
        champion_auc=decision.champion_auc,
        threshold=float(candidate.threshold),
        confusion_matrix=_confusion(candidate.confusion),
        roc_fpr=_finite(candidate.roc.get("fpr", [])),
        roc_tpr=_finite(candidate.roc.get("tpr", [])),
        roc_thresholds=_finite(candidate.roc.get("thresholds", [])),
        data_rows=dict(getattr(candidate, "data_rows", None) or {}),
    )


def read_report(path: str | Path) -> dict[str, Any]:
    """The report JSON written by ``run``: ``candidate`` (EvalReport fields), ``champion``, ``gate``."""
    doc = json.loads(Path(path).read_text())
    missing = [k for k in ("candidate", "gate") if k not in doc]
    if missing:
        raise ValueError(f"{path} is not a recpipe evaluation report (missing {missing})")
    return doc


def _task_results(champion: ChampionEval | None) -> dict[str, Any] | None:
    """The champion's results per task: re-evaluated (``report.tasks``) or recorded at registration
    (``<label>.auc`` / ``<label>.logloss`` metrics); None without a champion."""
    if champion is None:
        return None
    tasks = getattr(champion.report, "tasks", None)
    if tasks:
        return tasks
    recorded: dict[str, dict[str, Any]] = {}
    for key, value in _metrics_dict(champion.report).items():
        label, _, metric = str(key).rpartition(".")
        if label and metric in ("auc", "logloss"):
            recorded.setdefault(label, {})[metric] = value
    return recorded


def _metrics_dict(report: Any) -> dict[str, Any]:
    if hasattr(report, "metrics"):
        return report.metrics()
    return dict(report)


def _log(log: RunLog, candidate: Any, champion: ChampionEval | None, decision: Any, report: Path) -> None:
    """Metrics (``eval.*``, ``champion.*``), the decision as tags, the report and the ROC/calibration plots."""
    if log.run_id is None:  # the plots are drawn for the run log only
        return
    from recpipe.eval.plots import calibration_curve_png, roc_curve_png

    log.log_metrics({f"eval.{k}": v for k, v in candidate.metrics().items()})
    log.log_metrics({f"eval.{k}": v for k, v in (getattr(candidate, "data_rows", None) or {}).items()})
    if champion is not None:
        log.log_metrics({f"champion.{k}": v for k, v in _metrics_dict(champion.report).items()
                         if isinstance(v, int | float)})  # fmt: skip
    log.set_tags(
        {
            "gate.passed": str(decision.passed).lower(),
            "gate.reasons": "\n".join(decision.reasons),
            "gate.champion_source": decision.champion_source,
            "gate.champion_version": None if champion is None else champion.version,
        }
    )
    log.log_artifact(report, "eval")
    plots = report.parent / f".{report.stem}-plots"
    if candidate.roc.get("fpr"):
        log.log_artifact(roc_curve_png(candidate.roc, plots / "roc.png", auc=candidate.auc), "eval")
    if candidate.calibration_curve.get("mean_prediction"):
        log.log_artifact(
            calibration_curve_png(candidate.calibration_curve, plots / "calibration.png"), "eval"
        )
