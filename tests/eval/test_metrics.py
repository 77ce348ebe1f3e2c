"""Metrics against sklearn and against plain per-user loops, on small seeded data."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss, roc_auc_score

from recpipe.auc import binary_auc
from recpipe.eval.metrics import (
    MetricAccumulator,
    calibration_curve,
    gather_across_ranks,
    gauc,
    grouped_auc,
    logloss,
    recalibrate,
    roc_curve,
    sigmoid,
    weighted_auc,
)


def _tied_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    # Scores on a coarse grid: many ties, correlated with the label.
    scores = np.round(rng.normal(labels * 0.7, 1.0) * 4) / 4
    return labels, scores


def _pairwise_auc(labels, scores, weights):
    """The definition: weighted share of (positive, negative) pairs ranked right, ties half."""
    pos, neg = labels == 1, labels == 0
    sp, sn = scores[pos][:, None], scores[neg][None, :]
    wp, wn = weights[pos][:, None], weights[neg][None, :]
    wins = ((sp > sn) + 0.5 * (sp == sn)) * wp * wn
    return wins.sum() / (wp.sum() * wn.sum())


def _loop_gauc(groups, labels, scores, weights=None):
    num = den = 0.0
    used = skipped = 0
    for g in np.unique(groups):
        m = groups == g
        y = labels[m]
        if y.min() == y.max():
            skipped += 1
            continue
        w = None if weights is None else weights[m]
        imp = m.sum() if weights is None else w.sum()
        num += _pairwise_auc(y, scores[m], np.ones(m.sum()) if w is None else w) * imp
        den += imp
        used += 1
    return num / den, used, skipped


def test_auc_equals_sklearn_with_many_ties():
    labels, scores = _tied_data(5000)
    assert len(np.unique(scores)) < 40
    assert binary_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    acc = MetricAccumulator(from_logits=True)
    for i in range(0, 5000, 777):  # uneven batches, torch and numpy mixed
        sl = slice(i, i + 777)
        batch = torch.from_numpy(scores[sl]) if i % 2 else scores[sl]
        acc.update(labels[sl], batch)
    assert acc.compute().auc == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert acc.rows == 5000


def test_weighted_auc_equals_sklearn():
    labels, scores = _tied_data(3000, seed=1)
    w = np.random.default_rng(2).uniform(0.1, 3.0, labels.size)
    expected = roc_auc_score(labels, scores, sample_weight=w)
    assert weighted_auc(labels, scores, w) == pytest.approx(expected, abs=1e-12)
    assert _pairwise_auc(labels, scores, w) == pytest.approx(expected, abs=1e-12)


def test_auc_single_class_is_nan():
    assert math.isnan(weighted_auc(np.ones(5), np.arange(5.0)))
    assert math.isnan(weighted_auc(np.ones(5), np.arange(5.0), np.ones(5)))


def test_gauc_equals_per_user_loop():
    rng = np.random.default_rng(3)
    n = 4000
    groups = rng.integers(0, 1500, n)
    labels, scores = _tied_data(n, seed=4)
    got = gauc(groups, labels, scores)
    exp = _loop_gauc(groups, labels, scores)
    assert got[0] == pytest.approx(exp[0], abs=1e-12)
    assert got[1:] == exp[1:]
    assert got[2] > 0  # some users have a single class
    w = rng.uniform(0.5, 2.0, n)
    got_w = gauc(groups, labels, scores, w)
    exp_w = _loop_gauc(groups, labels, scores, w)
    assert got_w[0] == pytest.approx(exp_w[0], abs=1e-12)
    assert got_w[1:] == exp_w[1:]


def test_gauc_string_user_ids_and_per_group_values():
    groups = np.array(["u1", "u1", "u1", "u2", "u2", "u3"])
    labels = np.array([0, 1, 1, 1, 0, 1])
    scores = np.array([0.2, 0.2, 0.9, 0.1, 0.5, 0.3])
    res = grouped_auc(groups, labels, scores)
    # u1: positives 0.2 (tie with the negative: 0.5) and 0.9 (1.0) -> 0.75; u2: 0.0; u3: one class.
    np.testing.assert_allclose(res.auc[:2], [0.75, 0.0])
    assert math.isnan(res.auc[2])
    value, used, skipped = gauc(groups, labels, scores)
    assert (used, skipped) == (2, 1)
    assert value == pytest.approx((0.75 * 3 + 0.0 * 2) / 5)
    with_none = np.array(["u1", "u1", None, None], dtype=object)  # nulls from pandas form one group
    assert gauc(with_none, np.array([0, 1, 0, 1]), np.array([0.1, 0.2, 0.3, 0.4]))[:2] == (1.0, 2)


def test_gauc_is_fast_for_100k_users():
    rng = np.random.default_rng(5)
    n = 1_000_000
    groups = rng.integers(0, 100_000, n)
    labels = rng.integers(0, 2, n)
    scores = rng.random(n).astype(np.float32)
    t = time.perf_counter()
    value, used, skipped = gauc(groups, labels, scores)
    elapsed = time.perf_counter() - t
    assert used + skipped == len(np.unique(groups)) > 99_000
    assert 0.45 < value < 0.55
    assert elapsed < 5.0, f"GAUC over 100k users took {elapsed:.2f} s"


def test_logloss_equals_sklearn_from_probs_and_logits():
    rng = np.random.default_rng(6)
    labels = rng.integers(0, 2, 2000)
    logits = rng.normal(0, 2, 2000)
    probs = sigmoid(logits)
    expected = log_loss(labels, probs)
    assert logloss(labels, probs, from_logits=False) == pytest.approx(expected, rel=1e-9)
    assert logloss(labels, logits, from_logits=True) == pytest.approx(expected, rel=1e-9)
    w = rng.uniform(0.1, 2, 2000)
    assert logloss(labels, logits, from_logits=True, weights=w) == pytest.approx(
        log_loss(labels, probs, sample_weight=w), rel=1e-9
    )


def test_logloss_is_finite_for_extreme_predictions():
    labels = np.array([1, 0, 1, 0])
    assert math.isfinite(logloss(labels, np.array([-1e4, 1e4, 800.0, -800.0]), from_logits=True))
    assert math.isfinite(logloss(labels, np.array([0.0, 1.0, 1.0, 0.0]), from_logits=False))
    # Both clip to the same bound: the wrong, certain predictions cost -log(1e-7) each.
    a = logloss(labels[:2], np.array([-1e4, 1e4]), from_logits=True)
    b = logloss(labels[:2], np.array([0.0, 1.0]), from_logits=False)
    assert a == pytest.approx(b, rel=1e-6) and a == pytest.approx(-math.log(1e-7), rel=1e-6)


def test_accumulator_scalar_metrics():
    rng = np.random.default_rng(7)
    n = 3000
    labels = rng.integers(0, 2, n)
    logits = rng.normal(labels - 0.5, 1.0)
    true_prob = sigmoid(2.0 * (labels - 0.5) + rng.normal(0, 0.1, n))
    groups = rng.integers(0, 50, n)
    acc = MetricAccumulator(from_logits=True)
    for i in range(0, n, 1000):
        sl = slice(i, i + 1000)
        acc.update(
            torch.tensor(labels[sl]),
            torch.tensor(logits[sl], dtype=torch.float32),
            groups[sl],
            oracle=true_prob[sl],
        )
    m = acc.compute()
    probs = sigmoid(logits.astype(np.float32))
    assert m.rows == n
    assert m.positive_rate == pytest.approx(labels.mean())
    assert m.mean_prediction == pytest.approx(probs.mean(), rel=1e-6)
    assert m.calibration == pytest.approx(probs.mean() / labels.mean(), rel=1e-6)
    assert m.logloss == pytest.approx(log_loss(labels, probs), rel=1e-6)
    assert m.oracle_auc == pytest.approx(roc_auc_score(labels, true_prob))
    assert m.gauc == pytest.approx(_loop_gauc(groups, labels, logits.astype(np.float32))[0], abs=1e-12)
    assert m.gauc_users + m.gauc_skipped_users == 50


def test_accumulator_rejects_inconsistent_batches():
    acc = MetricAccumulator()
    acc.update([0, 1], [0.1, 0.2], groups=[1, 1])
    with pytest.raises(ValueError, match="same optional columns"):
        acc.update([0, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="rows"):
        acc.update([0, 1], [0.1], groups=[1, 1])
    with pytest.raises(ValueError, match="0 or 1"):
        acc.update([0, 2], [0.1, 0.2], groups=[1, 1])


def test_merge_counts_every_row_once():
    labels, scores = _tied_data(1000, seed=8)
    groups = np.arange(1000) % 17
    whole = MetricAccumulator()
    whole.update(labels, scores, groups)
    shards = []
    for r in range(3):
        a = MetricAccumulator()
        a.update(labels[r::3], scores[r::3], groups[r::3])
        shards.append(a.state())
    merged = MetricAccumulator()
    for st in shards:
        merged.merge(st)
    merged.merge(MetricAccumulator().state())  # an empty rank
    got, exp = merged.compute().to_dict(), whole.compute().to_dict()
    assert got.keys() == exp.keys()
    for k in exp:  # row order differs, so float sums may differ in the last bit
        assert got[k] == (exp[k] if exp[k] is None else pytest.approx(exp[k], rel=1e-12, nan_ok=True)), k
    assert got["rows"] == 1000 and got["auc"] == exp["auc"]
    with pytest.raises(ValueError, match="different settings"):
        merged.merge(MetricAccumulator(from_logits=False))


def test_gather_across_ranks_is_noop_without_process_group():
    acc = MetricAccumulator()
    acc.update([0, 1], [0.0, 1.0])
    assert gather_across_ranks(acc) is acc


def test_recalibrate_formula_and_accumulator():
    p = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(recalibrate(p, 0.25), p / (p + (1 - p) / 0.25))
    assert recalibrate(0.5, 1.0) == 0.5
    assert torch.allclose(recalibrate(torch.tensor([0.5]), 0.5), torch.tensor([1 / 3]))
    with pytest.raises(ValueError):
        recalibrate(p, 0.0)
    # Logit shift by log(rate) is the same map.
    rng = np.random.default_rng(9)
    labels = rng.integers(0, 2, 500)
    logits = rng.normal(0, 1, 500)
    a = MetricAccumulator(from_logits=True, neg_sample_rate=0.1)
    a.update(labels, logits)
    b = MetricAccumulator(from_logits=False, neg_sample_rate=0.1)
    b.update(labels, sigmoid(logits))
    np.testing.assert_allclose(a.probabilities(), recalibrate(sigmoid(logits), 0.1), rtol=1e-12)
    ma, mb = a.compute(), b.compute()
    assert ma.logloss == pytest.approx(mb.logloss, rel=1e-9)
    assert ma.auc == mb.auc  # AUC does not change under a monotone map
    assert ma.mean_prediction < 0.5 * sigmoid(logits).mean()


def test_roc_curve_is_thinned_and_matches_auc():
    labels, scores = _tied_data(20000, seed=10)
    scores = scores + np.random.default_rng(11).normal(0, 0.01, scores.size)  # ~all distinct
    roc = roc_curve(labels, scores, max_points=200)
    assert len(roc["fpr"]) <= 200 and len(roc["fpr"]) >= 150
    assert (roc["fpr"][0], roc["tpr"][0]) == (0.0, 0.0)
    assert (roc["fpr"][-1], roc["tpr"][-1]) == (1.0, 1.0)
    assert np.all(np.diff(roc["fpr"]) >= 0) and np.all(np.diff(roc["tpr"]) >= 0)
    assert np.trapezoid(roc["tpr"], roc["fpr"]) == pytest.approx(roc_auc_score(labels, scores), abs=2e-3)
    small = roc_curve(np.array([0, 1, 1, 0]), np.array([0.1, 0.9, 0.5, 0.5]))
    assert small["fpr"] == [0.0, 0.0, 0.5, 1.0] and small["tpr"] == [0.0, 0.5, 1.0, 1.0]
    assert small["thresholds"][1:] == [0.9, 0.5, 0.1]


def test_confusion_and_calibration_curve():
    acc = MetricAccumulator(from_logits=False)
    acc.update([1, 0, 1, 0, 1], [0.9, 0.8, 0.4, 0.1, 0.5])
    assert acc.confusion(0.5) == {"tp": 2, "fp": 1, "tn": 1, "fn": 1}
    rng = np.random.default_rng(12)
    p = rng.uniform(0.0, 0.2, 10000)
    y = (rng.random(10000) < p).astype(int)
    cc = calibration_curve(y, p, n_bins=10)
    assert len(cc["mean_prediction"]) == 10 and sum(cc["count"]) == 10000
    np.testing.assert_allclose(cc["observed_rate"], cc["mean_prediction"], atol=0.03)


@pytest.mark.slow
def test_gather_across_two_gloo_ranks(tmp_path):
    # The worker lives in a small module so the spawned ranks do not import sklearn.
    from gather_worker import run_rank, tied_data

    torch.multiprocessing.spawn(
        run_rank, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True
    )
    labels, scores, groups = tied_data()
    expected_gauc = gauc(groups, labels, scores)[0]
    for r in range(2):
        rows, auc, g = np.load(tmp_path / f"rank{r}.npy")
        assert rows == labels.size
        assert auc == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
        assert g == pytest.approx(expected_gauc, abs=1e-12)
