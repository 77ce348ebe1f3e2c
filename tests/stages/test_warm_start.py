"""Warm start through the stages: day 1 trained and registered in a real sqlite MLflow store, day 2 from
``models:/NAME@champion``: fit keeps day 1's fitted FeatureSpec (a known id keeps its row, a new value is
UNK), train loads the checkpoint the version's run recorded and tags the run with where it came from."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from recpipe import tracking
from recpipe.config import load_config
from recpipe.data.sources import open_source
from recpipe.data.synthetic import generate
from recpipe.features.columns import map_ids
from recpipe.features.fit import fit_feature_spec
from recpipe.features.spec import FeatureSpec
from recpipe.stages import fit, train
from recpipe.tracking.checkpoints import TAG_CHECKPOINT, TAG_CHECKPOINT_MANIFEST
from recpipe.train.checkpoint import load_model_for_inference
from recpipe.train.warm import WarmStartError, manifest_digest
from tests.train.conftest import _shrink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TWO_STEPS = {"data.batch_size": 64, "train.max_steps": 2, "train.log_every_steps": 1}
FITTED = "cms_segid"  # a vocabulary fitted on the training split (min_freq), not a fixed bucket count


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> dict[str, str]:
    """Two days of one synthetic world (600 rows each; a vocabulary fitted again on day 2 differs from day
    1's) and the shrunk DIN config with one fitted vocabulary."""
    root = tmp_path_factory.mktemp("days")
    generate("taobao", 1200, root / "all", seed=5)
    table = pq.read_table(root / "all")
    parts = {"day1": table.slice(0, 600), "day2": table.slice(600), "eval": table.slice(1000)}
    for name, part in parts.items():
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    config = _shrink("configs/din_taobao_small.yaml", root / "din.yaml", divide=100)
    raw = yaml.safe_load(config.read_text())
    for f in raw["features"]:
        if f["name"] == FITTED:
            del f["num_buckets"]
            f["min_freq"] = 3
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return {"root": str(root), "config": str(config), **{n: str(root / n) for n in ("day1", "day2", "eval")}}


def _rows(spec: FeatureSpec, values: list[str]) -> list[int]:
    ids, _, _ = map_ids(pa.array(values), spec.feature(FITTED).mapping, FITTED)
    return ids.tolist()


def test_day_two_warm_starts_from_the_registered_champion(days, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run1 = tracking.start_or_resume_run(uri, "warm", run_name="day1")
    log1 = tracking.MlflowRunLog(run1, uri)
    fg1 = fit.run(days["config"], days["day1"], tmp_path / "fg1.json", log=log1).fg_json
    train.run(days["config"], days["day1"], days["eval"], str(tmp_path / "day1"), fg_json=fg1,
              overrides=TWO_STEPS, log=log1)  # fmt: skip
    tags = log1.tags()
    parent_ckpt = Path(tags[TAG_CHECKPOINT])
    assert parent_ckpt.name == "ckpt-2" and tags[TAG_CHECKPOINT_MANIFEST] == manifest_digest(parent_ckpt)
    log1.log_artifact(fg1, "model")  # something to register (the pipeline registers its export)
    version = tracking.register_version(uri, "warm_din", run1, "model")
    tracking.set_alias(uri, "warm_din", tracking.ALIAS_CHAMPION, version)

    # day 2: fit keeps day 1's vocabulary (a refit would not: the test would notice a plain refit)
    warm = {**TWO_STEPS, "train.init_from": "models:/warm_din@champion"}
    run2 = tracking.start_or_resume_run(uri, "warm", run_name="day2")
    log2 = tracking.MlflowRunLog(run2, uri)
    fg2 = fit.run(days["config"], days["day2"], tmp_path / "fg2.json", log=log2, overrides=warm)
    parent, child = FeatureSpec.load(fg1), FeatureSpec.load(fg2.fg_json)
    cfg = load_config(days["config"], warm)
    refit = fit_feature_spec(cfg, open_source(days["day2"]))
    assert child.digest() == parent.digest() != refit.digest()
    vocab = parent.feature(FITTED).mapping.vocab
    unseen = "99999999"
    assert _rows(child, [vocab[0], vocab[-1], unseen]) == [1, len(vocab), 0]  # known ids keep rows; new: UNK
    assert log2.tags()["feature_spec_from"] == str(parent_ckpt)

    r = train.run(days["config"], days["day2"], days["eval"], str(tmp_path / "day2"), fg_json=fg2.fg_json,
                  overrides=warm, log=log2)  # fmt: skip
    assert r.checkpoint_dir == str(tmp_path / "day2")
    tags2 = log2.tags()
    assert tags2["init_from"] == "models:/warm_din@champion"
    assert tags2["init_from_version"] == str(version) and tags2["init_from_run_id"] == run1
    _, spec, trained_cfg = load_model_for_inference(tmp_path / "day2")
    assert spec.digest() == parent.digest() and trained_cfg.train.init_from == str(parent_ckpt)


def test_a_version_without_a_recorded_checkpoint_or_a_rewritten_one_is_refused(days, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run = tracking.start_or_resume_run(uri, "warm", run_name="registered-elsewhere")
    tracking.MlflowRunLog(run, uri).log_artifact(days["config"], "model")
    tracking.register_version(uri, "bare", run, "model")
    overrides = {**TWO_STEPS, "train.init_from": "models:/bare/1"}
    with pytest.raises(
        WarmStartError, match=r"models:/bare/1 \(version 1, run .*\) recorded no training checkpoint"
    ):
        train.run(days["config"], days["day1"], days["eval"], str(tmp_path / "x"), overrides=overrides,
                  tracking_uri=uri)  # fmt: skip
    with pytest.raises(WarmStartError, match=r"model 'bare' has no alias 'champion'"):
        fit.run(days["config"], days["day1"], tmp_path / "fg.json",
                overrides={"train.init_from": "models:/bare@champion"}, tracking_uri=uri)  # fmt: skip
