"""The retrieval gate: recall@K against a floor and the champion's recall (values at and beside each bound),
its K, and the champion fallback to the recall recorded at registration."""

from __future__ import annotations

import pytest

from recpipe.config import GateConfig
from recpipe.eval.retrieval_gate import decide_retrieval, evaluate_retrieval_champion, gate_k


def test_floor_and_champion_drop_at_and_beside_their_bounds() -> None:
    gate = GateConfig(min_recall_at_k=0.5, max_recall_drop=0.02)
    d = decide_retrieval({"recall_at_50": 0.5}, {"recall_at_50": 0.52}, gate, 50)
    assert d.passed and d.failed == [] and d.champion_recall == 0.52  # 0.52 - 0.02 == 0.5 exactly: passes
    d = decide_retrieval({"recall_at_50": 0.49}, {"recall_at_50": 0.60}, gate, 50, champion_source="v3 x")
    assert not d.passed and d.failed == ["min_recall_at_k", "max_recall_drop"]
    assert d.reasons[0] == "FAIL min_recall_at_k: recall@50 0.490000 is not >= 0.500000"
    assert d.reasons[1].startswith(
        "FAIL max_recall_drop: recall@50 0.490000 is not >= champion 0.600000 - 0.020000"
    )
    assert d.champion_source == "v3 x"


def test_no_champion_and_no_floor_pass_and_say_so() -> None:
    d = decide_retrieval({"recall_at_10": 0.01}, None, GateConfig(), 10)
    assert d.passed and d.champion_source == "none" and d.min_recall_at_k is None
    assert d.reasons == ["PASS champion: none registered (first version)"]


def test_missing_k_is_named() -> None:
    with pytest.raises(ValueError, match=r"candidate metrics lack 'recall_at_20'.*recall_at_10"):
        decide_retrieval({"recall_at_10": 0.3}, None, GateConfig(), 20)
    with pytest.raises(ValueError, match="champion metrics lack 'recall_at_10'"):
        decide_retrieval({"recall_at_10": 0.3}, {"auc": 0.7}, GateConfig(), 10)


def test_gate_k_is_recall_k_else_the_largest_cut_off() -> None:
    assert gate_k(GateConfig(), [10, 100, 50]) == 100
    assert gate_k(GateConfig(recall_k=10), [10, 100, 50]) == 10


def test_champion_falls_back_to_its_recorded_recall() -> None:
    def broken():
        raise OSError("checkpoint gone")

    c = evaluate_retrieval_champion(4, {"recall_at_50": 0.4, "auc": 0.9}, broken, None, None, (50,))
    assert c.metrics == {"recall_at_50": 0.4} and c.source.startswith(
        "v4 metrics recorded at its registration"
    )
    assert "OSError: checkpoint gone" in c.source
    with pytest.raises(RuntimeError, match="v4 could not be re-evaluated .*recorded no recall_at_<k>"):
        evaluate_retrieval_champion(4, {"auc": 0.9}, broken, None, None, (50,))
