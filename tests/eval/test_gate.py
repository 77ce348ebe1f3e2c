"""The gate's truth table, with and without a champion, and NaN; the drift limits (max_psi)."""

from __future__ import annotations

import math

import pytest

from recpipe.config import GateConfig
from recpipe.eval.drift import DriftReport, FeatureDrift
from recpipe.eval.gate import decide
from recpipe.eval.report import EvalReport

GATE = GateConfig(min_auc=0.6, max_auc_drop=0.005, max_logloss_rise=0.01)
CHAMP = {"auc": 0.70, "logloss": 0.40}


@pytest.mark.parametrize(
    ("candidate", "champion", "passed", "failed"),
    [
        ({"auc": 0.65, "logloss": 0.5}, None, True, []),
        ({"auc": 0.60, "logloss": 0.5}, None, True, []),  # exactly at the floor
        ({"auc": 0.59, "logloss": 0.1}, None, False, ["min_auc"]),
        ({"auc": 0.71, "logloss": 0.39}, CHAMP, True, []),
        ({"auc": 0.695, "logloss": 0.41}, CHAMP, True, []),  # both exactly at their bounds
        ({"auc": 0.694, "logloss": 0.40}, CHAMP, False, ["auc_vs_champion"]),
        ({"auc": 0.72, "logloss": 0.411}, CHAMP, False, ["logloss_vs_champion"]),
        ({"auc": 0.55, "logloss": 0.5}, CHAMP, False, ["min_auc", "auc_vs_champion", "logloss_vs_champion"]),
        ({"auc": float("nan"), "logloss": 0.3}, None, False, ["min_auc"]),
        ({"auc": float("nan"), "logloss": 0.3}, CHAMP, False, ["min_auc", "auc_vs_champion"]),
        ({"auc": 0.75, "logloss": float("nan")}, CHAMP, False, ["logloss_vs_champion"]),
        ({"auc": 0.75, "logloss": 0.3}, {"auc": float("nan"), "logloss": 0.4}, False, ["auc_vs_champion"]),
        ({"auc": None, "logloss": 0.3}, None, False, ["min_auc"]),
    ],
)
def test_truth_table(candidate, champion, passed, failed):
    d = decide(candidate, champion, GATE)
    assert d.passed is passed
    assert d.failed == failed
    fails = [r for r in d.reasons if r.startswith("FAIL")]
    assert [r.split(":")[0].removeprefix("FAIL ") for r in fails] == failed


def test_reasons_carry_numbers_and_champion_source():
    d = decide({"auc": 0.694, "logloss": 0.40}, CHAMP, GATE, champion_source="tag of version 7")
    assert d.champion_source == "tag of version 7"
    assert d.reasons[0] == "PASS min_auc: auc 0.694000 >= min_auc 0.600000"
    assert (
        "FAIL auc_vs_champion: auc 0.694000 is not >= champion auc 0.700000 - max_auc_drop 0.005000"
        in d.reasons[1]
    )
    assert "= 0.695000 (champion tag of version 7)" in d.reasons[1]
    assert d.reasons[2].startswith("PASS logloss_vs_champion: logloss 0.400000 <=")
    assert (d.champion_auc, d.champion_logloss) == (0.70, 0.40)


def test_no_champion_is_recorded():
    d = decide({"auc": 0.65, "logloss": 0.5}, None, GATE)
    assert d.champion_source == "none" and d.champion_auc is None
    assert any(r.startswith("PASS no_champion") for r in d.reasons)


def test_accepts_reports_and_rejects_incomplete_input():
    rep = EvalReport(auc=0.7, gauc=0.6, gauc_users=1, gauc_skipped_users=0, logloss=0.4, calibration=1.0,
                     mean_prediction=0.1, positive_rate=0.1, rows=10, oracle_auc=None)  # fmt: skip
    assert decide(rep, rep, GATE).passed
    with pytest.raises(ValueError, match="lacks"):
        decide({"auc": 0.7}, None, GATE)
    d = decide(rep, None, GATE)
    assert d.to_dict()["candidate_auc"] == 0.7 and not math.isnan(d.candidate_logloss)


def _drift(**psi: float) -> DriftReport:
    """A drift report of numeric features with these PSI values and one id feature (``user_id``)."""
    features = {k: FeatureDrift("dense", "raw", k, 0.0, 0.0, psi=v) for k, v in psi.items()}
    features["user_id"] = FeatureDrift("sparse", "id", "user_id", 0.0, 0.0, new_id_rate=0.3)
    return DriftReport(features, max(psi.values()), 100, 100, 100, 100)


PASSING = {"auc": 0.65, "logloss": 0.5}


def test_max_psi_holds_promotion_and_names_every_feature_above_it():
    drift = _drift(price=0.31, age=0.22, ctr=0.05)
    d = decide(PASSING, None, GATE.model_copy(update={"max_psi": 0.2}), drift=drift)
    assert not d.passed and d.failed == ["max_psi"]
    assert "FAIL max_psi: psi above max_psi 0.200000: price 0.310000, age 0.220000" in d.reasons
    assert "ctr" not in d.reasons[-1]
    assert (d.max_psi, d.psi_max) == (0.2, 0.31)  # numbers, not strings
    ok = decide(PASSING, None, GATE.model_copy(update={"max_psi": 0.31}), drift=drift)  # at the bound
    assert ok.passed and ok.reasons[-1] == "PASS max_psi: largest psi 0.310000 (price) <= max_psi 0.310000"


def test_a_per_feature_limit_holds_promotion_naming_that_feature():
    drift = _drift(price=0.31, age=0.22)
    gate = GATE.model_copy(update={"max_psi_per_feature": {"age": 0.1, "price": 0.5}})
    d = decide(PASSING, None, gate, drift=drift)
    assert not d.passed and d.failed == ["max_psi.age"]
    assert "FAIL max_psi.age: age psi 0.220000 is not <= 0.100000" in d.reasons
    assert "PASS max_psi.price: price psi 0.310000 <= 0.500000" in d.reasons
    assert d.to_dict()["max_psi_per_feature"] == {"age": 0.1, "price": 0.5}
    with pytest.raises(ValueError, match=r"names \['user_id'\], which have no PSI"):
        decide(PASSING, None, GATE.model_copy(update={"max_psi_per_feature": {"user_id": 0.1}}), drift=drift)


def test_drift_limits_without_drift_statistics_fail_and_no_limits_check_nothing():
    gate = GATE.model_copy(update={"max_psi": 0.2, "max_psi_per_feature": {"age": 0.1}})
    d = decide(PASSING, None, gate)
    assert d.failed == ["max_psi", "max_psi.age"] and "no drift statistics" in d.reasons[-1]
    plain = decide(PASSING, None, GATE, drift=_drift(price=5.0))  # no drift limit set: drift is reported only
    assert plain.passed and not any("psi" in r for r in plain.reasons) and plain.psi_max == 5.0
