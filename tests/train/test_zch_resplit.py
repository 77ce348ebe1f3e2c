"""zch tables loaded onto another world size (recpipe.train.zch_resplit): a warm start 1 → 2 and 2 → 1
ranks keeps every known id's embedding values, gives unseen ids rows of their own, drops (and counts)
only the ids a full rank has no row for, and trains on.

The config is the shrunken small DIN config with ``adgroup_id`` (candidate and history) as a zch table
of 4096 rows, more than the ~2000 ads of the generated data (nothing is evicted, so values can be
compared after training), and ``user_id`` as one of 8 rows: full on one rank (7 ids), it cannot keep
them all on two (3 rows each).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.local import launch_local
from recpipe.launch.worker import train
from recpipe.train.checkpoint import load_model_for_inference
from tests.train.test_warm import _started

REMAP = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules"
WEIGHT = "embeddings.mc_ec._embedding_module.embeddings"
EMPTY = 2**63 - 1
STEPS = {"data.batch_size": 64, "train.log_every_steps": 1, "train.max_steps": 3}
# The child trains 2 steps on other rows (another seed) with a sparse learning rate that leaves the
# known ids' weights where the parent left them (to 1e-6), so they can be compared after training.
CHILD = {**STEPS, "train.max_steps": 2, "train.seed": 7, "train.sparse_optimizer.lr": 1e-12}


@pytest.fixture(scope="module")
def zch_config(taobao, tmp_path_factory) -> str:
    data = yaml.safe_load(Path(taobao["config"]).read_text())
    sizes = {"user_id": 8, "adgroup_id": 4096}
    for f in data["features"]:
        if f["name"] in sizes:
            f.update(zch=True, zch_size=sizes[f["name"]])
        for sub in f.get("sub_features", []):
            if sub["name"] == "adgroup_id":
                sub.update(zch=True, zch_size=sizes["adgroup_id"])
    path = tmp_path_factory.mktemp("zch_resplit") / "din_zch.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return str(path)


def _embeddings(state: dict[str, torch.Tensor], table: str) -> dict[int, tuple[int, torch.Tensor]]:
    """Known id → (row, embedding) of an unsharded model state dict."""
    keys = state[f"{REMAP}.{table}._mch_sorted_raw_ids"].tolist()
    rows = state[f"{REMAP}.{table}._mch_remapped_ids_mapping"].tolist()
    weight = state[f"{WEIGHT}.{table}.weight"]
    return {k: (r, weight[r]) for k, r in zip(keys, rows, strict=True) if k != EMPTY}


def _launch(config: str, data: str, out: Path, nproc: int, overrides: dict) -> str:
    lines: list[str] = []
    code = launch_local(config, data, None, out, nproc, overrides, echo=lines.append)
    assert code == 0, "".join(lines)[-3000:]
    return "".join(lines)


def _assert_known_ids_kept(parent: dict, child: dict, atol: float) -> None:
    missing = sorted(set(parent) - set(child))
    assert not missing, f"{len(missing)} known ids lost their row"
    for key, (_, values) in parent.items():
        assert torch.allclose(child[key][1], values, atol=atol, rtol=0.0), key
    rows = [r for r, _ in child.values()]
    assert len(set(rows)) == len(rows)  # unseen ids admitted by the child got rows of their own


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_zch_model_warm_starts_from_one_rank_onto_two(zch_config, taobao, tmp_path):
    cfg = load_config(zch_config, STEPS)
    train(cfg, build_feature_spec(cfg), taobao["train"], None, tmp_path / "parent")
    parent = load_model_for_inference(tmp_path / "parent")[0].state_dict()
    users = _embeddings(parent, "user_id")
    assert len(users) == 7  # full: 8 rows, the last for ids without a row
    owned = [sum(k < 2**62 for k in users), sum(k >= 2**62 for k in users)]  # rank 0's keys, rank 1's
    expected = sum(max(0, n - 3) for n in owned)
    assert expected >= 1

    log = _launch(
        zch_config,
        taobao["train"],
        tmp_path / "child",
        2,
        {**CHILD, "train.init_from": str(tmp_path / "parent")},
    )
    assert "zch tables re-split by key range from 1 onto 2 rank(s)" in log
    assert re.search(r"'adgroup_id': 0\b", log) and re.search(rf"'user_id': {expected}\b", log), log[-2000:]
    assert "training starts at step 0" in log

    child = load_model_for_inference(tmp_path / "child")[0].state_dict()
    ads, child_ads = _embeddings(parent, "adgroup_id"), _embeddings(child, "adgroup_id")
    _assert_known_ids_kept(ads, child_ads, atol=1e-6)
    assert len(child_ads) > len(ads)  # the child's rows brought ads the parent never saw
    for key, (row, _) in child_ads.items():  # each key on the rank that owns its part of the key space
        assert (row < 2048) == (key < 2**62), (key, row)
    assert int(child[f"{REMAP}.adgroup_id._current_iter_tensor"]) == 3 + 2  # the parent's steps go on


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_zch_model_warm_starts_from_two_ranks_onto_one(zch_config, taobao, tmp_path):
    _launch(zch_config, taobao["train"], tmp_path / "parent", 2, STEPS)
    parent = load_model_for_inference(tmp_path / "parent")[0].state_dict()
    cfg = load_config(zch_config, {**CHILD, "train.init_from": str(tmp_path / "parent")})
    spec = build_feature_spec(cfg)

    before = _started(cfg, spec, tmp_path / "started")  # this process: 1 rank, before any step
    for table in ("adgroup_id", "user_id"):  # 2 × 3 users fit the 7 rows of one rank: none dropped
        _assert_known_ids_kept(_embeddings(parent, table), _embeddings(before, table), atol=0.0)
    segments = before[f"{REMAP}.adgroup_id._output_segments_tensor"]
    assert segments[:3].tolist() == [0, 4096, -1]  # this run's row ranges, not the parent's

    assert train(cfg, spec, taobao["train"], None, tmp_path / "child").steps == 2
    child = load_model_for_inference(tmp_path / "child")[0].state_dict()
    ads = _embeddings(parent, "adgroup_id")
    _assert_known_ids_kept(ads, _embeddings(child, "adgroup_id"), atol=1e-6)
    assert len(_embeddings(child, "adgroup_id")) > len(ads)
