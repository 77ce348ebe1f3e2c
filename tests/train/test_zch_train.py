"""zch (managed-collision) tables in training: sharding constraints, evicted rows reset under DMP,
1 and 2 ranks (gloo), resume with the remapping intact (on another world size: re-split), the memory report.

The config is the shrunken small DIN config with ``user_id`` and the ``adgroup_id`` table (candidate
and history) as zch tables of 64 rows: far fewer than the ~2000 ads of the generated data, so rows are
evicted and reassigned on every step and any remapping lost on resume would show.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.config import OptimizerConfig, load_config
from recpipe.eval.checkpoint import evaluate_checkpoint
from recpipe.features.build import build_feature_spec
from recpipe.launch.local import launch_local
from recpipe.launch.worker import train
from recpipe.models.blocks.embedding import EmbeddingInit, managed_collision_ec
from recpipe.models.registry import build_model
from recpipe.train.checkpoint import load_model_for_inference
from recpipe.train.dist import init_distributed, plan_sharding, shard_model, sharding_constraints, shutdown
from recpipe.train.memory import ZCH_BYTES_PER_ROW, embedding_memory_report
from recpipe.train.optim import apply_sparse_optimizer
from recpipe.train.zch import EvictionCounter, prepare_for_planning

ZCH_ROWS = 64
OVERRIDES = {"data.batch_size": 64, "train.log_every_steps": 1, "train.checkpoint_every_steps": 20}
REMAP = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules"
EMPTY = 2**63 - 1


@pytest.fixture(scope="module")
def zch_config(taobao, tmp_path_factory) -> str:
    data = yaml.safe_load(Path(taobao["config"]).read_text())
    for f in data["features"]:
        if f["name"] in ("user_id", "adgroup_id"):
            f.update(zch=True, zch_size=ZCH_ROWS)
        for sub in f.get("sub_features", []):
            if sub["name"] == "adgroup_id":
                sub.update(zch=True, zch_size=ZCH_ROWS)
    path = tmp_path_factory.mktemp("zch_config") / "din_zch.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return str(path)


def _losses(out: Path) -> dict[int, float]:
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in recs if "loss" in r}


def _result(out: Path) -> dict:
    return json.loads((out / "train_result.json").read_text())


# --------------------------------------------------------------------------------------- planning
def test_zch_tables_are_row_wise_fused_and_other_requests_fall_back(zch_config):
    cfg = load_config(zch_config)
    model = build_model(build_feature_spec(cfg), cfg.model)
    constraints, messages = sharding_constraints(model, {"user_id": "table_wise"}, "cpu")
    for table in ("user_id", "adgroup_id"):
        assert constraints[table].sharding_types == ["row_wise"]
        assert constraints[table].compute_kernels == ["fused"]
    assert constraints["cms_segid"].sharding_types == ["table_wise"]
    assert messages == [
        "zch table 'user_id': table_wise sharding is not available on cpu in this TorchRec build "
        "(available: row_wise); using row_wise"
    ]


def test_a_zch_table_needs_two_rows_per_rank():
    config = EmbeddingConfig(name="item", num_embeddings=5, embedding_dim=4, feature_names=["item"])
    holder = nn.Module()
    holder.mc = managed_collision_ec([config])
    prepare_for_planning(holder, 2)
    with pytest.raises(ValueError, match="zch table 'item' has 5 rows: on 3 rank"):
        prepare_for_planning(holder, 3)


def test_memory_report_counts_the_remapping_buffers(zch_config):
    cfg = load_config(zch_config)
    spec = build_feature_spec(cfg)
    report = embedding_memory_report(spec, "adagrad")
    by_name = {t.name: t for t in report.tables}
    assert by_name["adgroup_id"].zch_bytes == by_name["user_id"].zch_bytes == ZCH_ROWS * ZCH_BYTES_PER_ROW
    assert by_name["cate_id"].zch_bytes == 0
    assert report.zch_bytes == 2 * ZCH_ROWS * ZCH_BYTES_PER_ROW
    assert report.total_bytes == report.weight_bytes + report.optimizer_bytes + report.zch_bytes
    assert "zch MiB" in report.format()
    # the figure is what the module holds: its per-row state, as saved in checkpoints
    model = build_model(spec, cfg.model)
    module = model.embeddings.mc_ec._managed_collision_collection._managed_collision_modules["adgroup_id"]
    per_row = sum(b.numel() * b.element_size() for b in module.state_dict().values() if b.numel() == ZCH_ROWS)
    assert per_row == ZCH_ROWS * ZCH_BYTES_PER_ROW


@pytest.mark.parametrize("policy", ["lfu", "lru"])
def test_memory_report_counts_an_lfu_or_lru_tables_three_buffers(zch_config, policy, tmp_path):
    """LFU keeps access counts only, LRU last-access steps only: one int64 a row less than DistanceLFU."""
    data = yaml.safe_load(Path(zch_config).read_text())
    next(f for f in data["features"] if f["name"] == "user_id")["zch_eviction_policy"] = policy
    path = tmp_path / "din_zch.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    cfg = load_config(path)
    spec = build_feature_spec(cfg)
    table = next(t for t in embedding_memory_report(spec, "adagrad").tables if t.name == "user_id")
    model = build_model(spec, cfg.model)
    module = model.embeddings.mc_ec._managed_collision_collection._managed_collision_modules["user_id"]
    per_row = sum(b.numel() * b.element_size() for b in module.state_dict().values() if b.numel() == ZCH_ROWS)
    assert table.zch_bytes == per_row == ZCH_ROWS * 3 * 8


# ------------------------------------------------------------------------ eviction under DMP
class _Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = EmbeddingConfig(
            name="item",
            num_embeddings=4,  # 3 rows for ids, the last for ids without a row
            embedding_dim=4,
            feature_names=["item"],
            init_fn=EmbeddingInit("uniform", 0.01).init_fn(4, 4),
        )
        self.mc = managed_collision_ec([config])

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        out, _ = self.mc(kjt)
        return out["item"].values().sum() * 10.0


@pytest.mark.parametrize("optimizer", ["adagrad", "rowwise_adagrad"])
def test_an_evicted_row_starts_over_with_fresh_weights_and_optimizer_state(optimizer):
    """TorchRec resets the optimizer state of evicted rows only for row-wise Adagrad and only with an
    FBGEMM kernel missing on CPU (row-wise Adagrad would fail on the first step); recpipe resets both."""
    a, b, c, d = (k << 60 for k in (1, 2, 3, 4))

    def kjt(keys: list[int]) -> KeyedJaggedTensor:
        return KeyedJaggedTensor.from_lengths_sync(
            ["item"], torch.tensor(keys), torch.ones(len(keys), dtype=torch.int32)
        )

    env = init_distributed()
    try:
        torch.manual_seed(0)
        model = _Lookup()
        apply_sparse_optimizer(model, OptimizerConfig(type=optimizer, lr=0.5), "cpu")
        plan, _ = plan_sharding(model, env, {})
        dmp = shard_model(model, env, plan)
        sharded = dmp.module.mc
        remap = sharded._managed_collision_collection._managed_collision_modules["item"]
        tbe, index = sharded._table_to_tbe_and_index["item"]
        evictions = EvictionCounter(dmp)
        weight = tbe.split_embedding_weights()[int(index)]
        state = tbe.split_optimizer_states()[int(index)][0]

        for keys in ([a, b, c], [b, c], [b, c]):  # fills the 3 rows; a goes stale
            dmp(kjt(keys)).backward()
        rows = dict(zip(remap._mch_sorted_raw_ids.tolist(), remap._mch_remapped_ids_mapping.tolist()))
        row_a = rows[a]
        assert evictions.counts() == {"item": 0}  # three ids filled three empty rows
        assert weight[row_a].abs().max() > 0.4  # trained far from its U(-0.01, 0.01) start
        assert state[row_a].abs().sum() > 0

        dmp(kjt([d])).backward()  # d (1/1) evicts a (1/4)
        rows = dict(zip(remap._mch_sorted_raw_ids.tolist(), remap._mch_remapped_ids_mapping.tolist()))
        assert a not in rows and rows[d] == row_a
        assert evictions.counts() == {"item": 1}  # a gave its row to d
        # Re-drawn from U(-0.01, 0.01), then one step of d's gradient (10 per weight) on a zeroed
        # accumulator: -lr·10/sqrt(10²) = -0.5. Kept, a's weights would be at about -1.0, its
        # accumulator at 200.
        assert torch.all((weight[row_a] + 0.5).abs() <= 0.01 + 1e-6), weight[row_a]
        assert torch.all(state[row_a] == 100.0), state[row_a]
    finally:
        shutdown(env)


# ---------------------------------------------------------------------- training and resume
@pytest.fixture(scope="module")
def one_rank_runs(zch_config, taobao, tmp_path_factory):
    """40 steps straight, and 20 steps then a resume to 40, in this process (1 rank)."""
    straight = tmp_path_factory.mktemp("zch_straight")
    cfg = load_config(zch_config, {**OVERRIDES, "train.max_steps": 40})
    spec = build_feature_spec(cfg)
    result = train(cfg, spec, taobao["train"], taobao["eval"], straight)
    resumed = tmp_path_factory.mktemp("zch_resumed")
    first = load_config(zch_config, {**OVERRIDES, "train.max_steps": 20})
    train(first, spec, taobao["train"], None, resumed)
    second = train(cfg, spec, taobao["train"], taobao["eval"], resumed)
    return straight, result, resumed, second


def test_one_rank_trains_and_evicts(one_rank_runs, taobao):
    straight, result, _, _ = one_rank_runs
    assert result.steps == 40 and result.world_size == 1
    # 63 rows for the ids of 40 × 64 rows: both tables evicted; every count is of this run's 40 steps
    assert set(result.zch_evictions) == {"user_id", "adgroup_id"}
    assert all(n > 0 for n in result.zch_evictions.values()), result.zch_evictions
    assert result.eval is not None and result.eval["rows"] == 1001
    losses = _losses(straight)
    assert np.mean([losses[s] for s in range(31, 41)]) < 0.6 * np.mean([losses[s] for s in range(1, 11)])
    model, _, _ = load_model_for_inference(straight)
    state = model.state_dict()
    keys = state[f"{REMAP}.adgroup_id._mch_sorted_raw_ids"]
    assert int((keys != EMPTY).sum()) == ZCH_ROWS - 1  # full: 63 ids own a row, the last is for the rest
    assert int(state[f"{REMAP}.adgroup_id._current_iter_tensor"]) == 40
    # the unsharded model loaded from the checkpoint scores the eval rows as the trainer did
    metrics = evaluate_checkpoint(straight, taobao["eval"])
    assert metrics.auc == pytest.approx(result.eval["auc"], abs=1e-6)
    assert metrics.logloss == pytest.approx(result.eval["logloss"], rel=1e-5)


def test_resume_restores_the_remapping_bit_for_bit(one_rank_runs):
    straight, result, resumed, second = one_rank_runs
    assert second.resumed_from is not None and second.resumed_from.endswith("ckpt-20")
    assert 0 < second.zch_evictions["adgroup_id"] < result.zch_evictions["adgroup_id"]  # steps 21-40 only
    assert _losses(resumed) == _losses(straight)
    assert second.eval == result.eval
    a = load_model_for_inference(straight)[0].state_dict()
    b = load_model_for_inference(resumed)[0].state_dict()
    remap_keys = [k for k in a if "_managed_collision_modules" in k]
    assert len(remap_keys) == 2 * 6  # per table: segments, step, keys, rows, counts, last access
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------------------ two ranks
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_ranks_train_split_the_key_space_and_resume_on_two_or_one(zch_config, taobao, tmp_path):
    out = tmp_path / "two"

    def run(nproc: int, max_steps: int) -> tuple[int, str]:
        lines: list[str] = []
        overrides = {**OVERRIDES, "train.max_steps": max_steps}
        code = launch_local(
            zch_config, taobao["train"], taobao["eval"], out, nproc, overrides, echo=lines.append
        )
        return code, "".join(lines)

    code, log = run(2, 30)
    assert code == 0, log[-3000:]
    result = _result(out)
    assert result["world_size"] == 2 and result["steps"] == 30
    assert "zch table" not in log  # no sharding fallback: row-wise is the default
    model, _, _ = load_model_for_inference(out)
    state = model.state_dict()
    keys, rows = (
        state[f"{REMAP}.adgroup_id._mch_sorted_raw_ids"],
        state[f"{REMAP}.adgroup_id._mch_remapped_ids_mapping"],
    )
    real = keys != EMPTY
    # rank 0 owns rows [0, 32) and the keys below 2**62, rank 1 the rest; both filled theirs
    assert int((real & (rows < 32)).sum()) == int((real & (rows >= 32)).sum()) == ZCH_ROWS // 2 - 1
    assert bool((keys[real & (rows < 32)] < 2**62).all()) and bool((keys[real & (rows >= 32)] >= 2**62).all())
    # unseen ids go to their rank's spare row in the unsharded model too: the same scores as the trainer
    metrics = evaluate_checkpoint(out, taobao["eval"])
    assert metrics.auc == pytest.approx(result["eval"]["auc"], abs=1e-6)

    code, log = run(2, 40)
    assert code == 0, log[-3000:]
    assert "resumed from" in log and _result(out)["steps"] == 40
    assert sorted(_losses(out)) == list(range(1, 41))

    # on 1 rank the remapping is re-split by key range (recpipe.train.zch_resplit): 31 + 31 ids fit 63 rows
    code, log = run(1, 45)
    assert code == 0, log[-3000:]
    assert "zch tables re-split by key range from 2 onto 1 rank(s)" in log
    assert "{'user_id': 0, 'adgroup_id': 0}" in log or "{'adgroup_id': 0, 'user_id': 0}" in log
    assert "resumed from" in log and _result(out)["steps"] == 45
