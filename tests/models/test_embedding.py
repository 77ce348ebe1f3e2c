from __future__ import annotations

import math

import pytest
import torch
from model_batches import make_kjt
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from recpipe.features.spec import TableSpec
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingInit, jagged_pool

SEQ_KEYS = ["click_50_seq__adgroup_id", "click_50_seq__cate_id", "click_50_seq__brand"]
TARGET_KEYS = ["adgroup_id", "cate_id", "brand"]


@pytest.fixture(scope="module")
def din_group(din_spec) -> EmbeddingGroup:
    torch.manual_seed(0)
    pooled = [k for k in din_spec.sparse_keys() if din_spec.feature(k).sequence is None]
    return EmbeddingGroup(din_spec.tables(), pooled, SEQ_KEYS, init=EmbeddingInit("normal"))


def _din_kjt(spec) -> KeyedJaggedTensor:  # noqa: F821
    # B = 2; row 0 clicked adgroups [11, 42, 7], row 1 nothing; targets 42 and 5.
    rows = {k: [[1], [2]] for k in spec.sparse_keys()}
    rows["adgroup_id"] = [[42], [5]]
    rows["cate_id"] = [[3], []]  # row 1 lacks a target category
    rows["click_50_seq__adgroup_id"] = [[11, 42, 7], []]
    rows["click_50_seq__cate_id"] = [[3, 3, 9], []]
    rows["click_50_seq__brand"] = [[1, 2, 3], []]
    return make_kjt(spec.sparse_keys(), rows)


def test_collection_membership(din_group, din_spec) -> None:
    assert isinstance(din_group.ebc, EmbeddingBagCollection)
    assert isinstance(din_group.ec, EmbeddingCollection)
    tables = din_group.tables()
    assert tables["ec"] == ["adgroup_id", "cate_id", "brand"]
    assert "user_id" in tables["ebc"] and "price" in tables["ebc"] and len(tables["ebc"]) == 13
    ec_features = {c.name: c.feature_names for c in din_group.ec.embedding_configs()}
    assert ec_features["adgroup_id"] == ["adgroup_id", "click_50_seq__adgroup_id"]
    ebc_features = [f for c in din_group.ebc.embedding_bag_configs() for f in c.feature_names]
    assert not set(ebc_features) & set(TARGET_KEYS + SEQ_KEYS)


def test_shared_table_pooled_equals_sequence_row(din_group, din_spec) -> None:
    out = din_group(_din_kjt(din_spec))
    values = out.values["click_50_seq__adgroup_id"]
    assert values.shape == (3, 16)  # T = 3 real items, not padded
    assert out.offsets["click_50_seq__adgroup_id"].tolist() == [0, 3, 3]
    assert out.offsets["click_50_seq__adgroup_id"].dtype == torch.int64
    # Target adgroup 42 (row 0) and history item 1 (adgroup 42) read the same row of one table.
    assert torch.equal(out.pooled["adgroup_id"][0], values[1])
    weight = din_group.ec.embeddings["adgroup_id"].weight
    assert torch.equal(out.pooled["adgroup_id"][1], weight[5])
    assert torch.equal(out.pooled["cate_id"][1], torch.zeros(16))  # no target id: zeros, like a bag
    assert torch.equal(out.pooled["user_id"][0], din_group.ebc.embedding_bags["user_id"].weight[1])
    assert list(out.pooled) == din_group.pooled_keys and list(out.values) == SEQ_KEYS


def test_key_order_and_extra_keys_do_not_matter(din_group, din_spec) -> None:
    kjt = _din_kjt(din_spec)
    keys = kjt.keys()
    reordered = kjt.permute(list(reversed(range(len(keys)))))
    a, b = din_group(kjt), din_group(reordered)
    for key in a.pooled:
        assert torch.equal(a.pooled[key], b.pooled[key])
    assert torch.equal(a.values[SEQ_KEYS[0]], b.values[SEQ_KEYS[0]])
    with pytest.raises(ValueError, match="lacks keys"):
        din_group(kjt.permute([0, 1]))


