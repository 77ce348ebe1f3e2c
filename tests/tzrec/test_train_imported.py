"""Imported configs train: a short in-process run of each on generated data.

Tables above 1000 rows are shrunk (Taobao's to 1%, Criteo's hashed ones to 1000 rows) as in
``tests/train``; the model shapes, optimizers and features are the imported ones.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import parse_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.tzrec import import_tzrec_file

STEPS, BATCH = 12, 64


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _splits(kind: str, root: Path, train_rows: int, eval_rows: int) -> tuple[str, str]:
    generate(kind, train_rows + eval_rows, root / "all", seed=5)
    table = pq.read_table(root / "all")
    for name, part in (("train", table.slice(0, train_rows)), ("eval", table.slice(train_rows))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    return str(root / "train"), str(root / "eval")


def _tiny(data: dict, small) -> dict:
    data = copy.deepcopy(data)
    for f in data["features"]:
        for item in (f, *f.get("sub_features", [])):
            for key in ("num_buckets", "hash_bucket_size"):
                if key in item:
                    item[key] = small(item[key])
    data["data"].update(batch_size=BATCH, num_workers=0)
    data["train"].update(max_steps=STEPS, log_every_steps=4, checkpoint_every_steps=1000)
    return data


def _train(config: Path, kind: str, small, tmp_path: Path):
    imported = import_tzrec_file(config)
    cfg = parse_config(_tiny(imported.data, small))
    train_uri, eval_uri = _splits(kind, tmp_path / "data", 1000, 300)
    result = train(cfg, build_feature_spec(cfg), train_uri, eval_uri, tmp_path / "run")
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    return cfg, result, losses


def test_imported_din_taobao_trains(din_config, tmp_path):
    cfg, result, losses = _train(din_config, "taobao", lambda n: n // 100 if n > 1000 else n, tmp_path)
    assert cfg.model.type == "multi_tower_din" and cfg.train.sparse_optimizer.type == "adagrad"
    assert result.steps == STEPS and result.rows_trained == STEPS * BATCH
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]  # from ~0.69 towards the ~0.2 of a 5% click rate
    assert result.eval is not None and result.eval["rows"] == 300 and 0.0 <= result.eval["auc"] <= 1.0


def test_imported_dlrm_criteo_trains(dlrm_config, tmp_path):
    # Generated Criteo keeps I2 >= -2, so log(x+3) is defined and on_bad_row stays "error".
    cfg, result, losses = _train(dlrm_config, "criteo", lambda n: min(n, 1000), tmp_path)
    assert cfg.model.type == "dlrm" and cfg.data.on_bad_row == "error"
    assert result.steps == STEPS and result.rows_trained == STEPS * BATCH
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    assert result.eval is not None and result.eval["rows"] == 300 and 0.0 <= result.eval["auc"] <= 1.0
