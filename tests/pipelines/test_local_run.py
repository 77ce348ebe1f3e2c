"""The whole pipeline under kfp.local, twice on one MLflow store: the first run passes its gate and
becomes champion; the second is gated against that champion (re-evaluated) and rejected."""

import io
import json
import sys
from pathlib import Path

import pytest

from recpipe import tracking

TINY_CONFIG = Path(__file__).parent / "data" / "tiny_din.yaml"
SOURCE = "synthetic:taobao?rows=6000&seed=5"


def _executor_output(summary, task):
    (path,) = Path(summary.run_dir, "kfp").glob(f"*/{task}/executor_output.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_both_gate_outcomes_on_one_store(tmp_path, monkeypatch):
    import yaml

    from pipelines.local_run import run_local

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # The gate threshold comes from the YAML when the run does not set it (the pipeline parameter
    # defaults to "use the config"); the second run sets it and overrides the YAML.
    doc = yaml.safe_load(TINY_CONFIG.read_text())
    doc["eval"]["gate"]["min_auc"] = 0.0
    config = tmp_path / "tiny_din_open_gate.yaml"
    config.write_text(yaml.safe_dump(doc))
    common = dict(
        runs_dir=tmp_path / "runs",
        config=str(config),
        data_source=SOURCE,
        gpus_per_worker=1,
        backends="rtp",
    )

    first = run_local(**common)
    assert first.status == "FINISHED", first.format()
    params = tracking.run_summary(first.run_id, uri=first.tracking_uri)["params"]
    assert params["eval.gate.min_auc"] == "0.0" and "PASS min_auc: auc " in first.gate_reasons[0]
    assert first.gate_reasons[0].endswith(">= min_auc 0.000000")
    assert first.gate_passed is True and first.champion_source == "none"
    assert first.registered_version == 1 and first.backends["rtp"].startswith("parity ok")
    assert first.outcome == (
        "registered: tiny-din v1 (rtp) as challenger; promoted: tiny-din v1 is champion (first champion)"
    )
    assert [(v["version"], v["aliases"]) for v in first.versions] == [(1, ["challenger", "champion"])]
    # The summary reads the numbers back from MLflow: the registered version carries the same AUC.
    assert first.versions[0]["metrics"]["auc"] == pytest.approx(first.auc) and 0.6 < first.oracle_auc < 1.0
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

    second = run_local(min_auc=0.99, **common)
    assert second.status == "FINISHED", second.format()  # a failed gate is a normal outcome
    params = tracking.run_summary(second.run_id, uri=second.tracking_uri)["params"]
    assert params["eval.gate.min_auc"] == "0.99"
    assert second.gate_passed is False and second.registered_version is None
    assert second.champion_source.startswith("v1 re-evaluated on the same eval data")
    assert second.outcome.startswith("rejected: FAIL min_auc: auc ")
    assert "PASS auc_vs_champion" in "\n".join(second.gate_reasons)
    assert not list(Path(second.run_dir, "kfp").glob("*/export"))  # the gate-passed branch did not run
    assert [v["aliases"] for v in second.versions] == [["challenger", "champion"]]
    run = tracking.run_summary(second.run_id, uri=second.tracking_uri)
    assert run["tags"]["gate.decision"] == "rejected" and run["tags"]["pipeline.outcome"] == "rejected"
    text = second.format()
    assert (
        "gate          FAILED (champion: v1 re-evaluated" in text
        and "mlflow ui --backend-store-uri sqlite:///" in text
    )


@pytest.mark.parametrize(
    ("config", "kind"),
    [("configs/din_taobao_small.yaml", "taobao"), ("configs/dlrm_criteo_small.yaml", "criteo")],
)
def test_run_generates_data_of_the_configs_kind(config, kind):
    # Issue 17: `recpipe run --config configs/dlrm_criteo_small.yaml` generated Taobao rows and failed in train.
    from recpipe.pipeline.params import resolve_config, synthetic_source_for

    root = Path(__file__).resolve().parents[2]
    assert synthetic_source_for(resolve_config(str(root / config)), 2000) == f"synthetic:{kind}?rows=2000"


def test_run_refuses_a_source_without_the_configs_columns_before_starting(tmp_path, capsys, monkeypatch):
    from recpipe.cli.main import main

    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    root = Path(__file__).resolve().parents[2]
    argv = [
        "run",
        "--runs",
        str(tmp_path / "runs"),
        "--config",
        str(root / "configs" / "dlrm_criteo_small.yaml"),
    ]
    assert main([*argv, "--data", "synthetic:taobao?rows=100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "recpipe run: error: parameter data_source: data 'synthetic:taobao?rows=100' does not fit"
    )
    assert "missing columns ['C1', 'C2'" in err
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_run_reads_the_configs_own_train_input_without_data(tmp_path, capsys, monkeypatch):
    from recpipe.cli.main import main
    from recpipe.data.synthetic import generate

    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    generate("taobao", 50, tmp_path / "taobao")
    root = Path(__file__).resolve().parents[2]
    argv = [
        "run",
        "--runs",
        str(tmp_path / "runs"),
        "--config",
        str(root / "configs" / "dlrm_criteo_small.yaml"),
    ]
    # data.train is the source (not generated Criteo rows): its Taobao columns do not fit, before anything starts.
    assert main([*argv, "--set", f"data.train={tmp_path / 'taobao'}"]) == 2
    assert f"parameter data_source: data '{tmp_path / 'taobao'}' does not fit" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_run_refuses_a_date_template_before_starting(tmp_path, monkeypatch):
    """A local run has no scheduled time (its pipeline sends none): a {date} template has no day to fill."""
    from pipelines.local_run import run_local
    from recpipe.config import ParameterError

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ParameterError, match=r"parameter partitions: 'dt=\{date-1\}' is a template"):
        run_local(
            runs_dir=tmp_path / "runs", config=str(TINY_CONFIG), data_source=SOURCE, partitions="dt={date-1}"
        )
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_run_says_when_no_generated_data_fits_the_config():
    from recpipe.config import ParameterError
    from recpipe.config.features import LookupFeatureConfig
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import schema_problems, source_schema
    from recpipe.pipeline.params import resolve_config, synthetic_source_for

    cfg = resolve_config(str(Path(__file__).resolve().parents[2] / "configs" / "dlrm_criteo_small.yaml"))
    cfg.features[0].column = "I0"
    # Neither Criteo layout has I0: rows generated for the config's own columns (synthetic:config).
    source = synthetic_source_for(cfg, 100)
    assert source.startswith("synthetic:config?path=") and source.endswith("&rows=100")
    assert not schema_problems(build_feature_spec(cfg), source_schema(source))
    # A column read as a number and as a lookup's map: no generated data has it.
    cfg.features.append(LookupFeatureConfig(kind="lookup", name="c1_in_i0", map="I0", key="C1"))
    with pytest.raises(
        ParameterError,
        match=r"no synthetic data has the config's columns \(taobao: .*; criteo: .*; config: column 'I0' is "
        r"read as a number .*\); give a data source",
    ):
        synthetic_source_for(cfg, 100)


class _Console(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_run_shows_the_training_progress_live(tmp_path, monkeypatch, tty):
    # Issue 17: `recpipe run` kept the training bar in pipeline.log; kfp.local turns each frame into a line.
    from pipelines.local_run import _quiet

    console = _Console(tty)
    monkeypatch.setattr(sys, "stdout", console)
    with _quiet(tmp_path / "pipeline.log"):
        print("Executing task 'train'")
        print("[recpipe.train] training 3 step(s) of 256 rows")
        for i, pct in enumerate((0, 33, 66, 100)):
            print(f"train: {pct:3d}%|###       | {i}/3 [00:0{i}<00:01, 1.00step/s]")
        print("Task 'train' finished with status SUCCESS")
    shown = console.getvalue()
    assert "train: 100%|###       | 3/3" in shown and "[recpipe.train]" not in shown
    if tty:  # every frame, redrawn in place, then the next task line below the last one
        assert (
            "| 1/3 [00:01<00:01, 1.00step/s]\r" in shown
            and "3/3 [00:03<00:01, 1.00step/s]\rTask" not in shown
        )
    else:  # the first frame and the last, one line each
        assert shown.count("train:") == 2 and "1/3" not in shown
    assert "[recpipe.train] training 3 step(s)" in (tmp_path / "pipeline.log").read_text()
