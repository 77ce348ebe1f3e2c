"""evaluate, for a retrieval model (``model.type`` in ``RETRIEVAL_MODELS``): the candidate checkpoint's
recall@K and hit-rate@K over the whole catalogue (``data.negative_sampler``'s item table), the champion
re-scored on the same rows and catalogue, the recall gate (:mod:`recpipe.eval.retrieval_gate`).

:func:`recpipe.stages.evaluate.run` hands a retrieval checkpoint here. The champion is re-scored from its
training checkpoint, which its run recorded and which is checked against the recorded manifest digest
(:func:`recpipe.tracking.checkpoints.resolve_init_from`, a warm start's check); when that fails the
``recall_at_<k>`` tags of its version are used, and the gate's ``champion_source`` says so.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recpipe.config import GateConfig, ParameterError
from recpipe.eval.report import verdict_lines
from recpipe.runlog import RunLog

if TYPE_CHECKING:
    from recpipe.config import RecpipeConfig
    from recpipe.eval.retrieval_gate import RetrievalChampion, RetrievalEvaluation


@dataclass
class RetrievalEvaluateResult:
    """What the evaluate stage reports for a retrieval model.

    Args:
        report_path (str): the report JSON.
        k (int): the cut-off the gate checked.
        recall (float): the candidate's recall@k.
        metrics (dict): every ``recall_at_<k>`` / ``hit_rate_at_<k>`` and ``queries``.
        gate_passed (bool), gate_reasons (list[str]): the decision.
        champion_source (str), champion_version (int | None), champion_recall (float | None): the champion.
        psi_max (float | None): the eval split's largest PSI (None: not computed).
    """

    report_path: str
    k: int
    recall: float
    metrics: dict[str, float]
    gate_passed: bool
    gate_reasons: list[str]
    champion_source: str
    champion_version: int | None
    champion_recall: float | None
    psi_max: float | None = None
    drift_top: list[tuple[str, float]] = field(default_factory=list)

    def kfp_metrics(self) -> dict[str, float]:
        """The finite scalar metrics (KFP ``Metrics`` JSON has no NaN)."""
        values: dict[str, Any] = {**self.metrics, "psi_max": self.psi_max}
        return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}

    def describe(self) -> str:
        scores = "  ".join(
            f"{name} {v:.4f}" for name, v in self.metrics.items() if name.startswith(("recall", "hit"))
        )
        lines = [f"{scores}  queries {int(self.metrics.get('queries', 0))}"]
        lines += verdict_lines(
            self.psi_max, self.drift_top, self.champion_source, self.gate_passed, self.gate_reasons
        )
        return "\n".join(lines)


def check_gate_overrides(model_type: str, overrides: dict[str, float]) -> None:
    """Threshold parameters of the other kind of model are refused (as the config refuses its fields).

    Raises:
        ParameterError: naming the first such parameter.
    """
    from recpipe.config.catalogue import RETRIEVAL_MODELS

    retrieval = model_type in RETRIEVAL_MODELS
    wrong = GateConfig.RANKING_FIELDS if retrieval else GateConfig.RETRIEVAL_FIELDS
    bad = [n for n in overrides if n in wrong]
    if bad:
        kind = "a retrieval" if retrieval else "a ranking"
        right = GateConfig.RETRIEVAL_FIELDS if retrieval else GateConfig.RANKING_FIELDS
        raise ParameterError(bad[0], f"model {model_type!r} is {kind} model; its gate takes {list(right)}")


def run_retrieval(
    ckpt: Path,
    cfg: RecpipeConfig,
    gate: GateConfig,
    data_dir: str,
    out: str,
    champion_model: str | None,
    tracking_uri: str | None,
    train_data: str | None,
    log: RunLog,
    checkpoint: str,
) -> RetrievalEvaluateResult:
    """Score the retrieval checkpoint ``ckpt`` on ``data_dir``, re-score the champion, gate, write ``out``
    (the arguments of :func:`recpipe.stages.evaluate.run`, resolved by it)."""
    from recpipe.data.negative_sampler import load_item_table
    from recpipe.eval.retrieval import retrieval_metrics
    from recpipe.eval.retrieval_gate import RetrievalEvaluation, decide_retrieval, gate_k
    from recpipe.features.spec import FG_JSON, FeatureSpec
    from recpipe.train.checkpoint import load_model_for_inference
    from recpipe.train.retrieval_job import read_rows

    if cfg.data.negative_sampler is None:
        raise ValueError(
            f"model {cfg.model.type!r}: recall is over the whole catalogue; give data.negative_sampler"
        )
    k = gate_k(gate, cfg.eval.recall_at_k)
    ks = tuple(sorted({*cfg.eval.recall_at_k, k}))
    drift = None
    if train_data:  # the checkpoint's own FeatureSpec: the ids and buckets the model reads
        from recpipe.data.sources import open_source
        from recpipe.eval.drift import check_feature_limits, compute_drift

        csv = cfg.csv_options()
        spec = FeatureSpec.load(ckpt / FG_JSON)
        drift = compute_drift(spec, open_source(train_data, csv=csv), open_source(data_dir, csv=csv))
        check_feature_limits(drift, gate.max_psi_per_feature)
    items = load_item_table(cfg.data.negative_sampler, cfg.data.params, os.environ)
    rows = read_rows(data_dir, cfg)
    model, spec, _ = load_model_for_inference(ckpt)
    candidate: dict[str, Any] = {**retrieval_metrics(model, spec, rows, items, ks), "rows": rows.num_rows}
    champion = None
    if champion_model:
        if not tracking_uri:
            raise ParameterError("tracking_uri", "is needed to find the champion")
        champion = _champion(champion_model, tracking_uri, rows, items, ks)
    decision = decide_retrieval(
        candidate,
        None if champion is None else champion.metrics,
        gate,
        k,
        **({"champion_source": champion.source} if champion else {}),
        drift=drift,
    )
    evaluation = RetrievalEvaluation(candidate, champion, decision, drift)
    out_path = evaluation.write(out, checkpoint=checkpoint, data=str(data_dir))
    _log(log, evaluation, out_path)
    return RetrievalEvaluateResult(
        report_path=str(out_path),
        k=k,
        recall=decision.candidate_recall,
        metrics={n: float(v) for n, v in candidate.items()},
        gate_passed=decision.passed,
        gate_reasons=list(decision.reasons),
        champion_source=decision.champion_source,
        champion_version=None if champion is None else champion.version,
        champion_recall=decision.champion_recall,
        psi_max=None if drift is None else drift.psi_max,
        drift_top=[] if drift is None else drift.top(3),
    )


def _champion(
    model_name: str, tracking_uri: str, rows: Any, items: Any, ks: tuple[int, ...]
) -> RetrievalChampion | None:
    """The registry's ``@champion`` of ``model_name`` re-scored from its verified training checkpoint (or its
    recorded recall); None without a champion."""
    from recpipe import tracking
    from recpipe.eval.retrieval_gate import evaluate_retrieval_champion
    from recpipe.tracking.checkpoints import resolve_init_from
    from recpipe.train.checkpoint import load_model_for_inference

    champ = tracking.get_version_by_alias(tracking_uri, model_name, tracking.ALIAS_CHAMPION)
    if champ is None:
        return None
    v = int(champ["version"])
    recorded = {}
    for key, value in champ["tags"].items():
        if key.startswith(("recall_at_", "hit_rate_at_")):
            try:
                recorded[key] = float(value)
            except ValueError:
                continue

    def load() -> tuple[Any, Any]:
        source = resolve_init_from(f"models:/{model_name}/{v}", tracking_uri)
        model, spec, _ = load_model_for_inference(source.checkpoint)
        return model, spec

    return evaluate_retrieval_champion(v, recorded, load, rows, items, ks)


def _log(log: RunLog, evaluation: RetrievalEvaluation, report: Path) -> None:
    """Metrics (``eval.*``, ``champion.*``), the decision as tags, the report."""
    if log.run_id is None:
        return
    candidate, champion, decision = evaluation.candidate, evaluation.champion, evaluation.decision
    log.log_metrics({f"eval.{k}": float(v) for k, v in candidate.items()})
    if champion is not None:
        log.log_metrics({f"champion.{k}": float(v) for k, v in champion.metrics.items()})
    log.set_tags(
        {
            "gate.passed": str(decision.passed).lower(),
            "gate.reasons": "\n".join(decision.reasons),
            "gate.champion_source": decision.champion_source,
            "gate.champion_version": None if champion is None else champion.version,
            "gate.k": decision.k,
        }
    )
    log.log_artifact(report, "eval")
    if evaluation.drift is not None:
        plots = report.parent / f".{report.stem}-plots"
        log.log_metrics(evaluation.drift.metrics())
        log.log_artifact(evaluation.drift.write(plots / "drift.json"), "eval")
