"""``pipelines/local_run.py``: what ``recpipe run`` checks before it starts and how it shows the run. The whole
pipeline under kfp.local on one MLflow store (both gate outcomes, a warm start) is
tests/pipelines/test_replay.py's: its three runs are the daily loop."""

import io
import sys
from pathlib import Path

import pytest

TINY_CONFIG = Path(__file__).parent / "data" / "tiny_din.yaml"
SOURCE = "synthetic:taobao?rows=6000&seed=5"


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
