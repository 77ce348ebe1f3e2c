"""The retrieval model's promotion gate and its evaluation report: recall@K over the whole catalogue against a
floor (``eval.gate.min_recall_at_k``) and against the champion's recall on the same rows and catalogue
(``max_recall_drop``), plus the drift limits every gate has. A pure function, as the ranking gate
(:func:`recpipe.eval.gate.decide`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recpipe.config import GateConfig
from recpipe.eval.drift import DriftReport
from recpipe.eval.gate import drift_checks
from recpipe.eval.report import json_safe

if TYPE_CHECKING:
    import pyarrow as pa
    import torch

    from recpipe.data.negative_sampler import ItemTable
    from recpipe.features.spec import FeatureSpec

_TOLERANCE = 1e-12


def gate_k(gate: GateConfig, recall_at_k: list[int]) -> int:
    """The K the gate checks: ``gate.recall_k``, else the largest of ``eval.recall_at_k``."""
    return gate.recall_k if gate.recall_k is not None else max(recall_at_k)


@dataclass(frozen=True)
class RetrievalGateDecision:
    """Whether a retrieval candidate may become champion, and why.

    Args:
        passed (bool): every check passed.
        reasons (list[str]): one line per check, ``PASS ...`` or ``FAIL ...``, with the numbers.
        champion_source (str): how the champion's recall was obtained, or ``"none"``.
        k (int): the cut-off checked.
        candidate_recall (float): the candidate's recall@k.
        min_recall_at_k (float | None), max_recall_drop (float): the thresholds.
        champion_recall (float | None): the champion's recall@k (None: no champion).
        failed (list[str]): the names of the failed checks.
    """

    passed: bool
    reasons: list[str]
    champion_source: str
    k: int
    candidate_recall: float
    min_recall_at_k: float | None
    max_recall_drop: float
    champion_recall: float | None = None
    failed: list[str] = field(default_factory=list)
    max_psi: float | None = None
    psi_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _recall(metrics: Mapping[str, Any], k: int, role: str) -> float:
    key = f"recall_at_{k}"
    if metrics.get(key) is None:
        raise ValueError(f"{role} metrics lack {key!r} (the gate's K); they have {sorted(metrics)}")
    return float(metrics[key])


def decide_retrieval(
    candidate: Mapping[str, Any],
    champion: Mapping[str, Any] | None,
    gate: GateConfig,
    k: int,
    champion_source: str = "re-evaluated on the same eval data and catalogue",
    drift: DriftReport | None = None,
) -> RetrievalGateDecision:
    """Passes iff ``recall@k >= min_recall_at_k`` (when set), with a champion ``recall@k >= champion's -
    max_recall_drop``, and every set drift limit holds.

    Args:
        candidate (Mapping): the candidate's metrics (``recall_at_<k>``, …).
        champion (Mapping | None): the champion's on the same rows (None: no champion).
        gate (GateConfig): the thresholds.
        k (int): the cut-off (:func:`gate_k`).
        champion_source (str): how the champion's numbers were obtained.
        drift (DriftReport | None): the eval split's drift against the training split.

    Example::

        >>> d = decide_retrieval({"recall_at_50": 0.61}, {"recall_at_50": 0.64}, GateConfig(max_recall_drop=0.02), 50)
        >>> d.passed, d.failed
        (False, ['max_recall_drop'])
    """
    recall = _recall(candidate, k, "candidate")
    reasons: list[str] = []
    failed: list[str] = []

    def check(name: str, ok: bool, text: str) -> None:
        reasons.append(f"{'PASS' if ok else 'FAIL'} {name}: {text}")
        if not ok:
            failed.append(name)

    floor = gate.min_recall_at_k
    if floor is not None:
        ok = recall >= floor - _TOLERANCE
        check("min_recall_at_k", ok, f"recall@{k} {recall:.6f} {'>=' if ok else 'is not >='} {floor:.6f}")
    champ = None
    if champion is not None:
        champ = _recall(champion, k, "champion")
        bound = champ - gate.max_recall_drop
        ok = recall >= bound - _TOLERANCE
        check(
            "max_recall_drop",
            ok,
            f"recall@{k} {recall:.6f} {'>=' if ok else 'is not >='} champion {champ:.6f} - "
            f"{gate.max_recall_drop:.6f} ({champion_source})",
        )
    else:
        reasons.append("PASS champion: none registered (first version)")
    for name, ok, text in drift_checks(drift, gate):
        check(name, ok, text)
    return RetrievalGateDecision(
        passed=not failed,
        reasons=reasons,
        champion_source=champion_source if champion is not None else "none",
        k=k,
        candidate_recall=recall,
        min_recall_at_k=floor,
        max_recall_drop=gate.max_recall_drop,
        champion_recall=champ,
        failed=failed,
        max_psi=gate.max_psi,
        psi_max=None if drift is None else drift.psi_max,
    )


@dataclass(frozen=True)
class RetrievalChampion:
    """How the champion did on this eval data and catalogue, or (not re-evaluated) at its registration.

    Args:
        version (int): its registry version.
        source (str): how the numbers were obtained (the gate's ``champion_source``).
        metrics (dict): ``recall_at_<k>`` / ``hit_rate_at_<k>`` …
    """

    version: int
    source: str
    metrics: dict[str, Any]


def evaluate_retrieval_champion(
    version: int,
    recorded: Mapping[str, Any],
    load: Callable[[], tuple[torch.nn.Module, FeatureSpec]],
    rows: pa.Table,
    items: ItemTable,
    ks: tuple[int, ...],
) -> RetrievalChampion:
    """The champion (its model and FeatureSpec from ``load()``: its verified training checkpoint) re-scored on
    ``rows`` against the catalogue ``items``; when that fails, the ``recorded`` ``recall_at_<k>`` of its
    version, with the reason in the source.

    Raises:
        RuntimeError: it could not be re-scored and recorded no recall.
    """
    from recpipe.eval.retrieval import retrieval_metrics

    try:
        model, spec = load()
        metrics = retrieval_metrics(model, spec, rows, items, ks)
        source = f"v{version} re-evaluated on the same eval data and catalogue (its training checkpoint)"
        return RetrievalChampion(version, source, metrics)
    except Exception as err:  # noqa: BLE001 - fall back to the registered numbers, and say so
        kept = {k: float(v) for k, v in recorded.items() if str(k).startswith(("recall_at_", "hit_rate_at_"))}
        if not kept:
            raise RuntimeError(
                f"champion v{version} could not be re-evaluated ({err}) and recorded no recall_at_<k>"
            ) from err
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        return RetrievalChampion(version, f"v{version} metrics recorded at its registration ({why})", kept)


@dataclass(frozen=True)
class RetrievalEvaluation:
    """A retrieval candidate's metrics, its champion (None without one), the decision, the drift."""

    candidate: dict[str, Any]
    champion: RetrievalChampion | None
    decision: RetrievalGateDecision
    drift: DriftReport | None = None

    def write(self, path: str | Path, checkpoint: str, data: str) -> Path:
        """The report file (the ranking report's keys: ``candidate``, ``champion``, ``gate``, ``drift``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        champion = None
        if self.champion is not None:
            c = self.champion
            champion = {"version": c.version, "source": c.source, "metrics": c.metrics}
        doc = {
            "kind": "retrieval",
            "candidate": self.candidate,
            "champion": champion,
            "gate": self.decision.to_dict(),
            "drift": None if self.drift is None else self.drift.to_dict(),
            "checkpoint": str(checkpoint),
            "data": str(data),
        }
        path.write_text(json.dumps(json_safe(doc), indent=2, sort_keys=True, allow_nan=False))
        return path
