"""evaluate: the candidate checkpoint's metrics, the champion re-evaluated on the same rows, the gate.

The champion is the registry version under alias ``champion`` of ``champion_model``. It is re-scored on
the same eval data through its registered pyfunc model (the RTP export with FG inside, scoring raw
columns); when that is impossible the numbers recorded on the version at registration are used, and the
gate's ``champion_source`` says so. The report JSON holds the candidate, the champion and the decision.

This stage only wires: the scoring, the champion fallback, the gate and the report are :mod:`recpipe.eval`'s
(:mod:`~recpipe.eval.checkpoint`, :mod:`~recpipe.eval.champion`, :mod:`~recpipe.eval.evaluation`); it loads
the champion through :mod:`recpipe.tracking` and hands eval a plain predictor.

Given the training split (``train_data``), it also computes the eval split's drift against it
(:mod:`recpipe.eval.drift`: at most :data:`~recpipe.eval.drift.DRIFT_SAMPLE_ROWS` rows of each split, read
in evenly spaced blocks), gates on ``eval.gate.max_psi`` / ``max_psi_per_feature``, and logs it as
``drift.*`` metrics and ``eval/drift.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from recpipe.config import ParameterError, gate_overrides
from recpipe.config.catalogue import RETRIEVAL_MODELS
from recpipe.eval.report import verdict_lines
from recpipe.runlog import NULL_LOG, RunLog, failing
from recpipe.stages.evaluate_retrieval import RetrievalEvaluateResult, check_gate_overrides, run_retrieval

if TYPE_CHECKING:
    from recpipe.config import RecpipeConfig
    from recpipe.eval.champion import ChampionEval
    from recpipe.eval.drift import DriftReport
    from recpipe.eval.evaluation import Evaluation
    from recpipe.features.spec import FeatureSpec


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
    # The eval split's largest PSI against the training split (None: not computed) and the most drifting
    # features with their PSI, largest first.
    psi_max: float | None = None
    drift_top: list[tuple[str, float]] = field(default_factory=list)

    def kfp_metrics(self) -> dict[str, float]:
        """The finite scalar metrics (KFP ``Metrics`` JSON has no NaN)."""
        values = {
            "auc": self.auc, "gauc": self.gauc, "logloss": self.logloss, "oracle_auc": self.oracle_auc,
            "psi_max": self.psi_max,
        }  # fmt: skip
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
        lines += verdict_lines(
            self.psi_max, self.drift_top, self.champion_source, self.gate_passed, self.gate_reasons
        )
        return "\n".join(lines)


def _finite(values: list[float], lo: float = 0.0, hi: float = 1.0) -> list[float]:
    """ROC thresholds start at +inf; KFP wants finite numbers (a threshold above every score is 1.0)."""
    return [
        min(max(float(v), lo), hi) if math.isfinite(float(v)) else (hi if float(v) > 0 else lo)
        for v in values
    ]


def _confusion(c: dict[str, int]) -> list[list[int]]:
    return [[int(c.get("tn", 0)), int(c.get("fp", 0))], [int(c.get("fn", 0)), int(c.get("tp", 0))]]


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
    train_data: str | None = None,
    max_psi: float | str | None = None,
    log: RunLog = NULL_LOG,
    min_recall_at_k: float | str | None = None,
    max_recall_drop: float | str | None = None,
) -> EvaluateResult | RetrievalEvaluateResult:
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
        train_data (str | None): the training split: the eval split's drift is computed against it (None:
            no drift statistics; a set drift limit then fails the gate).
        max_psi (float | str | None): the largest PSI allowed (overrides ``eval.gate.max_psi`` when set).
        log (RunLog): records the metrics, the decision as tags, the report and its plots.
        min_recall_at_k, max_recall_drop (float | str | None): a retrieval model's gate thresholds
            overriding the config's when set; a retrieval checkpoint is evaluated by
            :func:`recpipe.stages.evaluate_retrieval.run_retrieval` (recall@K over the catalogue), and
            refuses the AUC thresholds (a ranking one the recall thresholds).
    """
    from recpipe.config import load_config
    from recpipe.eval.checkpoint import evaluate_checkpoint
    from recpipe.eval.evaluation import gate_candidate
    from recpipe.features.spec import FG_JSON, FeatureSpec
    from recpipe.train.checkpoint import read_config, resolve_checkpoint

    with failing(log, "evaluate"):
        ckpt = resolve_checkpoint(checkpoint)
        cfg = load_config(config_path) if config_path else read_config(ckpt)
        overrides = gate_overrides(
            min_auc, max_auc_drop, max_logloss_rise, max_psi, min_recall_at_k, max_recall_drop
        )
        check_gate_overrides(cfg.model.type, overrides)
        gate = cfg.eval.gate.model_copy(update=overrides)
        if cfg.model.type in RETRIEVAL_MODELS:
            return run_retrieval(
                ckpt, cfg, gate, data_dir, out, champion_model, tracking_uri, train_data, log, str(checkpoint)
            )
        # Before scoring: a mistaken per-feature limit is refused in seconds, not after the evaluation.
        drift = None
        if train_data:  # the checkpoint's own FeatureSpec: the ids and buckets the model reads
            spec = FeatureSpec.load(ckpt / FG_JSON)
            drift = _drift(spec, cfg, train_data, data_dir, gate.max_psi_per_feature, _evictions(ckpt))
        candidate = evaluate_checkpoint(
            checkpoint, data_dir, threshold=cfg.eval.threshold, oracle_column=cfg.data.oracle_column
        )
        champion = None
        if champion_model:
            if not tracking_uri:
                raise ParameterError("tracking_uri", "is needed to find the champion")
            group = cfg.eval.gauc_group or cfg.data.group_column
            champion = _champion(
                champion_model, tracking_uri, data_dir, cfg.data.labels, group, cfg.model.domains()
            )
        evaluation = gate_candidate(candidate, champion, gate, cfg.eval.task_gates, drift)
        out_path = evaluation.write(out, checkpoint=str(checkpoint), data=str(data_dir))
        _log(log, evaluation, out_path)
    decision = evaluation.decision
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
        data_rows=dict(candidate.data_rows),
        psi_max=None if drift is None else drift.psi_max,
        drift_top=[] if drift is None else drift.top(3),
    )


