"""``recpipe run --days`` (pipelines/replay.py): the daily loop replayed with kfp.local over generated days."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pipelines.replay import day_windows, replay_days
from recpipe import tracking
from recpipe.config import ParameterError

TINY_CONFIG = Path(__file__).parent / "data" / "tiny_din.yaml"


def test_day_windows_train_on_the_days_before_and_gate_on_the_day():
    days = ["20260101", "20260102", "20260103", "20260104"]
    assert day_windows(days, "dt", 1) == [
        "dt=20260101,20260102",
        "dt=20260102,20260103",
        "dt=20260103,20260104",
    ]
    # a window of 2: the first run has one day before it, the next two each have two
    assert day_windows(days, "dt", 2) == [
        "dt=20260101,20260102",
        "dt=20260101,20260102,20260103",
        "dt=20260102,20260103,20260104",
    ]
    with pytest.raises(ParameterError, match="a replay needs two or more"):
        day_windows(days[:1], "dt", 1)
    with pytest.raises(ParameterError, match="window: must be >= 1"):
        day_windows(days, "dt", 0)


def test_a_selector_over_a_folder_runs_each_eval_day_with_the_overrides_and_stops_at_a_failure(
    tmp_path, monkeypatch
):
    """The runs a replay asks for: each evaluation day's partitions of the given folder, the config's
    overrides, ``champion-if-any`` every day; a run that did not finish ends the replay."""
    import pipelines.local_run
    from recpipe.data.synthetic import generate

    folder = tmp_path / "days"
    generate("taobao", 900, folder, seed=3, days=3)
    calls: list[dict] = []

    def run_local(**kw):
        calls.append(kw)
        return SimpleNamespace(status="FAILED" if len(calls) == 2 else "FINISHED")

    monkeypatch.setattr(pipelines.local_run, "run_local", run_local)
    common = dict(config=str(TINY_CONFIG), runs_dir=tmp_path / "runs", data_source=str(folder))
    (one,) = replay_days("dt=20260102..20260103", overrides={"eval.gate.min_auc": 0.999}, **common)
    assert one.status == "FINISHED"
    (call,) = calls
    assert call["partitions"] == "dt=20260102,20260103" and call["data_source"] == str(folder)
    assert call["overrides"] == {"eval.gate.min_auc": 0.999} and call["init_from"] == "champion-if-any"
    assert call["model_name"] == "tiny-din"
    calls.clear()
    three = replay_days("dt=20260101..20260103", window=1, **common)  # two runs asked; the 2nd fails
    assert [c["partitions"] for c in calls] == ["dt=20260101,20260102", "dt=20260102,20260103"]
    assert [s.status for s in three] == ["FINISHED", "FAILED"]
    calls.clear()
    generate("taobao", 1200, tmp_path / "four", seed=3, days=4)
    common["data_source"] = str(tmp_path / "four")
    assert [s.status for s in replay_days("last:4", **common)] == ["FINISHED", "FAILED"]  # not the 3rd
    assert len(calls) == 2


def test_replay_refuses_the_settings_it_owns_and_a_selector_without_data(tmp_path):
    with pytest.raises(ParameterError, match="train.init_from is set by the replay"):
        replay_days("3", config=str(TINY_CONFIG), runs_dir=tmp_path, overrides={"train.init_from": "x"})
    with pytest.raises(ParameterError, match="without a data source give a number of generated days"):
        replay_days("last:3", config=str(TINY_CONFIG), runs_dir=tmp_path)
    assert not (tmp_path / "replay-data").exists()


def _executor_output(summary, task):
    (path,) = Path(summary.run_dir, "kfp").glob(f"*/{task}/executor_output.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_three_generated_days_warm_start_promote_past_the_gate_and_keep_the_champion_past_a_rejection(
    tmp_path, monkeypatch
):
    """The daily loop under kfp.local on one MLflow store, three pipeline runs. Three generated days: day 2's
    run trains on day 1 from scratch (no champion yet) and becomes champion; day 3's warm-starts from it,
    trains on day 2 and is gated on day 3 against it (re-evaluated) and promoted. A third run of day 3 with
    the pipeline parameter ``min_auc`` 0.99 (over the YAML's 0.0) is rejected: nothing is exported or
    registered and the champion stays where it was."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    doc = yaml.safe_load(TINY_CONFIG.read_text())
    # an open gate (tiny data): the champion comparison still applies to day 3. The gate threshold comes from
    # the YAML when the run does not set it (the pipeline parameter defaults to "use the config").
    doc["eval"]["gate"].update(min_auc=0.0, max_auc_drop=1.0, max_logloss_rise=10.0)
    config = tmp_path / "tiny_din_daily.yaml"
    config.write_text(yaml.safe_dump(doc))
    runs = tmp_path / "runs"
    seen: list[str] = []
    common = dict(config=str(config), runs_dir=runs, gpus_per_worker=1, backends="rtp")
    summaries = replay_days("3", rows=9000, on_run=lambda sel, s: seen.append(sel), **common)
    assert seen == ["dt=20260101,20260102", "dt=20260102,20260103"]
    assert [s.status for s in summaries] == ["FINISHED", "FINISHED"], summaries[-1].format()
    first, second = summaries
    uri = first.tracking_uri

    params = tracking.run_summary(first.run_id, uri=uri)["params"]
    assert params["eval.gate.min_auc"] == "0.0" and "PASS min_auc: auc " in first.gate_reasons[0]
    assert first.gate_reasons[0].endswith(">= min_auc 0.000000")
    assert first.gate_passed and first.registered_version == 1 and first.champion_source == "none"
    assert first.backends["rtp"].startswith("parity ok")
    assert first.outcome == (
        "registered: tiny-din v1 (rtp) as challenger; promoted: tiny-din v1 is champion (first champion)"
    )
    assert [(v["version"], v["aliases"]) for v in first.versions] == [(1, ["challenger", "champion"])]
    # The summary reads the numbers back from MLflow: the registered version carries the same AUC.
    assert first.versions[0]["metrics"]["auc"] == pytest.approx(first.auc) and 0.5 < first.oracle_auc < 1.0
    # kfp.local ran evaluate's KFP outputs: Metrics, ClassificationMetrics (ROC, confusion) and the decision.
    out = _executor_output(first, "evaluate")
    assert set(out["artifacts"]["metrics"]["artifacts"][0]["metadata"]) == {
        "auc",
        "gauc",
        "logloss",
        "oracle_auc",
        "psi_max",  # the eval split's drift from the training split
    }
    assert set(out["artifacts"]["classification"]["artifacts"][0]["metadata"]) == {
        "confidenceMetrics",
        "confusionMatrix",
    }
    assert out["parameterValues"]["gate_passed"] is True

    assert second.gate_passed and second.registered_version == 2
    assert second.champion_source.startswith("v1 re-evaluated on the same eval data")
    tags = [tracking.run_summary(s.run_id, uri=uri)["tags"] for s in summaries]
    assert tags[0]["pipeline.init_from_resolved"] == "scratch" and "init_from" not in tags[0]
    assert tags[1]["pipeline.init_from_resolved"] == "models:/tiny-din/1"
    assert tags[1]["init_from_version"] == "1"
    # each run trained on the day before its eval day and was gated on that day
    assert [t["data_partitions"] for t in tags] == ["dt=20260101", "dt=20260102"]
    assert [t["eval_partitions"] for t in tags] == ["dt=20260102", "dt=20260103"]
    chain = tracking.lineage(uri, "tiny-din")
    assert [e["version"] for e in chain["entries"]] == [2, 1] and chain["end"] == "root"
    v2 = tracking.get_version(uri, "tiny-din", 2)
    assert v2["tags"]["parent_version"] == "1" and v2["tags"]["partitions"] == "dt=20260101,dt=20260102"
    assert tracking.get_version_by_alias(uri, "tiny-din", tracking.ALIAS_CHAMPION)["version"] == 2

    from pipelines.local_run import run_local

    third = run_local(min_auc=0.99, data_source=second.data_source, partitions=seen[-1], **common)
    assert third.status == "FINISHED", third.format()  # a failed gate is a normal outcome
    run = tracking.run_summary(third.run_id, uri=uri)
    assert run["params"]["eval.gate.min_auc"] == "0.99"
    assert third.gate_passed is False and third.registered_version is None
    assert third.champion_source.startswith("v2 re-evaluated on the same eval data")
    assert third.outcome.startswith("rejected: FAIL min_auc: auc ")
    assert "PASS auc_vs_champion" in "\n".join(third.gate_reasons)
    assert not list(Path(third.run_dir, "kfp").glob("*/export"))  # the gate-passed branch did not run
    assert tracking.get_version_by_alias(uri, "tiny-din", tracking.ALIAS_CHAMPION)["version"] == 2
    assert run["tags"]["gate.decision"] == "rejected" and run["tags"]["pipeline.outcome"] == "rejected"
    text = third.format()
    assert (
        "gate          FAILED (champion: v2 re-evaluated" in text
        and "mlflow ui --backend-store-uri sqlite:///" in text
    )
