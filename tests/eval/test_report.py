"""EvalReport: built from an accumulator, written as strict JSON."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from recpipe.eval.metrics import MetricAccumulator
from recpipe.eval.report import build_report, json_safe


def _acc(seed: int = 0, n: int = 5000, oracle: bool = True) -> MetricAccumulator:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.3, n)
    labels = (rng.random(n) < p).astype(int)
    logits = np.log(p / (1 - p)) + rng.normal(0, 0.5, n)
    acc = MetricAccumulator(from_logits=True)
    acc.update(labels, logits, groups=rng.integers(0, 200, n), oracle=p if oracle else None)
    return acc


def test_build_report_fields():
    acc = _acc()
    r = build_report(acc, threshold=0.2, model_info={"name": "din", "version": 3})
    m = acc.compute()
    assert (r.auc, r.gauc, r.logloss, r.rows) == (m.auc, m.gauc, m.logloss, 5000)
    assert r.gauc_users + r.gauc_skipped_users == 200
    assert 0.5 < r.auc < r.oracle_auc < 1.0
    assert sum(r.confusion.values()) == 5000 and r.threshold == 0.2
    assert 2 <= len(r.roc["fpr"]) <= 200 and len(r.roc["fpr"]) == len(r.roc["tpr"]) == len(
        r.roc["thresholds"]
    )
    assert len(r.calibration_curve["mean_prediction"]) == 10
    assert r.model == {"name": "din", "version": 3}
    assert set(r.metrics()) >= {"auc", "gauc", "logloss", "calibration", "rows", "oracle_auc"}


def test_json_is_strict_with_nan_as_null():
    r = dataclasses.replace(build_report(_acc(oracle=False)), gauc=float("nan"))  # e.g. no group column
    text = json.dumps(json_safe(r.to_dict()), allow_nan=False)
    back = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert back["gauc"] is None and back["oracle_auc"] is None
    assert back["auc"] == r.auc and back["roc"] == r.roc and back["confusion"] == r.confusion
    assert back.keys() == r.to_dict().keys()


def test_report_of_empty_accumulator_is_nan():
    r = build_report(MetricAccumulator())
    assert r.rows == 0 and math.isnan(r.auc) and math.isnan(r.logloss)
