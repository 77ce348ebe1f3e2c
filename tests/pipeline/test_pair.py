"""recpipe/pipeline/pair.py on a real sqlite store: the partners' tags, the decision, and a promotion that stays a
pair when its second half is refused (the first is undone)."""

from __future__ import annotations

import pytest

from recpipe import tracking
from recpipe.pipeline import pair

RETRIEVER, RANKER = "ret", "rank"


def _version(uri: str, tmp_path, model: str, passed: bool) -> pair.PairMember:
    run_id = tracking.start_or_resume_run(uri, "recpipe", run_name=model, tags={"registered_model": model})
    folder = tmp_path / f"{model}-{run_id}"
    folder.mkdir()
    (folder / "export.json").write_text("{}")
    tracking.log_model_dir(run_id, folder, "model", uri=uri)
    tags = {"gate_passed": "true" if passed else "false", "gate_reasons": "[]"}
    version = tracking.register_version(uri, model, run_id, "model", tags=tags)
    role = pair.ROLE_RETRIEVER if model == RETRIEVER else pair.ROLE_RANKER
    reasons = (
        []
        if passed
        else [
            "PASS min_auc: auc 0.7 >= 0.6",
            "FAIL auc_vs_champion: auc 0.7 < 0.8 (champion v1 re-evaluated)",
        ]
    )
    return pair.PairMember(role, model, version, run_id, passed, reasons)


def _champion(uri: str, model: str) -> int | None:
    v = tracking.get_version_by_alias(uri, model, tracking.ALIAS_CHAMPION)
    return None if v is None else int(v["version"])


@pytest.fixture
def uri(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_both_gates_passed_promotes_both_and_tags_each_with_its_partner(uri, tmp_path):
    r, k = _version(uri, tmp_path, RETRIEVER, True), _version(uri, tmp_path, RANKER, True)
    assert pair.decide(uri, r, k) == pair.PairDecision(True, "")
    assert tracking.get_version(uri, RETRIEVER, 1)["tags"]["pair_ranker"] == "rank/1"
    assert tracking.get_version(uri, RANKER, 1)["tags"]["pair_retriever"] == "ret/1"
    run = tracking.run_summary(k.run_id, uri=uri)["tags"]
    assert (run["pair.role"], run["pair.partner"], run["pair.partner_run_id"]) == (
        "ranker",
        "ret/1",
        r.run_id,
    )
    outcome = pair.promote(uri, r, k)
    assert (
        outcome == "promoted: the pair ret v1 + rank v1 is champion (ret first champion, rank first champion)"
    )
    assert (_champion(uri, RETRIEVER), _champion(uri, RANKER)) == (1, 1)
    assert tracking.run_summary(r.run_id, uri=uri)["tags"]["pair.outcome"] == outcome


def test_a_failed_gate_decides_no_and_marks_that_run_rejected(uri, tmp_path):
    r, k = _version(uri, tmp_path, RETRIEVER, True), _version(uri, tmp_path, RANKER, False)
    d = pair.decide(uri, r, k)
    assert d == pair.PairDecision(
        False, "rejected: not promoted: the ranker's gate failed (FAIL auc_vs_champion: auc 0.7 < 0.8)"
    )
    assert tracking.run_summary(k.run_id, uri=uri)["tags"]["gate.decision"] == "rejected"
    assert "gate.decision" not in tracking.run_summary(r.run_id, uri=uri)["tags"]
    assert pair.decide(uri, r, _version(uri, tmp_path, RANKER, True), auto_promote=False).outcome == (
        "registered: not promoted (auto_promote off): ret v1 + rank v2"
    )


def test_a_refused_second_promotion_undoes_the_first(uri, tmp_path):
    r1, k1 = _version(uri, tmp_path, RETRIEVER, True), _version(uri, tmp_path, RANKER, False)
    with pytest.raises(tracking.PromotionRefused):  # the first champion: its alias is removed again
        pair.promote(uri, r1, k1)
    assert (_champion(uri, RETRIEVER), _champion(uri, RANKER)) == (None, None)
    pair.promote(uri, r1, _version(uri, tmp_path, RANKER, True))
    r2, k3 = _version(uri, tmp_path, RETRIEVER, True), _version(uri, tmp_path, RANKER, False)
    with pytest.raises(tracking.PromotionRefused):  # a later pair: the retriever rolls back to its partner's
        pair.promote(uri, r2, k3)
    assert (_champion(uri, RETRIEVER), _champion(uri, RANKER)) == (1, 2)
