"""start / ingest / fit / reject / finish / promote called through their Python functions, on a real
sqlite MLflow store."""

import json

import pyarrow.parquet as pq
import pytest
from kfp.dsl import Artifact, Dataset

from components import finish, fit, ingest, promote, reject, start
from recpipe import tracking
from recpipe.config import ParameterError, load_config

START_ARGS = dict(
    data_source="synthetic:taobao?rows=3000",
    backends="onnx, rtp",
    min_auc="0.55",
    max_auc_drop="0.01",
    max_logloss_rise="0.02",
    workers=1,
    gpus_per_worker=0,
    model_name="",
    node_selector={"gpu": "h200"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    config_overrides={"train.max_steps": 7},
    kfp_run_id="kfp-run-42",
    launcher="local",
)

# A ranking config's gate holds the retrieval gate's fields at their defaults (unset: a ranking config refuses them).
RECALL_GATE_DEFAULTS = {"recall_k": None, "min_recall_at_k": None, "max_recall_drop": 0.01}


def _start(tmp_path, tiny_config, uri, **kw):
    cfg = Artifact(uri=str(tmp_path / "config.yaml"))
    args = {**START_ARGS, "config_path": tiny_config, "mlflow_uri": uri, "config": cfg, **kw}
    return start.python_func(**args), cfg


def test_start_resolves_config_and_opens_the_run(tmp_path, tiny_config, sqlite_uri):
    out, cfg_artifact = _start(tmp_path, tiny_config, sqlite_uri)
    run_id, uri, model, backends, pod_gpus, pod_selector, pod_tolerations = out
    assert (uri, model, backends) == (sqlite_uri, "tiny-din", "onnx,rtp")
    # One pod trains: it asks for the GPUs and placement itself.
    assert (pod_gpus, pod_selector) == (0, {"gpu": "h200"}) and pod_tolerations[0]["key"] == "nvidia.com/gpu"
    cfg = load_config(cfg_artifact.path)
    assert cfg.eval.gate.model_dump() == {
        "min_auc": 0.55, "max_auc_drop": 0.01, "max_logloss_rise": 0.02, "max_psi": None, "max_psi_per_feature": {},
        **RECALL_GATE_DEFAULTS,
    }  # fmt: skip
    assert cfg.export.backends == ["onnx", "rtp"] and cfg.train.max_steps == 7
    run = tracking.run_summary(run_id, uri=sqlite_uri)
    assert run["status"] == "RUNNING"
    assert run["tags"]["kfp_run_id"] == "kfp-run-42" and run["tags"]["config_digest"] == cfg.digest()
    assert run["params"]["eval.gate.min_auc"] == "0.55" and run["params"]["pipeline.backends"] == "onnx,rtp"


@pytest.mark.parametrize(
    ("change", "parameter", "text"),
    [
        ({"backends": "jit,tensorflow"}, "backends", "unknown backend(s) ['tensorflow']"),
        ({"min_auc": "1.5"}, "min_auc", "must be in [0, 1], got 1.5"),
        ({"min_auc": "high"}, "min_auc", "must be a number in [0, 1], got 'high'"),
        ({"max_auc_drop": "-0.1"}, "max_auc_drop", "must be in [0, 1]"),
        ({"max_logloss_rise": "2.0"}, "max_logloss_rise", "must be in [0, 1]"),
        ({"launcher": "slurm"}, "launcher", "must be one of ['local', 'pytorchjob']"),
        ({"config_path": "configs/nope.yaml"}, "config", "does not exist"),
        ({"data_source": "/no/such/folder"}, "data_source", "not readable"),
        ({"data_source": "synthetic:mnist?rows=10"}, "data_source", "synthetic kind"),
        # Issue 17: Criteo rows for a Taobao config failed only in train, ~40 s later.
        ({"data_source": "synthetic:criteo?rows=100"}, "data_source", "does not fit the config"),
        ({"data_source": "odps://proj/tables/t/dt=20240101"}, "data_source", "ODPS_ACCESS_ID"),
        ({"workers": 0}, "workers", "must be >= 1"),
        ({"node_selector": {"gpu": 1}}, "node_selector", "string values"),
        (
            {"tolerations": [{"key": "gpu", "operator": "Sometimes"}]},
            "tolerations",
            "operator must be one of",
        ),
        ({"config_overrides": {"train.epochs": 0}}, "config", "train.epochs"),
        # A backend that leaves the schedule-time placeholder unresolved: no scheduled day to fill in.
        (
            {"partitions": "dt={date-1}", "schedule_time": "{{$.pipeline_job_schedule_time_utc}}"},
            "partitions",
            "this run has none",
        ),
        ({"init_from": "models:/tiny-din@champion"}, "init_from", "init_from=champion-if-any"),
        (
            {"init_from": "champion-if-any", "config_overrides": {"train.init_from": "/ckpt"}},
            "init_from",
            "disagrees with config_overrides",
        ),
    ],
)
def test_start_names_the_bad_parameter(
    tmp_path, tiny_config, sqlite_uri, monkeypatch, change, parameter, text
):
    for k in ("ODPS_ACCESS_ID", "ODPS_ACCESS_KEY", "ODPS_ENDPOINT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ParameterError) as err:
        _start(tmp_path, tiny_config, sqlite_uri, **change)
    assert err.value.parameter == parameter
    assert str(err.value).startswith(f"parameter {parameter}: ") and text in str(err.value)
    # Nothing was started: a bad parameter fails before the run exists.
    assert (
        tracking.uri.client(sqlite_uri).search_runs(
            [e.experiment_id for e in tracking.uri.client(sqlite_uri).search_experiments()]
        )
        == []
    )


def test_yaml_gate_survives_unset_parameters_and_set_ones_override(tmp_path, tiny_config, sqlite_uri):
    """The pipeline's gate parameters default to "use the config": a run that sets none keeps every
    threshold of the YAML's eval.gate (values unlike GateConfig's defaults), a set one replaces only itself."""
    import yaml

    doc = yaml.safe_load(open(tiny_config).read())
    doc["eval"]["gate"] = {
        "min_auc": 0.42, "max_auc_drop": 0.03, "max_logloss_rise": 0.04, "max_psi": 0.3, "max_psi_per_feature": {}
    }  # fmt: skip
    config = tmp_path / "gate.yaml"
    config.write_text(yaml.safe_dump(doc))
    unset = {"min_auc": "", "max_auc_drop": "", "max_logloss_rise": ""}
    (run_id, *_), cfg = _start(tmp_path / "a", str(config), sqlite_uri, **unset)
    assert load_config(cfg.path).eval.gate.model_dump() == {**doc["eval"]["gate"], **RECALL_GATE_DEFAULTS}
    assert tracking.run_summary(run_id, uri=sqlite_uri)["params"]["eval.gate.min_auc"] == "0.42"
    _, cfg = _start(tmp_path / "b", str(config), sqlite_uri, **{**unset, "min_auc": "0.61"})
    assert load_config(cfg.path).eval.gate.model_dump() == {
        **doc["eval"]["gate"],
        **RECALL_GATE_DEFAULTS,
        "min_auc": 0.61,
    }


def test_start_fills_the_scheduled_day_and_records_the_warm_start_rule(tmp_path, tiny_config, sqlite_uri):
    """A recurring run's start: ``dt={date-1}`` from the scheduled time, ``champion-if-any`` from scratch on
    the first day (no champion), the champion's version pinned once there is one."""
    daily = {
        "partitions": "dt={date-1}",
        "init_from": "champion-if-any",
        "schedule_time": "2026-01-08T03:00:00Z",
    }
    (run_id, uri, *_), cfg = _start(tmp_path / "day1", tiny_config, sqlite_uri, **daily)
    resolved = load_config(cfg.path)
    assert (resolved.data.partitions, resolved.train.init_from) == ("dt=20260107", None)
    run = tracking.run_summary(run_id, uri=uri)
    assert run["params"]["data.partitions"] == "dt=20260107" and run["params"]["train.init_from"] == "None"
    assert {k: v for k, v in run["tags"].items() if k.startswith("pipeline.")} == {
        "pipeline.schedule_time": "2026-01-08T03:00:00Z",
        "pipeline.partitions_template": "dt={date-1}",
        "pipeline.init_from": "champion-if-any",
        "pipeline.init_from_resolved": "scratch",
    }
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors: {}\n")
    tracking.log_model_dir(run_id, folder, "model", uri=uri)
    tracking.register_version(uri, "tiny-din", run_id, "model")
    tracking.set_alias(uri, "tiny-din", tracking.ALIAS_CHAMPION, 1)
    (run_id, *_), cfg = _start(
        tmp_path / "day2", tiny_config, sqlite_uri, **{**daily, "schedule_time": "2026-01-09T03:00:00Z"}
    )
    resolved = load_config(cfg.path)
    assert (resolved.data.partitions, resolved.train.init_from) == ("dt=20260108", "models:/tiny-din/1")
    assert (
        tracking.run_summary(run_id, uri=uri)["tags"]["pipeline.init_from_resolved"] == "models:/tiny-din/1"
    )


def test_multi_node_train_pod_only_launches(tmp_path, tiny_config, sqlite_uri):
    out, _ = _start(tmp_path, tiny_config, sqlite_uri, workers=4, gpus_per_worker=8)
    assert out[4:] == (0, {}, [])


def test_ingest_and_fit_write_datasets_and_lineage(tmp_path, tiny_config, sqlite_uri):
    (run_id, uri, *_), cfg = _start(tmp_path, tiny_config, sqlite_uri)
    train, ev = Dataset(uri=str(tmp_path / "train")), Dataset(uri=str(tmp_path / "eval"))
    oracle, digest = ingest.python_func(
        config=cfg,
        data_source="synthetic:taobao?rows=3000",
        run_id=run_id,
        tracking_uri=uri,
        train_data=train,
        eval_data=ev,
    )
    rows = pq.read_table(train.path).num_rows, pq.read_table(ev.path).num_rows
    assert rows == (train.metadata["rows"], ev.metadata["rows"]) and sum(rows) == 3000
    assert 0.6 < oracle < 0.95 and len(digest) == 64 and ev.metadata["digest"] == digest
    spec = Artifact(uri=str(tmp_path / "fg.json"))
    fit.python_func(config=cfg, train_data=train, run_id=run_id, tracking_uri=uri, feature_spec=spec)
    fg = json.loads(open(spec.path).read())
    assert [f["name"] for f in fg["sparse"]][:2] == ["user_id", "cms_segid"] and spec.metadata[
        "features"
    ] == 19
    run = tracking.run_summary(run_id, uri=uri)
    contexts = {d["tags"]["mlflow.data.context"] for d in run["dataset_inputs"]}
    assert contexts == {"training", "evaluation"}
    assert run["tags"]["data.evaluation.digest"] == digest and run["metrics"][
        "data.oracle_auc"
    ] == pytest.approx(oracle)
    assert run["tags"]["feature_spec_digest"] == spec.metadata["digest"]


def test_reject_then_finish_record_the_outcome(tmp_path, tiny_config, sqlite_uri):
    (run_id, uri, *_), _ = _start(tmp_path, tiny_config, sqlite_uri)
    reasons = "FAIL min_auc: auc 0.610000 is not >= min_auc 0.990000\nPASS no_champion: no champion"
    outcome = reject.python_func(run_id=run_id, tracking_uri=uri, gate_reasons=reasons)
    assert outcome == "rejected: FAIL min_auc: auc 0.610000 is not >= min_auc 0.990000"
    assert finish.python_func(run_id=run_id, tracking_uri=uri, outcome=outcome) == outcome
    run = tracking.run_summary(run_id, uri=uri)
    assert run["status"] == "FINISHED"
    assert run["tags"]["gate.decision"] == "rejected" and run["tags"]["gate.reasons"] == reasons
    assert run["tags"]["pipeline.outcome"] == "rejected"


def test_promote_moves_champion_only_for_a_passed_gate(tmp_path, tiny_config, sqlite_uri):
    (run_id, uri, *_), _ = _start(tmp_path, tiny_config, sqlite_uri)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors: {}\n")
    tracking.log_model_dir(run_id, folder, "model", uri=uri)
    passed = tracking.eval_version_tags(0.7, 0.65, 0.2, True, ["PASS min_auc"], "d" * 64)
    v1 = tracking.register_version(uri, "tiny-din", run_id, "model", tags=passed)
    v2 = tracking.register_version(uri, "tiny-din", run_id, "model", tags={**passed, "gate_passed": "false"})
    assert promote.python_func(model_name="tiny-din", version=v1, tracking_uri=uri, run_id=run_id) == (
        f"promoted: tiny-din v{v1} is champion (first champion)"
    )
    with pytest.raises(tracking.PromotionRefused, match="gate_passed is 'false'"):
        promote.python_func(model_name="tiny-din", version=v2, tracking_uri=uri, run_id=run_id)
    assert tracking.get_version_by_alias(uri, "tiny-din", "champion")["version"] == v1
    # The refusal failed the step, and the step marked the pipeline's run FAILED with the reason.
    run = tracking.run_summary(run_id, uri=uri)
    assert run["status"] == "FAILED" and "promote: PromotionRefused" in run["tags"]["failure_reason"]


def test_promote_cli_force_and_rollback(tmp_path, tiny_config, sqlite_uri, capsys):
    from recpipe.cli.main import main

    (run_id, uri, *_), _ = _start(tmp_path, tiny_config, sqlite_uri)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors: {}\n")
    tracking.log_model_dir(run_id, folder, "model", uri=uri)
    tags = tracking.eval_version_tags(0.7, 0.65, 0.2, True, ["PASS min_auc"], "d" * 64)
    tracking.register_version(uri, "m", run_id, "model", tags=tags)
    reasons = ["FAIL min_auc: auc 0.61 is not >= min_auc 0.65"]
    tracking.register_version(
        uri, "m", run_id, "model", tags={**tags, "gate_passed": "false", "gate_reasons": json.dumps(reasons)}
    )
    base = ["promote", "--model", "m", "--tracking-uri", uri]
    assert main([*base, "--version", "1"]) == 0
    assert main([*base, "--version", "2"]) == 1
    err = capsys.readouterr().err
    assert "refused: m v2" in err and "FAIL min_auc: auc 0.61" in err and "--force" in err
    assert main([*base, "--version", "2", "--force"]) == 2  # a forced promotion needs a reason
    assert main([*base, "--version", "2", "--force", "--reason", "hotfix for the holiday traffic"]) == 0
    v2 = tracking.get_version(uri, "m", 2)
    assert "champion" in v2["aliases"] and v2["tags"]["forced"] == "true"
    assert main([*base, "--rollback"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "rolled back: m v1 is champion (was v2)"
    assert main(["models", "list", "m", "--tracking-uri", uri]) == 0
    table = capsys.readouterr().out
    assert (
        "challenger" not in table and "champion" in table.splitlines()[1] and "FAIL" in table.splitlines()[2]
    )


def test_run_summary_reads_the_run_back(tmp_path, tiny_config, sqlite_uri):
    from recpipe.pipeline import summarize

    (run_id, uri, *_), _ = _start(tmp_path, tiny_config, sqlite_uri)
    tracking.log_metrics(
        run_id, {"eval.auc": 0.61, "eval.gauc": 0.6, "eval.logloss": 0.2, "data.oracle_auc": 0.75}
    )
    reasons = "FAIL min_auc: auc 0.610000 is not >= min_auc 0.990000"
    tracking.set_tags(
        run_id, {"gate.passed": "false", "gate.reasons": reasons, "gate.champion_source": "none"}, uri=uri
    )
    finish.python_func(
        run_id=run_id,
        tracking_uri=uri,
        outcome=reject.python_func(run_id=run_id, tracking_uri=uri, gate_reasons=reasons),
    )
    s = summarize(uri, run_id=run_id, seconds=75.2)
    assert (s.status, s.gate_passed, s.auc, s.oracle_auc, s.model_name) == (
        "FINISHED",
        False,
        0.61,
        0.75,
        "tiny-din",
    )
    text = s.format()
    assert text.splitlines()[0] == f"recpipe run: FINISHED in 1m15s  (MLflow run {run_id})"
    assert "AUC           0.6100 vs oracle 0.7500  = 81.3% of oracle" in text
    assert "gate          FAILED (champion: none)" in text and f"mlflow ui --backend-store-uri {uri}" in text
    assert summarize(uri, since=4102444800.0, error="boom").failure_reason == "boom"  # no run after 2100
    s.failure_reason = (
        "train: TrainingFailed: exit code 1\n"
        + "\n".join(f"  frame {i}" for i in range(20))
        + "\nBadRowError: row 17"
    )
    failed = s.format().splitlines()
    start = failed.index("  failed        train: TrainingFailed: exit code 1")
    assert [x.strip() for x in failed[start + 1 : start + 5]] == [
        "...",
        "frame 18",
        "frame 19",
        "BadRowError: row 17",
    ]


def test_ingest_keeps_the_configs_own_eval_input_and_reads_its_partitions(tmp_path, tiny_config, sqlite_uri):
    from recpipe.data.synthetic import generate

    for i, day in enumerate(("20260101", "20260102")):
        generate("taobao", 500, tmp_path / "logs" / f"dt={day}", seed=i)
    generate("taobao", 300, tmp_path / "held_out", seed=9)
    overrides = {"data.eval": str(tmp_path / "held_out"), "data.partitions": "latest"}
    (run_id, uri, *_), cfg = _start(
        tmp_path, tiny_config, sqlite_uri, data_source=str(tmp_path / "logs"), config_overrides=overrides
    )
    train, ev = Dataset(uri=str(tmp_path / "train")), Dataset(uri=str(tmp_path / "eval"))
    ingest.python_func(
        config=cfg,
        data_source=str(tmp_path / "logs"),
        run_id=run_id,
        tracking_uri=uri,
        train_data=train,
        eval_data=ev,
    )
    assert pq.read_table(ev.path).equals(pq.read_table(tmp_path / "held_out"))  # as given, not re-split
    assert set(pq.read_table(train.path).column("dt").to_pylist()) == {"20260102"}
    assert train.metadata["rows"] == 500
    assert tracking.run_summary(run_id, uri=uri)["tags"]["data_partitions"] == "dt=20260102"
