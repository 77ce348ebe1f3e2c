"""Multi-task gates: every task gated on its own thresholds and against the champion's same task."""

from __future__ import annotations

import pytest

from recpipe.config import GateConfig
from recpipe.eval.gate import decide_tasks

GATES = {"ctr": GateConfig(min_auc=0.6), "cvr": GateConfig(min_auc=0.7)}


def test_a_model_worse_on_buy_is_refused_even_if_better_on_click():
    champion = {"ctr": {"auc": 0.74, "logloss": 0.20}, "cvr": {"auc": 0.85, "logloss": 0.030}}
    candidate = {"ctr": {"auc": 0.76, "logloss": 0.19}, "cvr": {"auc": 0.83, "logloss": 0.031}}
    d = decide_tasks(candidate, champion, GATES)
    assert not d.passed and d.failed == ["cvr.auc_vs_champion"]
    assert d.tasks["ctr"].passed and not d.tasks["cvr"].passed
    reason = next(r for r in d.reasons if r.startswith("[cvr] FAIL"))
    assert "auc 0.830000 is not >= champion auc 0.850000" in reason


def test_each_task_has_its_own_floor_and_all_passing_passes():
    d = decide_tasks(
        {"ctr": {"auc": 0.65, "logloss": 0.2}, "cvr": {"auc": 0.65, "logloss": 0.03}}, None, GATES
    )
    assert not d.passed and d.failed == ["cvr.min_auc"]  # 0.65 clears ctr's 0.6, not cvr's 0.7
    d = decide_tasks(
        {"ctr": {"auc": 0.65, "logloss": 0.2}, "cvr": {"auc": 0.75, "logloss": 0.03}}, None, GATES
    )
    assert d.passed and d.failed == [] and all(r.startswith(("[ctr] ", "[cvr] ")) for r in d.reasons)


def test_tasks_without_thresholds_or_missing_from_the_champion_are_errors():
    with pytest.raises(ValueError, match=r"no gate thresholds for task\(s\) \['buy'\]"):
        decide_tasks({"buy": {"auc": 0.8, "logloss": 0.1}}, None, GATES)
    with pytest.raises(ValueError, match=r"the champion has no result for task\(s\) \['cvr'\]"):
        decide_tasks(
            {"ctr": {"auc": 0.8, "logloss": 0.1}, "cvr": {"auc": 0.8, "logloss": 0.1}},
            {"ctr": {"auc": 0.8, "logloss": 0.1}},
            GATES,
        )


def test_drift_is_checked_once_for_every_task():
    from recpipe.eval.drift import DriftReport, FeatureDrift

    drift = DriftReport(
        {"price": FeatureDrift("dense", "raw", "price", 0.0, 0.0, psi=0.4)}, 0.4, 10, 10, 10, 10
    )
    candidate = {"ctr": {"auc": 0.65, "logloss": 0.2}, "cvr": {"auc": 0.75, "logloss": 0.03}}
    gates = {t: g.model_copy(update={"max_psi": 0.25}) for t, g in GATES.items()}  # ignored: not the tasks'
    d = decide_tasks(candidate, None, gates, drift=drift, drift_gate=GateConfig(max_psi=0.25))
    assert not d.passed and d.failed == ["max_psi"] and d.tasks["cvr"].passed
    assert [r for r in d.reasons if "psi" in r] == [
        "FAIL max_psi: psi above max_psi 0.250000: price 0.400000"
    ]
    assert decide_tasks(candidate, None, gates, drift=drift).passed  # no drift_gate: no drift check