def test_mean_pooling_and_jagged_pool() -> None:
    tables = [
        TableSpec("t", 10, 4, ["a"], sequence=False),
        TableSpec("s", 10, 4, ["b", "seq__b"], sequence=True),
    ]
    group = EmbeddingGroup(tables, ["a", "b"], ["seq__b"], pooling={"a": "mean", "b": "mean"})
    kjt = make_kjt(["a", "b", "seq__b"], {"a": [[1, 2], []], "b": [[3, 4], [5]], "seq__b": [[1], [2, 3]]})
    out = group(kjt)
    wa = group.ebc.embedding_bags["t"].weight
    wb = group.ec.embeddings["s"].weight
    torch.testing.assert_close(out.pooled["a"][0], (wa[1] + wa[2]) / 2)
    assert torch.equal(out.pooled["a"][1], torch.zeros(4))
    torch.testing.assert_close(out.pooled["b"][0], (wb[3] + wb[4]) / 2)
    values = torch.arange(6.0).view(3, 2)
    torch.testing.assert_close(
        jagged_pool(values, torch.tensor([2, 0, 1])), torch.tensor([[2.0, 4], [0, 0], [4, 5]])
    )


def test_construction_errors() -> None:
    tables = [TableSpec("t", 10, 4, ["a", "a2"], sequence=False), TableSpec("s", 10, 8, ["b"], sequence=True)]
    with pytest.raises(ValueError, match="no embedding table"):
        EmbeddingGroup(tables, ["zzz"], [])
    with pytest.raises(ValueError, match="not sequence tables"):
        EmbeddingGroup(tables, [], ["a"])
    with pytest.raises(ValueError, match="different modes"):
        EmbeddingGroup(tables, ["a", "a2"], [], pooling={"a": "mean"})
    zch = [TableSpec("z", 10, 8, ["b"], True, zch_size=10), TableSpec("z2", 10, 4, ["c"], True, zch_size=10)]
    with pytest.raises(ValueError, match="zch tables .* different dims"):
        EmbeddingGroup(zch, [], ["b", "c"])
    with pytest.raises(ValueError, match="unknown embedding init"):
        EmbeddingInit("orthogonal")


def test_sequence_tables_of_several_dims_take_one_collection_per_dim() -> None:
    # TorchEasyRec lets a sequence's sub-features differ in dim: item = seq__b (8) | seq__c (16) | seq__d (8).
    torch.manual_seed(0)
    tables = [
        TableSpec("b", 10, 8, ["b", "seq__b"], sequence=True),
        TableSpec("c", 10, 16, ["c", "seq__c"], sequence=True),
        TableSpec("d", 10, 8, ["seq__d"], sequence=True),
    ]
    group = EmbeddingGroup(tables, ["b", "c"], ["seq__b", "seq__c", "seq__d"], pooling={"c": "mean"})
    assert group.tables()["ec"] == ["b", "d"] and group.tables()["ec_by_dim.d16"] == ["c"]
    assert group.ec.embedding_configs()[0].embedding_dim == 8
    assert group.ec_by_dim["d16"].embedding_configs()[0].embedding_dim == 16
    assert [group.embedding_dim(k) for k in ("seq__b", "seq__c", "seq__d")] == [8, 16, 8]
    rows = {"b": [[1], [2]], "c": [[3, 4], []], "seq__b": [[5], [6, 7]], "seq__c": [[8], [9, 1]]}
    kjt = make_kjt(["seq__d", "c", "seq__c", "b", "seq__b"], {**rows, "seq__d": [[2], [3, 4]]})
    out = group(kjt)
    wb, wd = group.ec.embeddings["b"].weight, group.ec.embeddings["d"].weight
    wc = group.ec_by_dim["d16"].embeddings["c"].weight
    torch.testing.assert_close(out.pooled["b"], wb[[1, 2]])
    torch.testing.assert_close(out.pooled["c"][0], (wc[3] + wc[4]) / 2)
    assert torch.equal(out.pooled["c"][1], torch.zeros(16))
    torch.testing.assert_close(out.values["seq__c"], wc[[8, 9, 1]])
    torch.testing.assert_close(out.values["seq__d"], wd[[2, 3, 4]])
    assert out.values["seq__b"].shape == (3, 8) and out.offsets["seq__c"].tolist() == [0, 1, 3]
    names = {n for n, _ in group.named_parameters()}
    assert names == {"ec.embeddings.b.weight", "ec.embeddings.d.weight", "ec_by_dim.d16.embeddings.c.weight"}


