"""The promotion gate: a pure function of two evaluation results, the eval split's drift and the gate
thresholds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from recpipe.config import GateConfig
from recpipe.eval.drift import DriftReport, check_feature_limits
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
    # The drift limits checked (GateConfig's) and the eval split's largest PSI (None: not computed).
    max_psi: float | None = None
    max_psi_per_feature: dict[str, float] = field(default_factory=dict)
    psi_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _line(name: str, ok: bool, text: str) -> str:
    """One reason: ``PASS name: text`` or ``FAIL name: text``."""
    return f"{'PASS' if ok else 'FAIL'} {name}: {text}"


def drift_checks(drift: DriftReport | None, gate: GateConfig) -> list[tuple[str, bool, str]]:
    """The drift checks of ``gate`` as ``(name, passed, text)``: ``max_psi`` over every feature (naming those
    above it with their PSI) and ``max_psi.<feature>`` for each per-feature limit; none when the gate sets no
    drift limit. Without drift statistics a set limit fails: drift that was not measured is not known to be
    small.

    Raises:
        ValueError: a per-feature limit on a feature that has no PSI (:func:`recpipe.eval.drift.check_feature_limits`).
    """
    if not gate.checks_drift():
        return []
    if drift is None:
        text = "no drift statistics (evaluate was given no training split to compare the eval split with)"
        names = ["max_psi"] if gate.max_psi is not None else []
        return [(n, False, text) for n in names + [f"max_psi.{f}" for f in gate.max_psi_per_feature]]
    check_feature_limits(drift, gate.max_psi_per_feature)
    out: list[tuple[str, bool, str]] = []
    if gate.max_psi is not None:
        limit = gate.max_psi
        over = [(k, v) for k, v in drift.top(len(drift.features)) if v > limit + _TOLERANCE]
        top = drift.psi_max
        ok = not over
        if top is None:
            text = f"no numeric feature, no PSI; max_psi {limit:.6f}"
        elif ok:
            text = f"largest psi {top:.6f} ({drift.top(1)[0][0]}) <= max_psi {limit:.6f}"
        else:
            named = ", ".join(f"{k} {v:.6f}" for k, v in over)
            text = f"psi above max_psi {limit:.6f}: {named}"
        out.append(("max_psi", ok, text))
    for name, limit in gate.max_psi_per_feature.items():
        value = drift.psi_of(name)
        assert value is not None  # check_feature_limits refused the others
        ok = value <= limit + _TOLERANCE
        out.append(
            (f"max_psi.{name}", ok, f"{name} psi {value:.6f} {'<=' if ok else 'is not <='} {limit:.6f}")
        )
    return out


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
    drift: DriftReport | None = None,
) -> GateDecision:
    """Gate a candidate against the absolute AUC floor, when there is one the champion, and the drift limits.

    Passes iff ``auc >= min_auc`` and, with a champion, ``auc >= champion_auc - max_auc_drop`` and
    ``logloss <= champion_logloss + max_logloss_rise``, and every set drift limit holds (:func:`drift_checks`).
    NaN never passes a check.

    Args:
        candidate (EvalReport | Mapping): the new model's result (``auc``, ``logloss``).
        champion (EvalReport | Mapping | None): the current champion's result, or None.
        gate (GateConfig): thresholds.
        champion_source (str): how the champion numbers were produced (recorded, not used).
        drift (DriftReport | None): the eval split's drift against the training window, when computed.

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
        reasons.append(_line(name, ok, text))
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
    for name, ok, text in drift_checks(drift, gate):
        check(name, ok, text)

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
        max_psi=gate.max_psi,
        max_psi_per_feature=dict(gate.max_psi_per_feature),
        psi_max=None if drift is None else drift.psi_max,
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
    # The drift limits checked once for the whole model (``drift_gate``'s) and the largest PSI.
    max_psi: float | None = None
    max_psi_per_feature: dict[str, float] = field(default_factory=dict)
    psi_max: float | None = None

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
    drift: DriftReport | None = None,
    drift_gate: GateConfig | None = None,
) -> TaskGateDecision:
    """Gate a multi-task candidate task by task (:func:`decide` for each, with that task's thresholds
    and the champion's numbers on that task): a model better on click but worse on buy is refused, and
    the reason names the buy task. Drift is the data's, not a task's: ``drift_gate``'s drift limits are
    checked once (unprefixed reasons), the tasks' own are not.

    Args:
        candidate (Mapping[str, ...]): task → the candidate's result (``auc``, ``logloss``).
        champion (Mapping[str, ...] | None): task → the champion's result on the same eval data, or None.
        gates (Mapping[str, GateConfig]): task → thresholds; one for every candidate task.
        champion_source (str): how the champion numbers were produced.
        drift (DriftReport | None): the eval split's drift, when computed.
        drift_gate (GateConfig | None): whose ``max_psi`` / ``max_psi_per_feature`` apply (None: no drift check).

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
    no_drift = {"max_psi": None, "max_psi_per_feature": {}}
    decisions = {
        task: decide(
            result,
            None if champion is None else champion[task],
            gates[task].model_copy(update=no_drift),
            champion_source,
        )
        for task, result in candidate.items()
    }
    checks = drift_checks(drift, drift_gate) if drift_gate is not None else []
    reasons = [f"[{task}] {r}" for task, d in decisions.items() for r in d.reasons]
    reasons += [_line(name, ok, text) for name, ok, text in checks]
    return TaskGateDecision(
        passed=all(d.passed for d in decisions.values()) and all(ok for _, ok, _ in checks),
        reasons=reasons,
        tasks=decisions,
        failed=[f"{task}.{name}" for task, d in decisions.items() for name in d.failed]
        + [name for name, ok, _ in checks if not ok],
        champion_source=next(iter(decisions.values())).champion_source,
        max_psi=None if drift_gate is None else drift_gate.max_psi,
        max_psi_per_feature={} if drift_gate is None else dict(drift_gate.max_psi_per_feature),
        psi_max=None if drift is None else drift.psi_max,
    )
