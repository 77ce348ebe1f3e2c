"""logit_agreement: the largest logit difference and both AUCs, task by task."""

from __future__ import annotations

import numpy as np
import pytest

from recpipe.eval.agreement import logit_agreement


def test_agreement_per_task():
    y = np.array([[0, 1], [1, 0], [1, 1], [0, 0]])
    ref = np.array([[-1.0, 2.0], [1.0, -2.0], [2.0, 1.0], [-2.0, -1.0]])
    a = logit_agreement(ref, ref + [[1e-6, 0.0], [0, 0], [0, 0], [0, 0.5]], y, ["clk", "buy"])
    assert a["clk"].max_abs_logit_diff == pytest.approx(1e-6) and a["clk"].same_auc
    assert a["clk"].auc_reference == a["clk"].auc_backend == 1.0
    assert a["buy"].max_abs_logit_diff == pytest.approx(0.5) and a["buy"].same_auc


def test_a_non_finite_backend_or_another_shape():
    y = np.array([0, 1, 1])
    a = logit_agreement(np.array([0.0, 1.0, 2.0]), np.array([0.0, np.nan, 2.0]), y, ["label"])
    assert a["label"].max_abs_logit_diff == float("inf")
    with pytest.raises(ValueError, match="backend returned logits"):
        logit_agreement(np.zeros(3), np.zeros((3, 2)), y, ["label"])