def _evictions(ckpt: Path) -> dict[str, int] | None:
    """The zch evictions of the training run that wrote ``ckpt`` (``<out>/checkpoints/ckpt-N``): its
    ``train_result.json``'s, None when that file is not beside the checkpoints or records none."""
    from recpipe.train.result import TrainResult

    result = TrainResult.read(ckpt.parent.parent)
    return None if result is None else result.zch_evictions


def _drift(
    spec: FeatureSpec,
    cfg: RecpipeConfig,
    train_data: str,
    data_dir: str,
    limits: dict[str, float],
    zch_evictions: dict[str, int] | None,
) -> DriftReport:
    """The drift of ``data_dir`` against ``train_data`` with the checkpoint's FeatureSpec; per-feature limits
    on features without a PSI refused."""
    from recpipe.data.sources import open_source
    from recpipe.eval.drift import check_feature_limits, compute_drift

    csv = cfg.csv_options()
    report = compute_drift(
        spec, open_source(train_data, csv=csv), open_source(data_dir, csv=csv), zch_evictions=zch_evictions
    )
    check_feature_limits(report, limits)
    return report


def _champion(
    model_name: str,
    tracking_uri: str,
    data_dir: str,
    label: str | list[str],
    group_column: str | None,
    domains: tuple[str, int] | None = None,
) -> ChampionEval | None:
    """The registry's ``@champion`` of ``model_name`` re-scored on ``data_dir`` through its registered pyfunc
    (or its recorded numbers: :func:`recpipe.eval.champion.evaluate_champion`); None without a champion."""
    from recpipe import tracking
    from recpipe.eval.champion import Predictor, evaluate_champion

    champ = tracking.get_version_by_alias(tracking_uri, model_name, tracking.ALIAS_CHAMPION)
    if champ is None:
        return None
    v = champ["version"]

    def load() -> Predictor:
        return tracking.load_pyfunc_model(tracking_uri, f"models:/{model_name}/{v}")

    return evaluate_champion(model_name, v, champ["metrics"], load, data_dir, label, group_column, domains)


def _log(log: RunLog, evaluation: Evaluation, report: Path) -> None:
    """Metrics (``eval.*``, ``champion.*``), the decision as tags, the report and the ROC/calibration plots."""
    if log.run_id is None:  # the plots are drawn for the run log only
        return
    from recpipe.eval.plots import calibration_curve_png, roc_curve_png

    candidate, champion, decision = evaluation.candidate, evaluation.champion, evaluation.decision
    log.log_metrics({f"eval.{k}": v for k, v in candidate.metrics().items()})
    log.log_metrics({f"eval.{k}": v for k, v in candidate.data_rows.items()})
    if champion is not None:
        log.log_metrics(
            {f"champion.{k}": v for k, v in champion.metrics().items() if isinstance(v, int | float)}
        )
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
    if evaluation.drift is not None:
        log.log_metrics(evaluation.drift.metrics())
        log.log_artifact(evaluation.drift.write(plots / "drift.json"), "eval")
    if candidate.roc.get("fpr"):
        log.log_artifact(roc_curve_png(candidate.roc, plots / "roc.png", auc=candidate.auc), "eval")
    if candidate.calibration_curve.get("mean_prediction"):
        log.log_artifact(
            calibration_curve_png(candidate.calibration_curve, plots / "calibration.png"), "eval"
        )
