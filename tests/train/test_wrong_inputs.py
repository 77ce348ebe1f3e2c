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
from recpipe.train.loop import train
from recpipe.train.worker import find_spec


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
