"""The run summary's drift line: the largest PSI and the most drifting features, read from drift.* metrics."""

from __future__ import annotations

from recpipe.pipeline.summary import RunSummary, _largest


def test_the_most_drifting_features_come_first_and_at_most_three():
    metrics = {
        "drift.psi.price": 0.31,
        "drift.psi.age": 0.02,
        "drift.psi.ctr": 0.12,
        "drift.psi.width": 0.05,
        "drift.psi_max": 0.31,
        "drift.new_id_rate.user_id": 0.4,
        "eval.auc": 0.7,
    }
    assert _largest(metrics, "drift.psi.") == [("price", 0.31), ("ctr", 0.12), ("width", 0.05)]
    assert _largest(metrics, "drift.new_id_rate.") == [("user_id", 0.4)]


def test_the_drift_line_names_them_and_is_absent_without_drift():
    s = RunSummary(
        "r", "FINISHED", "sqlite:///x.db", psi_max=0.31,
        drift_psi=[("price", 0.31), ("ctr", 0.12)], drift_new_ids=[("user_id", 0.4)],
    )  # fmt: skip
    assert (
        "  drift         psi max 0.3100 (price 0.3100, ctr 0.1200); new ids user_id 40.0%"
        in s.format().splitlines()
    )
    assert "drift" not in RunSummary("r", "FINISHED", "sqlite:///x.db").format()
