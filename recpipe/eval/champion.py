"""The champion's numbers on the candidate's eval data: re-scored through its served model when that works,
else the numbers recorded on its registry version (and the source says which).

Evaluation never reaches the registry itself: the caller (the evaluate stage, through
:mod:`recpipe.tracking`) hands in the version, its recorded metrics and a function that loads its served
model; this module owns the scoring loop, the streaming metrics and the fallback decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from recpipe.eval.report import EvalReport, build_report
from recpipe.eval.tasks import task_accumulators, task_metrics, update_tasks

# Rows handed to a served model at once (a pandas DataFrame of raw columns).
PREDICT_BATCH_ROWS = 65_536


class Predictor(Protocol):
    """A served model: raw columns in (a pandas DataFrame, FG inside), click probabilities out, ``(N,)`` or
    ``(N, T)`` for a multi-task model (the registered MLflow pyfunc is one)."""

    def predict(self, rows: Any) -> Any: ...


def score_predictor(
    model: Predictor,
    data_dir: str,
    label: str | list[str],
    group_column: str | None,
    neg_sample_rate: float = 1.0,
    domains: tuple[str, int] | None = None,
) -> EvalReport:
    """The :class:`EvalReport` of ``model`` on ``data_dir``; a multi-task model's (one probability column per
    label of ``label``) with every task's under ``tasks``.

    Args:
        model (Predictor): the served model.
        data_dir (str): the eval data (any source :func:`recpipe.data.sources.open_source` reads).
        label (str | list[str]): the label column(s), the primary first.
        group_column (str | None): GAUC's group (user) column, when the data has it.
        neg_sample_rate (float): the primary task's negative sampling rate (probabilities re-calibrated).
        domains (tuple[str, int] | None): a domain-tower model's ``(domain label, D)``: ``label`` lists it
            last, the model serves ``D`` probabilities per task, and each row is scored by its domain's.
    """
    import pyarrow as pa

    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source

    labels_of = [label] if isinstance(label, str) else list(label)
    if domains is not None:
        labels_of = [c for c in labels_of if c != domains[0]]
    accs = task_accumulators(labels_of, neg_sample_rate, from_logits=False)
    for sb in open_source(data_dir).iter_batches(Shard(0, 1)):
        table = pa.Table.from_batches([sb.batch])
        for start in range(0, table.num_rows, PREDICT_BATCH_ROWS):
            part = table.slice(start, PREDICT_BATCH_ROWS)
            pred = np.asarray(model.predict(part.to_pandas()), dtype=np.float64)
            y = np.stack([part.column(c).to_numpy(zero_copy_only=False) for c in labels_of], axis=1)
            if domains is not None:  # (N, T·D) → each row's domain's (N, T), as the training metrics read it
                domain = part.column(domains[0]).to_numpy(zero_copy_only=False).astype(np.int64)
                per = pred.reshape(len(y), len(labels_of), domains[1])
                pred = np.take_along_axis(per, domain.reshape(-1, 1, 1), axis=2)[:, :, 0]
            if len(labels_of) == 1:  # one task: (N,) labels and probabilities
                pred, y = pred.reshape(-1), y[:, 0]
            groups = None
            if group_column and group_column in part.column_names:
                groups = np.asarray(part.column(group_column).to_numpy(zero_copy_only=False))
            update_tasks(accs, y.astype(np.float64), pred.reshape(y.shape), groups)
    return build_report(accs[labels_of[0]], tasks=task_metrics(accs))


@dataclass(frozen=True)
class ChampionEval:
    """How the champion did on this eval data, or (not re-evaluated) at its registration.

    Args:
        version (int): its registry version.
        source (str): how the numbers were obtained (the gate's ``champion_source``).
        report (EvalReport | None): its report on this eval data; None when not re-evaluated.
        recorded (dict[str, float]): the metrics recorded on the version (``auc``, ``logloss``,
            ``<label>.auc`` ...), the gate's numbers when ``report`` is None.
    """

    version: int
    source: str
    report: EvalReport | None = None
    recorded: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, Any]:
        """Its scalar metrics: the re-evaluated report's, else those recorded at registration."""
        return self.report.metrics() if self.report is not None else dict(self.recorded)

    def result(self) -> EvalReport | Mapping[str, Any]:
        """What the gate compares with (:func:`recpipe.eval.gate.decide`)."""
        return self.report if self.report is not None else self.recorded

    def task_results(self) -> dict[str, dict[str, Any]]:
        """Its results per task: re-evaluated (``report.tasks``) or recorded at registration
        (``<label>.auc`` / ``<label>.logloss`` metrics)."""
        if self.report is not None and self.report.tasks:
            return self.report.tasks
        recorded: dict[str, dict[str, Any]] = {}
        for key, value in self.metrics().items():
            label, _, metric = str(key).rpartition(".")
            if label and metric in ("auc", "logloss"):
                recorded.setdefault(label, {})[metric] = value
        return recorded


def evaluate_champion(
    model_name: str,
    version: int,
    recorded: Mapping[str, Any],
    load: Callable[[], Predictor],
    data_dir: str,
    label: str | list[str],
    group_column: str | None,
    domains: tuple[str, int] | None = None,
) -> ChampionEval:
    """The champion re-scored on ``data_dir`` through ``load()``; when loading or scoring fails, the
    ``recorded`` numbers, with the reason in the source.

    Args:
        model_name (str): the registered model (for messages).
        version (int): the champion's version.
        recorded (Mapping): the metrics recorded on the version at registration.
        load (Callable[[], Predictor]): loads its served model (the registered pyfunc).
        data_dir (str), label (str | list[str]), group_column (str | None), domains (tuple | None): as in
            :func:`score_predictor`.

    Raises:
        RuntimeError: it could not be re-scored and has no recorded ``auc`` and ``logloss``.
    """
    v = version
    try:
        report = score_predictor(load(), data_dir, label, group_column, domains=domains)
        source = f"v{v} re-evaluated on the same eval data (registered pyfunc: RTP export, FG inside)"
        return ChampionEval(v, source, report=report)
    except Exception as err:  # noqa: BLE001 - fall back to the registered numbers, and say so
        if recorded.get("auc") is None or recorded.get("logloss") is None:
            raise RuntimeError(
                f"champion v{v} of {model_name!r} could not be re-evaluated ({err}) and has no metric tags"
            ) from err
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        source = f"v{v} metrics recorded at its registration (not re-evaluated: {why})"
        return ChampionEval(v, source, recorded=dict(recorded))