@pytest.mark.parametrize(
    ("init", "check"),
    [
        (EmbeddingInit("uniform"), lambda w: w.abs().max() <= math.sqrt(1 / 1000) and w.std() > 0.01),
        (EmbeddingInit("uniform", 0.5), lambda w: 0.45 < w.abs().max() <= 0.5),
        (EmbeddingInit("normal"), lambda w: abs(float(w.std()) - 0.25) < 0.02),
        (EmbeddingInit("normal", 0.1), lambda w: abs(float(w.std()) - 0.1) < 0.01),
        (EmbeddingInit("xavier_uniform"), lambda w: w.abs().max() <= math.sqrt(6 / 1016)),
    ],
)
def test_init_reaches_the_tables(init: EmbeddingInit, check) -> None:
    tables = [TableSpec("t", 1000, 16, ["a"], sequence=False), TableSpec("s", 1000, 16, ["b"], sequence=True)]
    group = EmbeddingGroup(tables, ["a", "b"], [], init=init)
    assert check(group.ebc.embedding_bags["t"].weight.detach())
    assert check(group.ec.embeddings["s"].weight.detach())


def test_meta_device_allocates_nothing(din_spec) -> None:
    group = EmbeddingGroup(din_spec.tables(), ["user_id"], SEQ_KEYS, device=torch.device("meta"))
    assert all(p.is_meta for p in group.parameters())


def test_weighted_tables_pool_sum_of_weight_times_embedding_and_mean_over_the_id_count() -> None:
    """TorchEasyRec's weighted ids in a second, weighted EmbeddingBagCollection: ``Σ w·e``, ``mean`` ``Σ w·e / n``
    (FBGEMM's weighted MEAN); the weights come from each key's weights key (float64 bits per id)."""
    tables = [
        TableSpec("w", 10, 4, ["a"], sequence=False, weights={"a": "a__weights"}),
        TableSpec("m", 10, 4, ["c"], sequence=False, weights={"c": "c__weights"}),
        TableSpec("t", 10, 4, ["b"], sequence=False),
    ]
    group = EmbeddingGroup(tables, ["a", "b", "c"], [], pooling={"a": "sum", "c": "mean"})
    assert group.tables()["weighted_ebc"] == ["w", "m"] and group.tables()["ebc"] == ["t"]
    assert group.weighted_ebc.is_weighted() and not group.ebc.is_weighted()

    def bits(*w: float) -> list[int]:
        return torch.tensor(w, dtype=torch.float64).view(torch.int64).tolist()

    rows = {
        "a": [[1, 2], []],
        "a__weights": [bits(0.5, 2.0), []],
        "b": [[3], [4]],
        "c": [[5, 6, 7], [8]],
        "c__weights": [bits(1.0, -1.0, 3.0), bits(0.25)],
    }
    out = group(make_kjt(list(rows), rows))
    wa, wc = group.weighted_ebc.embedding_bags["w"].weight, group.weighted_ebc.embedding_bags["m"].weight
    torch.testing.assert_close(out.pooled["a"][0], 0.5 * wa[1] + 2.0 * wa[2])
    assert torch.equal(out.pooled["a"][1], torch.zeros(4))
    torch.testing.assert_close(out.pooled["c"][0], (wc[5] - wc[6] + 3.0 * wc[7]) / 3)
    torch.testing.assert_close(out.pooled["c"][1], 0.25 * wc[8])
    torch.testing.assert_close(out.pooled["b"][1], group.ebc.embedding_bags["t"].weight[4])
