"""One evaluation: the candidate's report, the champion's numbers, the gate's decision, and the report file
(``report.json``) that holds them for the register stage.

Example::

    ev = gate_candidate(candidate, champion, cfg.eval.gate, cfg.eval.task_gates)
    ev.write("runs/x/eval/report.json", checkpoint="runs/x/train", data="runs/x/data/eval")
    read_report("runs/x/eval/report.json")["gate"]["passed"]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from recpipe.config import GateConfig
from recpipe.eval.champion import ChampionEval
from recpipe.eval.drift import DriftReport
from recpipe.eval.gate import GateDecision, TaskGateDecision, decide, decide_tasks
from recpipe.eval.report import EvalReport, json_safe


class ChampionDoc(TypedDict):
    """The report file's ``champion``."""

    version: int
    source: str
    metrics: dict[str, Any]


class ReportDoc(TypedDict, total=False):
    """The report file: the candidate's :class:`EvalReport` fields, the champion, the gate's decision
    (:class:`~recpipe.eval.gate.GateDecision` or :class:`~recpipe.eval.gate.TaskGateDecision` fields), what
    was evaluated on what."""

    candidate: dict[str, Any]
    champion: ChampionDoc | None
    gate: dict[str, Any]
    drift: dict[str, Any] | None  # DriftReport fields; None: not computed (no training split given)
    checkpoint: str
    data: str
    data_digest: str


@dataclass(frozen=True)
class Evaluation:
    """A candidate, the champion it was gated against (None without one), the decision and the eval split's
    drift (None: not computed)."""

    candidate: EvalReport
    champion: ChampionEval | None
    decision: GateDecision | TaskGateDecision
    drift: DriftReport | None = None

    def document(self, checkpoint: str, data: str) -> ReportDoc:
        champion: ChampionDoc | None = None
        if self.champion is not None:
            c = self.champion
            champion = {"version": c.version, "source": c.source, "metrics": c.metrics()}
        return {
            "candidate": self.candidate.to_dict(),
            "champion": champion,
            "gate": self.decision.to_dict(),
            "drift": None if self.drift is None else self.drift.to_dict(),
            "checkpoint": str(checkpoint),
            "data": str(data),
        }

    def write(self, path: str | Path, checkpoint: str, data: str) -> Path:
        """The report file at ``path`` (strict JSON: NaN as null, keys sorted)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = json_safe(dict(self.document(checkpoint, data)))
        path.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False))
        return path


def gate_candidate(
    candidate: EvalReport,
    champion: ChampionEval | None,
    gate: GateConfig,
    task_gates: Mapping[str, GateConfig] | None = None,
    drift: DriftReport | None = None,
) -> Evaluation:
    """Gate ``candidate`` against ``gate`` and the champion; a multi-task model task by task, each against
    the champion's same task, with ``task_gates[label]`` (``gate`` for a label not listed); ``gate``'s drift
    limits against ``drift`` once for the whole model."""
    source = {"champion_source": champion.source} if champion else {}
    decision: GateDecision | TaskGateDecision
    if candidate.tasks:
        gates = {label: (task_gates or {}).get(label, gate) for label in candidate.tasks}
        champion_tasks = None if champion is None else champion.task_results()
        decision = decide_tasks(
            candidate.tasks, champion_tasks, gates, **source, drift=drift, drift_gate=gate
        )
    else:
        champion_result = None if champion is None else champion.result()
        decision = decide(candidate, champion_result, gate, **source, drift=drift)
    return Evaluation(candidate, champion, decision, drift)


def read_report(path: str | Path) -> ReportDoc:
    """The report file written by :meth:`Evaluation.write`: ``candidate`` (EvalReport fields), ``champion``,
    ``gate``.

    Raises:
        ValueError: the file lacks ``candidate`` or ``gate``.
    """
    doc = json.loads(Path(path).read_text())
    missing = [k for k in ("candidate", "gate") if k not in doc]
    if missing:
        raise ValueError(f"{path} is not a recpipe evaluation report (missing {missing})")
    return doc
