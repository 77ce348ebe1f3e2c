"""Frequency admission of a zch table under DistributedModelParallel (1 rank, gloo): an id seen ``k`` times across
training steps holds a row exactly when ``k >= threshold``; until then it reads the constant, and no gradient
reaches the spare row it looks up (its weight and Adagrad state stay put); the counter is in the model's state
dict and a DCP checkpoint carries it into a fresh model, which admits on the count it left off at; the counter
is re-split by key range onto another world size; the trainer resumes a run with admission bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import yaml
from torch import nn
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardMetadata
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.config import OptimizerConfig, load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import ZchAdmission
from recpipe.launch.worker import train
from recpipe.models.blocks.embedding import EmbeddingInit, managed_collision_ec
from recpipe.models.blocks.zch_admission import EMPTY
from recpipe.train.checkpoint import load_model_for_inference
from recpipe.train.dist import init_distributed, plan_sharding, shard_model, shutdown
from recpipe.train.optim import apply_sparse_optimizer
from recpipe.train.zch_resplit import INPUT_SIZE, ZchTable, _resplit_counter

ROWS, DIM, THRESHOLD, VALUE = 8, 4, 3, 0.25
A, B, C, D = (k << 60 for k in (1, 2, 3, 4))
COUNTER = "mc._managed_collision_collection._managed_collision_modules.item._admit_"


class _Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = EmbeddingConfig(
            name="item",
            num_embeddings=ROWS,
            embedding_dim=DIM,
            feature_names=["item"],
            init_fn=EmbeddingInit("uniform", 0.01).init_fn(ROWS, DIM),
        )
        self.mc = managed_collision_ec([config], admissions={"item": ZchAdmission(THRESHOLD, None, VALUE)})

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        out, _ = self.mc(kjt)
        return out["item"].values()


def _kjt(keys: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        ["item"], torch.tensor(keys), torch.ones(len(keys), dtype=torch.int32)
    )


def _dmp(env):
    torch.manual_seed(0)
    model = _Lookup()
    apply_sparse_optimizer(model, OptimizerConfig(type="adagrad", lr=0.5), "cpu")
    plan, _ = plan_sharding(model, env, {})
    return shard_model(model, env, plan)


def _parts(dmp):
    sharded = dmp.module.mc
    remap = sharded._managed_collision_collection._managed_collision_modules["item"]
    tbe, index = sharded._table_to_tbe_and_index["item"]
    weight = tbe.split_embedding_weights()[int(index)]
    state = tbe.split_optimizer_states()[int(index)][0]
    return remap, weight, state


def _held(remap) -> set[int]:
    return {k for k in remap._mch_sorted_raw_ids.tolist() if k != EMPTY}


def _counter(remap) -> dict[int, int]:
    keys, counts = remap._admit_keys.view(-1).tolist(), remap._admit_counts.view(-1).tolist()
    return {k: c for k, c in zip(keys, counts, strict=True) if k != EMPTY}


def test_an_id_gets_a_row_at_its_threshold_th_sighting_and_reads_the_constant_before(tmp_path):
    env = init_distributed()
    try:
        dmp = _dmp(env)
        remap, weight, state = _parts(dmp)
        spare = ROWS - 1
        # sightings after each step:      A  B  C  D
        steps = [
            [A, B, C, C],  # 1: A1 B1 C2
            [A, C, D],  # 2: A2 B1 C3 D1  -> C admitted
            [A, B],  # 3: A3 B2 C3 D1  -> A admitted
            [D, B, D],  # 4: A3 B3 C3 D3  -> B and D admitted
        ]
        admitted_after = [set(), {C}, {A, C}, {A, B, C, D}]
        counter_after = [{A: 1, B: 1, C: 2}, {A: 2, B: 1, D: 1}, {B: 2, D: 1}, {}]
        for keys, want_held, want_counter in zip(steps, admitted_after, counter_after, strict=True):
            out = dmp(_kjt(keys))
            assert _held(remap) == want_held, keys
            assert _counter(remap) == want_counter, keys
            for key, row in zip(keys, out, strict=True):
                if key in want_held:  # its own row: not the constant
                    assert not torch.allclose(row, torch.full((DIM,), VALUE)), key
                else:
                    assert torch.equal(row, torch.full((DIM,), VALUE)), key
            (out * torch.arange(1.0, DIM + 1)).sum().mul(10.0).backward()
            # no gradient reached the spare row: Adagrad's accumulator is still 0 and the weight the constant
            assert torch.all(state[spare] == 0.0), state[spare]
            assert torch.equal(weight[spare], torch.full((DIM,), VALUE))
        rows = dict(
            zip(remap._mch_sorted_raw_ids.tolist(), remap._mch_remapped_ids_mapping.tolist(), strict=True)
        )
        assert state[rows[C]].abs().sum() > 0  # an admitted id trains
    finally:
        shutdown(env)


def test_the_counter_survives_a_checkpoint_and_admits_where_it_left_off(tmp_path):
    env = init_distributed()
    try:
        dmp = _dmp(env)
        for keys in ([A, B], [A, C]):  # A2 B1 C1
            dmp(_kjt(keys)).sum().backward()
        sd = dmp.state_dict()
        assert {COUNTER + "keys", COUNTER + "counts"} <= set(sd)
        dcp.save({"model": sd}, checkpoint_id=str(tmp_path / "ckpt"))

        fresh = _dmp(env)
        remap, _, _ = _parts(fresh)
        assert _counter(remap) == {}
        state = {"model": fresh.state_dict()}
        dcp.load(state, checkpoint_id=str(tmp_path / "ckpt"))
        fresh.load_state_dict(state["model"])
        assert _counter(remap) == {A: 2, B: 1, C: 1}
        out = fresh(_kjt([A, B]))  # A's third sighting: a row; B's second: still the constant
        assert _held(remap) == {A}
        assert torch.equal(out[1], torch.full((DIM,), VALUE)) and not torch.equal(out[0], out[1])
        assert _counter(remap) == {B: 2, C: 1}
    finally:
        shutdown(env)


def test_the_counter_is_re_split_by_key_range_onto_another_world_size():
    """Rank 1 of 2 keeps the counted keys of its half of the key space (>= 2**62), the highest counts when its
    counter (here 2 slots) cannot hold them all."""

    def sharded(t: torch.Tensor) -> ShardedTensor:
        meta = ShardMetadata(shard_offsets=[0, 0], shard_sizes=list(t.shape), placement="rank:0/cpu")
        return ShardedTensor._init_from_local_shards([Shard(t, meta)], t.shape)

    env = init_distributed()
    try:
        low, high = (k << 60 for k in (1, 2)), (k << 60 for k in (5, 6, 7))
        keys = torch.tensor([[*low, *high, EMPTY]]).T  # the parent's (rows, 1 slot) counter
        counts = torch.tensor([[4, 1, 2, 5, 3, 0]]).T
        table = ZchTable("item", {"_admit_keys": "k", "_admit_counts": "c"})
        local_keys, local_counts = torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, 1, dtype=torch.int64)
        model_sd = {"k": sharded(local_keys), "c": sharded(local_counts)}
        block = -(-INPUT_SIZE // 2)
        _resplit_counter(table, {"k": keys, "c": counts}, model_sd, block, 1, 2)
        assert local_keys.flatten().tolist() == [6 << 60, 7 << 60] and local_counts.flatten().tolist() == [
            5,
            3,
        ]
        _resplit_counter(table, {"k": keys, "c": counts}, model_sd, block, 0, 2)
        assert local_keys.flatten().tolist() == [1 << 60, 2 << 60] and local_counts.flatten().tolist() == [
            4,
            1,
        ]
    finally:
        shutdown(env)


def test_training_with_admission_resumes_bit_for_bit(taobao, tmp_path):
    """The trainer (1 rank) with ``user_id`` and ``adgroup_id`` as zch tables admitting from the 3rd sighting:
    10 steps straight and 5 then a resume to 10 end with the same losses, counters, remappings and weights;
    the export-time model reads the constant in its spare rows."""
    data = yaml.safe_load(Path(taobao["config"]).read_text())
    admission = {"threshold": 3, "default_value": 0.0}
    for f in data["features"]:
        if f["name"] in ("user_id", "adgroup_id"):
            f.update(zch=True, zch_size=64, zch_admission=admission)
        for sub in f.get("sub_features", []):
            if sub["name"] == "adgroup_id":
                sub.update(zch=True, zch_size=64, zch_admission=admission)
    config = tmp_path / "din_admission.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    overrides = {"data.batch_size": 64, "train.log_every_steps": 1, "train.checkpoint_every_steps": 5}
    cfg = load_config(config, {**overrides, "train.max_steps": 10})
    spec = build_feature_spec(cfg)
    train(cfg, spec, taobao["train"], None, tmp_path / "straight")
    train(
        load_config(config, {**overrides, "train.max_steps": 5}),
        spec,
        taobao["train"],
        None,
        tmp_path / "resumed",
    )
    second = train(cfg, spec, taobao["train"], None, tmp_path / "resumed")
    assert second.resumed_from is not None and second.resumed_from.endswith("ckpt-5")

    def losses(out: Path) -> dict[int, float]:
        recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in recs if "loss" in r}

    assert len(losses(tmp_path / "straight")) == 10 and losses(tmp_path / "resumed") == losses(
        tmp_path / "straight"
    )
    a = load_model_for_inference(tmp_path / "straight")[0].state_dict()
    b = load_model_for_inference(tmp_path / "resumed")[0].state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    remap = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules.user_id"
    counted = [k for k in a[f"{remap}._admit_keys"].flatten().tolist() if k != EMPTY]
    held = [k for k in a[f"{remap}._mch_sorted_raw_ids"].tolist() if k != EMPTY]
    assert counted and held and not set(counted) & set(held)
    weight = a["embeddings.mc_ec._embedding_module.embeddings.user_id.weight"]
    assert torch.equal(weight[63], torch.zeros(weight.shape[1]))
