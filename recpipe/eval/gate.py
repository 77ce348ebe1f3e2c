"""The promotion gate: a pure function of two evaluation results and the gate thresholds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from recpipe.config import GateConfig
from recpipe.eval.report import EvalReport

# Float noise must not flip a comparison that is exactly at its bound (0.7 - 0.005 != 0.695).
_TOLERANCE = 1e-12


@dataclass(frozen=True)
class GateDecision:
    """Whether a candidate may become champion, and why.

    Args:
        passed (bool): every check passed.
        reasons (list[str]): one line per check, ``PASS ...`` or ``FAIL ...``, with the numbers.
        champion_source (str): how the champion's numbers were obtained, or ``"none"``.
    """

    passed: bool
    reasons: list[str]
    champion_source: str
    candidate_auc: float
    candidate_logloss: float
    min_auc: float
    max_auc_drop: float
    max_logloss_rise: float
    champion_auc: float | None = None
    champion_logloss: float | None = None
    failed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _numbers(result: EvalReport | Mapping[str, Any], role: str) -> tuple[float, float]:
    if isinstance(result, EvalReport):
        return float(result.auc), float(result.logloss)
    if not isinstance(result, Mapping):
        raise TypeError(f"{role} must be an EvalReport or a mapping, got {type(result).__name__}")
    missing = [k for k in ("auc", "logloss") if k not in result]
    if missing:
        raise ValueError(f"{role} result lacks {missing}; it has {sorted(result)}")

    def num(k: str) -> float:
        v = result[k]
        return float("nan") if v is None else float(v)

    return num("auc"), num("logloss")


def decide(
    candidate: EvalReport | Mapping[str, Any],
    champion: EvalReport | Mapping[str, Any] | None,
    gate: GateConfig,
    champion_source: str = "re-evaluated on the same eval data",
) -> GateDecision:
    """Gate a candidate against the absolute AUC floor and, when there is one, the champion.

    Passes iff ``auc >= min_auc`` and, with a champion, ``auc >= champion_auc - max_auc_drop`` and
    ``logloss <= champion_logloss + max_logloss_rise``. NaN never passes a check.

    Args:
        candidate (EvalReport | Mapping): the new model's result (``auc``, ``logloss``).
        champion (EvalReport | Mapping | None): the current champion's result, or None.
        gate (GateConfig): thresholds.
        champion_source (str): how the champion numbers were produced (recorded, not used).

    Example::

        >>> d = decide({"auc": 0.71, "logloss": 0.40}, {"auc": 0.72, "logloss": 0.39},
        ...            GateConfig(min_auc=0.6, max_auc_drop=0.005, max_logloss_rise=0.01))
        >>> d.passed, d.failed
        (False, ['auc_vs_champion'])
    """
    auc, loss = _numbers(candidate, "candidate")
    reasons: list[str] = []
    failed: list[str] = []

    def check(name: str, ok: bool, text: str) -> None:
        reasons.append(f"{'PASS' if ok else 'FAIL'} {name}: {text}")
        if not ok:
            failed.append(name)

    ok = math.isfinite(auc) and auc >= gate.min_auc - _TOLERANCE
    check("min_auc", ok, f"auc {auc:.6f} {'>=' if ok else 'is not >='} min_auc {gate.min_auc:.6f}")

    champ_auc = champ_loss = None
    if champion is None:
        champion_source = "none"
        reasons.append("PASS no_champion: no champion to compare with; only the absolute floor applies")
    else:
        champ_auc, champ_loss = _numbers(champion, "champion")
        floor = champ_auc - gate.max_auc_drop
        ok = math.isfinite(auc) and math.isfinite(floor) and auc >= floor - _TOLERANCE
        check(
            "auc_vs_champion",
            ok,
            f"auc {auc:.6f} {'>=' if ok else 'is not >='} champion auc {champ_auc:.6f} - max_auc_drop "
            f"{gate.max_auc_drop:.6f} = {floor:.6f} (champion {champion_source})",
        )
        ceiling = champ_loss + gate.max_logloss_rise
        ok = math.isfinite(loss) and math.isfinite(ceiling) and loss <= ceiling + _TOLERANCE
        check(
            "logloss_vs_champion",
            ok,
            f"logloss {loss:.6f} {'<=' if ok else 'is not <='} champion logloss {champ_loss:.6f} + "
            f"max_logloss_rise {gate.max_logloss_rise:.6f} = {ceiling:.6f} (champion {champion_source})",
        )

    return GateDecision(
        passed=not failed,
        reasons=reasons,
        champion_source=champion_source,
        candidate_auc=auc,
        candidate_logloss=loss,
        champion_auc=champ_auc,
        champion_logloss=champ_loss,
        min_auc=gate.min_auc,
        max_auc_drop=gate.max_auc_drop,
        max_logloss_rise=gate.max_logloss_rise,
        failed=failed,
    )


@dataclass(frozen=True)
class TaskGateDecision:
    """The gate of a multi-task model: every task's own decision; it passes only if every task passes.

    Args:
        passed (bool): every task's gate passed.
        reasons (list[str]): every task's reasons, each prefixed with ``[task]``.
        tasks (dict[str, GateDecision]): each task's decision, in task order.
        failed (list[str]): ``task.check`` of every failed check (e.g. ``buy.auc_vs_champion``).
    """

    passed: bool
    reasons: list[str]
    tasks: dict[str, GateDecision]
    failed: list[str]
    champion_source: str = "none"

    @property
    def champion_auc(self) -> float | None:
        """The champion's AUC on the primary (first) task."""
        return next(iter(self.tasks.values())).champion_auc

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide_tasks(
    candidate: Mapping[str, EvalReport | Mapping[str, Any]],
    champion: Mapping[str, EvalReport | Mapping[str, Any]] | None,
    gates: Mapping[str, GateConfig],
    champion_source: str = "re-evaluated on the same eval data",
) -> TaskGateDecision:
    """Gate a multi-task candidate task by task (:func:`decide` for each, with that task's thresholds
    and the champion's numbers on that task): a model better on click but worse on buy is refused, and
    the reason names the buy task.

    Args:
        candidate (Mapping[str, ...]): task → the candidate's result (``auc``, ``logloss``).
        champion (Mapping[str, ...] | None): task → the champion's result on the same eval data, or None.
        gates (Mapping[str, GateConfig]): task → thresholds; one for every candidate task.
        champion_source (str): how the champion numbers were produced.

    Raises:
        ValueError: a task without thresholds, or a champion that lacks one of the candidate's tasks
            (a model of other tasks is not comparable: register it under another name).

    Example::

        >>> d = decide_tasks({"ctr": {"auc": 0.75, "logloss": 0.2}, "cvr": {"auc": 0.80, "logloss": 0.03}},
        ...                  {"ctr": {"auc": 0.74, "logloss": 0.2}, "cvr": {"auc": 0.82, "logloss": 0.03}},
        ...                  {"ctr": GateConfig(min_auc=0.6), "cvr": GateConfig(min_auc=0.6)})
        >>> d.passed, d.failed
        (False, ['cvr.auc_vs_champion'])
    """
    missing = [t for t in candidate if t not in gates]
    if missing:
        raise ValueError(f"no gate thresholds for task(s) {missing}; gates are set for {sorted(gates)}")
    if champion is not None:
        lacking = [t for t in candidate if t not in champion]
        if lacking:
            raise ValueError(
                f"the champion has no result for task(s) {lacking} (its tasks: {sorted(champion)}): a model "
                "of other tasks cannot be compared with it"
            )
    decisions = {
        task: decide(result, None if champion is None else champion[task], gates[task], champion_source)
        for task, result in candidate.items()
    }
    return TaskGateDecision(
        passed=all(d.passed for d in decisions.values()),
        reasons=[f"[{task}] {r}" for task, d in decisions.items() for r in d.reasons],
        tasks=decisions,
        failed=[f"{task}.{name}" for task, d in decisions.items() for name in d.failed],
        champion_source=next(iter(decisions.values())).champion_source,
    )
