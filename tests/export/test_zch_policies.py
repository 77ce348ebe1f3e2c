"""A zch table evicts by the policy its config names (TorchEasyRec's ``zch { lfu {} | lru {} | distance_lfu {} }``,
docs/source/feature/zch.md): ``zch_eviction_policy`` travels config → SparseFeature → TableSpec → TorchRec's
LFU / LRU / DistanceLFU_EvictionPolicy, fg.json keeps it (and leaves the default out), the policies keep
different ids once the table is full, and each model exports to jit, onnx and rtp with parity.

The DLRM's ``C1`` is a 64-row zch table, far fewer rows than its ids, so training evicts under every policy.
"""

from __future__ import annotations

import json

import pytest
from small_training import train_small
from test_zch_export import SPLIT_BACKENDS, TOL, zch_config
from torchrec.modules.mc_modules import DistanceLFU_EvictionPolicy, LFU_EvictionPolicy, LRU_EvictionPolicy

from recpipe.config import parse_config
from recpipe.export.api import export
from recpipe.export.zch import zch_remaps
from recpipe.features.spec import FeatureSpec

REMAP = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules.C1"
POLICIES = {
    "lfu": ({"zch_eviction_policy": "lfu"}, LFU_EvictionPolicy, None),
    "lru": ({"zch_eviction_policy": "lru", "zch_decay_exponent": 2.0}, LRU_EvictionPolicy, 2.0),
    "distance_lfu": ({}, DistanceLFU_EvictionPolicy, 1.0),
}


def _config(policy: str) -> dict:
    data = zch_config("dlrm_criteo_small.yaml", {"C1": 64})
    next(f for f in data["features"] if f["name"] == "C1").update(POLICIES[policy][0])
    return data


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = {}
    for policy in POLICIES:
        cfg = parse_config(_config(policy))
        out[policy] = cfg, train_small(cfg, "criteo", tmp_path_factory.mktemp(policy))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_table_evicts_by_its_policy_and_exports_with_parity(trained, policy, tmp_path):
    cfg, small = trained[policy]
    _, kind, exponent = POLICIES[policy]
    evictor = small.model.get_submodule(REMAP)._eviction_policy
    assert type(evictor) is kind
    if exponent is not None:
        assert evictor._decay_exponent == exponent
    table = next(t for t in small.spec.tables() if t.name == "C1")
    assert (table.zch_eviction_policy, table.zch_size) == (policy, 64)
    # fg.json: the policy round-trips, and only a setting off its default is written
    entry = next(e for e in small.spec.to_dict()["sparse"] if e["name"] == "C1")
    assert {k: v for k, v in entry.items() if k in ("zch_eviction_policy", "zch_decay_exponent")} == (
        POLICIES[policy][0]
    )
    assert FeatureSpec.from_dict(json.loads(json.dumps(small.spec.to_dict()))) == small.spec
    result = export(small.model, small.spec, cfg, SPLIT_BACKENDS, tmp_path, small.held_out)
    for backend in SPLIT_BACKENDS:
        r = result.backends[backend]
        assert r.status == "ok", (backend, r.reason)
        assert r.parity.passed and r.parity.rows >= 1000
        assert r.parity.max_abs_logit_diff <= TOL
    assert zch_remaps(small.model)["C1"].keys.numel() == 63  # full: every row but the spare one


@pytest.mark.slow
def test_the_policies_keep_different_ids(trained):
    """Same data, same seed: a full table that evicted by access count keeps other ids than one that evicted by
    recency, so the policy reached the module that admits and evicts."""
    kept = {p: set(zch_remaps(small.model)["C1"].keys.tolist()) for p, (_, small) in trained.items()}
    assert kept["lfu"] != kept["lru"] and kept["lru"] != kept["distance_lfu"]
