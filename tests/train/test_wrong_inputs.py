"""Training refuses inputs that would silently train the wrong thing: a stale fg.json, zero rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recpipe.config import load_config
from recpipe.data.types import DataError
from recpipe.features.build import build_feature_spec
from recpipe.features.fit import StaleSpecError, config_digest, fit_feature_spec
from recpipe.launch.worker import find_spec
from recpipe.train.loop import train


def test_a_stale_fg_json_is_refused(taobao, tmp_path):
    from recpipe.config import parse_config

    cfg = load_config(taobao["config"])
    out = tmp_path / "out"
    out.mkdir()
    fit_feature_spec(cfg, None).save(out / "fg.json")
    assert find_spec(cfg, None, out, taobao["train"]).config_digest == config_digest(cfg)

    name = next(f.name for f in cfg.features if getattr(f, "num_buckets", None))
    changed = cfg.model_copy(deep=True)
    feature = next(f for f in changed.features if f.name == name)
    feature.num_buckets = feature.num_buckets * 10
    changed = parse_config(changed.to_dict(), "changed.yaml")
    assert config_digest(changed) != config_digest(cfg)
    with pytest.raises(StaleSpecError, match=r"out/fg.json was fitted from another feature definition"):
        find_spec(changed, None, out, taobao["train"])
    with pytest.raises(StaleSpecError, match="pass the right --fg"):
        find_spec(changed, str(out / "fg.json"), out, taobao["train"])
    # An fg.json written before digests were recorded is taken as it is.
    legacy = dataclasses.replace(fit_feature_spec(cfg, None), config_digest=None)
    legacy.save(out / "fg.json")
    assert find_spec(changed, None, out, taobao["train"]).config_digest is None


def test_zero_training_rows_is_an_error(taobao, tmp_path):
    cfg = load_config(taobao["config"], {"data.batch_size": 64})
    empty = tmp_path / "empty"
    empty.mkdir()
    first = sorted(Path(taobao["train"]).glob("*.parquet"))[0]
    pq.write_table(pq.read_table(first).slice(0, 0), empty / "part-0.parquet")
    with pytest.raises(DataError, match=r"empty: no training rows"):
        train(cfg, build_feature_spec(cfg), str(empty), None, tmp_path / "out")
    assert not (tmp_path / "out" / "checkpoints").exists()


class _Recorder:
    """A RunLog that keeps what it is given (the MLflow one is tested in tests/tracking)."""

    run_id = "recorded"

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def log_metrics(self, metrics, step: int = 0) -> None:
        self.metrics.update(metrics)

    def log_artifact(self, path, folder=None) -> None:
        pass


def test_skipped_rows_are_reported_in_the_log_line_the_result_and_the_metrics(taobao, tmp_path, capsys):
    import json

    import pyarrow as pa

    from recpipe.pipeline.summary import RunSummary
    from recpipe.stages.train import log_training

    first = sorted(Path(taobao["train"]).glob("*.parquet"))[0]
    table = pq.read_table(first)
    user = table.column("user_id").to_pylist()
    for row in (3, 50, 700):
        user[row] = -1  # a negative id: a bad row
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(
        table.set_column(table.schema.get_field_index("user_id"), "user_id", pa.array(user)),
        data / "p.parquet",
    )
    cfg = load_config(taobao["config"], {"data.batch_size": 256, "data.on_bad_row": "skip"})
    out = tmp_path / "out"
    result = train(cfg, build_feature_spec(cfg), str(data), None, out)

    want = {"rows_read": table.num_rows, "rows_used": table.num_rows - 3, "rows_skipped": 3}
    assert {k: result.rows[k] for k in want} == want and result.rows["skipped_by_column"] == {"user_id": 3}
    saved = json.loads((out / "train_result.json").read_text())["rows"]
    assert saved["rows_skipped"] == 3 and saved["rows_read"] == saved["rows_used"] + saved["rows_skipped"]
    printed = capsys.readouterr()
    line = f"data: read {table.num_rows}, used {table.num_rows - 3}, skipped 3 (on_bad_row=skip)"
    assert line in printed.out + printed.err
    log = _Recorder()
    log_training(log, out)
    assert (log.metrics["train.rows_read"], log.metrics["train.rows_skipped"]) == (table.num_rows, 3)
    # The evaluation pass over the same rows counts the same way (report JSON field and describe line).
    from recpipe.eval.checkpoint import evaluate_checkpoint

    report = evaluate_checkpoint(out, str(data), on_bad_row="skip")
    assert {k: report.data_rows[k] for k in want} == want and report.rows == table.num_rows - 3
    summary = RunSummary("r", "FINISHED", "sqlite:///x.db", rows={"train": {k: saved[k] for k in want}})
    assert (
        f"rows train    read {table.num_rows:,}, used {table.num_rows - 3:,}, skipped 3" in summary.format()
    )


def test_the_config_digest_is_provenance_not_identity(taobao):
    """A spec built from the config and the same spec fitted from it resume each other's checkpoints."""
    cfg = load_config(taobao["config"])
    fitted, built = fit_feature_spec(cfg, None), build_feature_spec(cfg)
    assert fitted.config_digest == config_digest(cfg) and built.config_digest is None
    assert fitted.digest() == built.digest()
