"""TorchEasyRec's ``zch`` block (docs/source/feature/zch.md), written as its tzrec/tests/configs use it
(multi_tower_din_zch_fg_mock.config: ``zch { zch_size eviction_interval: 2 lfu {} }`` on id features and a
sequence sub-feature) → recpipe's zch: what has recpipe's meaning maps, the rest is refused by name at its
line."""

from __future__ import annotations

import pytest
from tzrec_fixtures import small_din

from recpipe.features.build import build_feature_spec
from recpipe.models.registry import build_model
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError

USER = 'feature_configs { id_feature { feature_name: "user_id" expression: "user:user_id" num_buckets: 100 embedding_dim: 8 } }'


def _with_user_zch(zch: str, mapping: str = "") -> str:
    block = (
        f'feature_configs {{ id_feature {{ feature_name: "user_id" expression: "user:user_id" {mapping}'
        f"embedding_dim: 8 zch {{ {zch} }} }} }}"
    )
    return small_din().replace(USER, block)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_zch_size_interval_and_distance_lfu_map() -> None:
    text = _with_user_zch("zch_size: 64 eviction_interval: 2 distance_lfu {}")
    imported = import_tzrec(text)
    user = imported.data["features"][0]
    # No bucket setting in TorchEasyRec: recpipe keys the ids by hash, into the zch_size rows.
    assert user == {
        "kind": "id",
        "name": "user_id",
        "zch": True,
        "zch_size": 64,
        "zch_eviction_interval": 2,
        "hash_bucket_size": 64,
        "embedding_dim": 8,
    }
    spec = build_feature_spec(imported.config)
    table = next(t for t in spec.tables() if t.name == "user_id")
    assert (table.zch_size, table.num_embeddings, table.zch_eviction_interval) == (64, 64, 2)
    model = build_model(spec, imported.config.model)
    module = model.embeddings.mc_ec._managed_collision_collection._managed_collision_modules["user_id"]
    assert module._eviction_interval == 2


def test_the_default_interval_is_torcheasyrecs_and_a_mapping_is_kept() -> None:
    user = import_tzrec(
        _with_user_zch("zch_size: 64 distance_lfu { decay_exponent: 1.0 }", "num_buckets: 1000 ")
    ).data["features"][0]
    assert (user["zch_eviction_interval"], user["num_buckets"], user["zch_size"]) == (5, 1000, 64)
    assert "hash_bucket_size" not in user


def test_a_sequence_sub_feature_takes_zch() -> None:
    text = small_din(sequence_extra="zch { zch_size: 32 distance_lfu {} }")
    sub = import_tzrec(text).data["features"][2]["sub_features"][0]
    assert (sub["zch"], sub["zch_size"], sub["zch_eviction_interval"]) == (True, 32, 5)


@pytest.mark.parametrize(
    ("zch", "mapped"),
    [
        # zch.md's examples: lfu {} (multi_tower_din_zch_fg_mock.config's), lru { decay_exponent: 1.0 }
        ("zch_size: 64 lfu {}", {"zch_eviction_policy": "lfu"}),
        ("zch_size: 64 lru { decay_exponent: 1.0 }", {"zch_eviction_policy": "lru"}),
        ("zch_size: 64 lru {}", {"zch_eviction_policy": "lru"}),
        (
            "zch_size: 64 lru { decay_exponent: 2.5 }",
            {"zch_eviction_policy": "lru", "zch_decay_exponent": 2.5},
        ),
        ("zch_size: 64 distance_lfu { decay_exponent: 2.0 }", {"zch_decay_exponent": 2.0}),
        ("zch_size: 64 distance_lfu {}", {}),
    ],
)
def test_each_eviction_policy_maps_and_builds_torchrecs(zch: str, mapped: dict) -> None:
    """tzrec/features/feature.py builds LFU_EvictionPolicy() / LRU_EvictionPolicy(decay_exponent) /
    DistanceLFU_EvictionPolicy(decay_exponent); recpipe writes the policy and exponent only off its default
    (distance_lfu, 1.0), and its model builds the same torchrec policy."""
    imported = import_tzrec(_with_user_zch(zch))
    user = imported.data["features"][0]
    assert {k: v for k, v in user.items() if k in ("zch_eviction_policy", "zch_decay_exponent")} == mapped
    model = build_model(build_feature_spec(imported.config), imported.config.model)
    module = model.embeddings.mc_ec._managed_collision_collection._managed_collision_modules["user_id"]
    policy = module._eviction_policy
    kind = {"lfu": "LFU", "lru": "LRU"}.get(mapped.get("zch_eviction_policy"), "DistanceLFU")
    assert type(policy).__name__ == f"{kind}_EvictionPolicy"
    if kind != "LFU":
        assert policy._decay_exponent == mapped.get("zch_decay_exponent", 1.0)


@pytest.mark.parametrize(
    ("zch", "path", "message"),
    [
        ("zch_size: 64", "zch", "zch needs an eviction policy"),
        (
            'zch_size: 64 distance_lfu {} threshold_filtering_func: "lambda x: (x > 10, 10)"',
            "zch.threshold_filtering_func",
            "an admission function",
        ),
    ],
)
def test_what_recpipe_does_not_have_is_refused_by_name(zch: str, path: str, message: str) -> None:
    text = _with_user_zch(zch)
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == f"feature_configs[0].id_feature.{path}" and message in problem.message
    assert problem.line == _line(text, "zch {")


def test_zch_with_a_vocabulary_is_refused() -> None:
    text = _with_user_zch("zch_size: 64 distance_lfu {}", 'vocab_list: ["a", "b"] ')
    with pytest.raises(
        TzrecImportError, match="zch with vocab_list: a vocabulary already gives each value its row"
    ):
        import_tzrec(text)
