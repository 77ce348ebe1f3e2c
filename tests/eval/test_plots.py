"""Plots are written as real PNG files with content."""

from __future__ import annotations

import numpy as np

from recpipe.eval.metrics import MetricAccumulator
from recpipe.eval.plots import calibration_curve_png, roc_curve_png, training_curves_png
from recpipe.eval.report import build_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path, min_bytes=5000):
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) >= min_bytes


def test_roc_and_calibration_png(tmp_path):
    rng = np.random.default_rng(0)
    p = rng.uniform(0.005, 0.3, 4000)
    acc = MetricAccumulator(from_logits=False)
    acc.update((rng.random(4000) < p).astype(int), p)
    r = build_report(acc)
    roc = roc_curve_png(r.roc, tmp_path / "plots" / "roc.png", auc=r.auc)
    cal = calibration_curve_png(r.calibration_curve, tmp_path / "plots" / "calibration.png")
    assert _is_png(roc) and _is_png(cal)


def test_training_curves_png(tmp_path):
    history = [{"step": s, "loss": 0.7 * 0.99**s, "train_auc": 0.5 + s / 400} for s in range(0, 100, 5)]
    history += [{"step": s, "eval_auc": 0.6 + s / 500, "eval_loss": 0.6} for s in (50, 100)]
    out = training_curves_png(history, tmp_path / "curves.png")
    assert _is_png(out)
