"""Warm start (train.init_from): every model starts from its parent's weights and optimizer state, at step
0, in a new folder; onto another world size; refused when the config or the FeatureSpec differs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from torch.distributed._shard.sharded_tensor import ShardedTensor

from recpipe.config import load_config
from recpipe.config.catalogue import MODELS, RETRIEVAL_MODELS
from recpipe.features.build import build_feature_spec
from recpipe.launch.local import launch_local
from recpipe.launch.worker import train
from recpipe.train.checkpoint import latest_checkpoint, load_model_for_inference
from recpipe.train.dist import init_distributed, shutdown
from recpipe.train.loop import _Trainer
from recpipe.train.warm import WarmStartError, check_recorded, manifest_digest, warm_checkpoint
from tests.train.conftest import _shrink
from tests.train.test_multitask_train import _config as multitask_config

TWO_STEPS = {"data.batch_size": 64, "train.max_steps": 2, "train.log_every_steps": 1}
# Where each catalogue model gets a tiny config and data (fixture of tests/train/conftest.py).
TINY = {
    "multi_tower_din": ("taobao", None),
    "dlrm": ("criteo", None),
    "multi_tower": ("criteo", "configs/multi_tower_criteo_quality.yaml"),
    "deepfm": ("criteo", "configs/deepfm_criteo_small.yaml"),
    "wide_and_deep": ("criteo", "configs/wide_and_deep_criteo_small.yaml"),
    "dbmtl": ("taobao_multitask", None),
    "mmoe": ("taobao_multitask", "mmoe"),
    "ple": ("taobao_multitask", "ple"),
    "dcn_v2": ("criteo", "configs/dcn_v2_criteo_quality.yaml"),
    "dcn_v1": ("criteo", "configs/dcn_v1_criteo_quality.yaml"),
    "mask_net": ("criteo", "configs/mask_net_criteo_quality.yaml"),
    "xdeepfm": ("criteo", "configs/xdeepfm_criteo_quality.yaml"),
    "wukong": ("criteo", "configs/wukong_criteo_small.yaml"),
    "pepnet": ("taobao_multitask", "configs/pepnet_taobao_small.yaml"),
    "simple_multi_task": ("taobao_multitask", "configs/simple_multi_task_taobao_small.yaml"),
    "rocket_launching": ("criteo", "configs/rocket_launching_criteo_quality.yaml"),
}


def _tiny(kind: str, request, tmp_path: Path) -> tuple[dict[str, str], str]:
    data_fixture, source = TINY[kind]
    data = request.getfixturevalue(data_fixture)
    if source is None:
        return data, data["config"]
    if data_fixture == "taobao_multitask" and not source.endswith(".yaml"):
        return data, multitask_config(data["config"], source, tmp_path)
    if data_fixture == "taobao_multitask":
        return data, str(_shrink(source, tmp_path / f"{kind}.yaml", divide=100))
    return data, str(_shrink(source, tmp_path / f"{kind}.yaml", cap=1000))


def _full(value: torch.Tensor) -> torch.Tensor:
    """A state-dict value as one dense tensor (this process holds every shard of a 1-rank run)."""
    if not isinstance(value, ShardedTensor):
        return value.detach()
    out = torch.zeros(value.size(), dtype=value.dtype)
    for shard in value.local_shards():
        index = tuple(
            slice(o, o + n)
            for o, n in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes, strict=True)
        )
        out[index] = shard.tensor
    return out


def _started(cfg, spec, out: Path) -> dict[str, torch.Tensor]:
    """The model state of a trainer for ``cfg`` after its start (resume or warm start), before any step."""
    env = init_distributed()
    try:
        trainer = _Trainer(cfg, spec, env, out, None)
        trainer._resume(True)
        return {k: _full(v).clone() for k, v in trainer._model_state().items() if isinstance(v, torch.Tensor)}
    finally:
        shutdown(env)


def _picks(state: dict[str, torch.Tensor]) -> tuple[str, str]:
    """A dense weight and an embedding table of a model state dict."""
    tables = [k for k in state if k.endswith(".weight") and "embedding" in k and state[k].dim() == 2]
    dense = [k for k in state if k.endswith(".weight") and k not in tables and "embedding" not in k]
    assert tables and dense, sorted(state)
    return dense[0], tables[0]


@pytest.mark.parametrize("kind", [m for m in MODELS if m not in RETRIEVAL_MODELS])
def test_every_model_warm_starts_with_its_parents_weights(kind, request, tmp_path):
    data, config = _tiny(kind, request, tmp_path)
    cfg = load_config(config, TWO_STEPS)
    spec = build_feature_spec(cfg)
    parent = train(cfg, spec, data["train"], None, tmp_path / "parent")
    assert parent.steps == 2
    saved = load_model_for_inference(tmp_path / "parent")[0].state_dict()
    dense, table = _picks(saved)

    child_cfg = load_config(
        config, {**TWO_STEPS, "train.init_from": str(tmp_path / "parent"), "train.seed": 7}
    )
    fresh = _started(load_config(config, {**TWO_STEPS, "train.seed": 7}), spec, tmp_path / "fresh")
    before = _started(child_cfg, spec, tmp_path / "child")
    assert torch.equal(before[dense], saved[dense]) and not torch.equal(fresh[dense], saved[dense])
    assert torch.equal(before[table][1], saved[table][1])  # an embedding row, as the parent left it

    child = train(child_cfg, spec, data["train"], None, tmp_path / "child")
    assert child.steps == 2 and child.resumed_from is None  # a new run: step 0 to 2, not the parent's 2 to 4
    after = load_model_for_inference(tmp_path / "child")[0].state_dict()
    assert not torch.equal(after[dense], saved[dense])  # and it trained


@pytest.fixture(scope="module")
def din_parent(taobao, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("din_parent")
    cfg = load_config(taobao["config"], {**TWO_STEPS, "train.max_steps": 5})
    train(cfg, build_feature_spec(cfg), taobao["train"], None, out)
    return out


def test_the_optimizer_state_comes_from_the_parent(din_parent, taobao, tmp_path):
    """Adam's step count and moments continue from the parent's: after 3 more steps the child holds the
    state of a run that did 5 + 3 (bit-for-bit on one rank: the same rows at the same moments)."""
    cfg = load_config(
        taobao["config"], {**TWO_STEPS, "train.max_steps": 3, "train.init_from": str(din_parent)}
    )
    spec = build_feature_spec(cfg)
    env = init_distributed()
    try:
        trainer = _Trainer(cfg, spec, env, tmp_path / "child", None)
        trainer._resume(True)
        steps = {v["step"].item() for v in trainer.dense_opt.state_dict()["state"].values() if "step" in v}
    finally:
        shutdown(env)
    assert steps == {5.0}


def test_a_warm_started_run_interrupted_resumes_its_own_checkpoint(din_parent, taobao, tmp_path):
    cfg = load_config(taobao["config"], {**TWO_STEPS, "train.init_from": str(din_parent)})
    spec = build_feature_spec(cfg)
    train(cfg, spec, taobao["train"], None, tmp_path / "child")
    longer = load_config(
        taobao["config"], {**TWO_STEPS, "train.max_steps": 4, "train.init_from": str(din_parent)}
    )
    result = train(longer, spec, taobao["train"], None, tmp_path / "child")
    assert result.resumed_from.endswith("ckpt-2") and result.steps == 4


def test_a_config_that_does_not_fit_the_parent_is_refused_naming_what_differs(din_parent, taobao, tmp_path):
    raw = yaml.safe_load(Path(taobao["config"]).read_text())
    for f in raw["features"]:
        if f["name"] == "user_id":
            f["embedding_dim"] = 8
    raw["features"] = [f for f in raw["features"] if f["name"] != "pid"]
    raw["feature_groups"][0]["features"] = [n for n in raw["feature_groups"][0]["features"] if n != "pid"]
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg = load_config(changed, {**TWO_STEPS, "train.init_from": str(din_parent)})
    with pytest.raises(WarmStartError) as err:
        train(cfg, build_feature_spec(cfg), taobao["train"], None, tmp_path / "child")
    message = str(err.value)
    assert "features[pid]: only in the parent" in message
    assert "features[user_id].embedding_dim: 16 -> 8" in message
    assert "table user_id: " in message and "x 16 -> " in message and " x 8" in message

    other = load_config(
        taobao["config"],
        {**TWO_STEPS, "train.init_from": str(din_parent), "train.sparse_optimizer.type": "sgd"},
    )
    with pytest.raises(WarmStartError, match=r'train.sparse_optimizer.type: "adagrad" -> "sgd"'):
        train(other, build_feature_spec(other), taobao["train"], None, tmp_path / "other")


def test_another_feature_spec_than_the_parents_is_refused(din_parent, taobao, tmp_path):
    """The same tables but another mapping (a vocabulary fitted again would be one): ids would land on
    other rows, so the trainer refuses it (fit reuses the parent's fg.json under train.init_from)."""
    cfg = load_config(taobao["config"], {**TWO_STEPS, "train.init_from": str(din_parent)})
    spec = build_feature_spec(cfg)
    first = spec.sparse[0]
    other = dataclasses.replace(
        spec,
        sparse=[dataclasses.replace(first, mapping=dataclasses.replace(first.mapping, default_value="7"))]
        + spec.sparse[1:],
    )
    assert [t.num_embeddings for t in other.tables()] == [t.num_embeddings for t in spec.tables()]
    with pytest.raises(WarmStartError, match=r"fg.json: the same tables, but other fitted vocabularies"):
        train(cfg, other, taobao["train"], None, tmp_path / "child")


def test_an_unverified_or_missing_parent_is_refused(din_parent, tmp_path):
    with pytest.raises(WarmStartError, match=r"no complete checkpoint"):
        warm_checkpoint(tmp_path / "nothing")
    copy = tmp_path / "copy"
    shutil.copytree(din_parent, copy)
    ckpt = latest_checkpoint(copy)
    digest = manifest_digest(ckpt)
    meta = json.loads((ckpt / "meta.json").read_text())
    (ckpt / "meta.json").write_text(json.dumps({**meta, "step": 99}))
    with pytest.raises(WarmStartError, match=r"refusing to load checkpoint .*meta.json"):
        warm_checkpoint(copy)
    with pytest.raises(WarmStartError, match=r"registry URI"):
        warm_checkpoint("models:/din@champion")
    check_recorded(ckpt, digest, "run r")  # the manifest itself is unchanged
    (ckpt / "manifest.json").write_text("{}")
    with pytest.raises(WarmStartError, match=r"run r recorded checkpoint .* it was replaced or rewritten"):
        check_recorded(ckpt, digest, "run r")


# ----------------------------------------------------------------------- onto another world size
def _launch(taobao, out: Path, nproc: int, overrides: dict) -> str:
    lines: list[str] = []
    code = launch_local(
        taobao["config"], taobao["train"], None, out, nproc, {**TWO_STEPS, **overrides}, echo=lines.append
    )
    assert code == 0, "".join(lines)[-3000:]
    return "".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_warm_start_onto_another_world_size(din_parent, taobao, tmp_path):
    """1 → 2 ranks and 2 → 1: DCP reshards the tables and the optimizer state; the weights are the parent's."""
    log = _launch(taobao, tmp_path / "two", 2, {"train.init_from": str(din_parent)})
    assert "written by 1 rank(s), now 2" in log and "training starts at step 0" in log
    assert json.loads((tmp_path / "two" / "train_result.json").read_text())["steps"] == 2

    parent2 = tmp_path / "parent2"
    _launch(taobao, parent2, 2, {"train.max_steps": 3})
    cfg = load_config(taobao["config"], {**TWO_STEPS, "train.init_from": str(parent2)})
    spec = build_feature_spec(cfg)
    saved = load_model_for_inference(parent2)[0].state_dict()
    before = _started(cfg, spec, tmp_path / "one")  # this process: 1 rank
    for key in _picks(saved):
        assert torch.equal(before[key], saved[key]), key
    assert train(cfg, spec, taobao["train"], None, tmp_path / "one").steps == 2
