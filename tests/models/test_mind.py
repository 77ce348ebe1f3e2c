"""MIND: the capsule routing (squash, interest counts, padding masked exactly: a history's interests do not
depend on the other rows of its batch), the towers' shapes and masks, the label-aware attention, its contract
(multi-interest retrieval, not ranking), and max-over-interests retrieval."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import ConfigError, parse_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import top_k_items
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.models.mind.capsule import CapsuleRouting, padded_history, squash
from recpipe.models.mind.model import MIND, label_aware_attention
from recpipe.models.protocol import MultiInterestModel, RankingModel, RetrievalModel
from recpipe.models.registry import build_model
from recpipe.models.retrieval_train import RetrievalTrainModel
from recpipe.models.train_model import TrainModel
from recpipe.train.retrieval import rows_batch

SEQ = {
    "kind": "sequence",
    "name": "click_50_seq",
    "sequence_length": 20,
    "delimiter": "|",
    "sub_delimiter": "\x03",
    "sub_features": [
        {"name": "adgroup_id", "num_buckets": 5000, "embedding_dim": 8},
        {"name": "cate_id", "num_buckets": 500, "embedding_dim": 4},
        {"name": "brand", "num_buckets": 5000, "embedding_dim": 4, "default_value": "0"},
    ],
}


def _config(**model: object) -> dict:
    m = {
        "type": "mind",
        "user_tower": {
            "group": "user",
            "history_group": "hist",
            "user_mlp": {"hidden_units": [16, 8]},
            "hist_seq_mlp": {"hidden_units": [16, 12]},
            "capsule": {"max_k": 4, "max_seq_len": 20, "high_dim": 8, "squash_pow": 0.2},
            "concat_mlp": {"hidden_units": [16, 8], "bias": False},
        },
        "item_tower": {"group": "item", "mlp": {"hidden_units": [16, 8]}},
        "output_dim": 6,
        "simi_pow": 20,
        "temperature": 0.1,
    }
    m.update(model)
    return {
        "name": "mind-test",
        "data": {"label": "clk", "batch_size": 8, "num_workers": 0},
        "features": [
            {"kind": "id", "name": "user_id", "num_buckets": 5000, "embedding_dim": 8},
            {"kind": "id", "name": "age_level", "num_buckets": 8, "embedding_dim": 4},
            {"kind": "id", "name": "adgroup_id", "num_buckets": 5000, "embedding_dim": 8},
            {"kind": "id", "name": "cate_id", "num_buckets": 500, "embedding_dim": 4},
            SEQ,
        ],
        "feature_groups": [
            {"name": "user", "type": "deep", "features": ["user_id", "age_level"]},
            {"name": "item", "type": "deep", "features": ["adgroup_id", "cate_id"]},
            {
                "name": "hist",
                "type": "sequence",
                "features": [f"click_50_seq__{n}" for n in ("adgroup_id", "cate_id")],
            },
        ],
        "model": m,
    }


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("mind_rows")
    generate("taobao", 64, out, seed=5)
    return pq.read_table(out)


def test_squash_values() -> None:
    torch.testing.assert_close(squash(torch.tensor([[3.0, 4.0]])), torch.tensor([[15 / 26, 20 / 26]]))
    # power 0.5: (25/26)^0.5 · x/|x|
    torch.testing.assert_close(
        squash(torch.tensor([[3.0, 4.0]]), 0.5), math.sqrt(25 / 26) * torch.tensor([[0.6, 0.8]])
    )
    torch.testing.assert_close(squash(torch.zeros(2, 3)), torch.zeros(2, 3))


def test_padded_history_keeps_the_first_items() -> None:
    items, mask, lengths = padded_history(torch.arange(6.0).unsqueeze(1), torch.tensor([0, 4, 4, 6]), 3)
    assert items.squeeze(2).tolist() == [[0, 1, 2], [0, 0, 0], [4, 5, 0]]
    assert mask.tolist() == [[True, True, True], [False] * 3, [True, True, False]]
    assert lengths.tolist() == [4, 0, 2]


def test_interest_counts_follow_log2_of_the_length() -> None:
    caps = CapsuleRouting(4, max_k=4, max_seq_len=50, high_dim=3)
    counts = caps.interest_mask(torch.tensor([0, 1, 2, 3, 5, 8, 9, 40])).sum(dim=1).tolist()
    # max(1, min(4, log2 n)), a fraction rounding up: 0 → 1, 3 → 1.58 → 2, 5 → 2.32 → 3, 9 → 3.17 → 4
    assert counts == [1, 1, 1, 2, 3, 3, 4, 4]
    const = CapsuleRouting(4, max_k=4, max_seq_len=50, high_dim=3, const_caps_num=True)
    assert const.interest_mask(torch.tensor([0, 9])).sum(dim=1).tolist() == [4, 4]


def test_routing_of_a_history_ignores_the_rest_of_its_batch() -> None:
    torch.manual_seed(0)
    caps = CapsuleRouting(6, max_k=3, max_seq_len=10, high_dim=5, squash_pow=0.2)
    history = torch.randn(5, 6)  # one user's 5 items
    alone, mask_alone = caps(history, torch.tensor([0, 5]))
    # the same history between a longer one (12 items, truncated to 10) and an empty one
    others = torch.randn(12, 6)
    values = torch.cat([others, history])
    batch, mask = caps(values, torch.tensor([0, 12, 12, 17]))
    assert batch.shape == (3, 3, 5) and mask.tolist() == [
        [True] * 3,
        [True, False, False],
        [True, True, True],
    ]
    torch.testing.assert_close(batch[2], alone[0], atol=1e-6, rtol=1e-5)
    assert mask_alone.tolist() == [[True, True, True]]
    assert batch[1].abs().sum() == 0  # an empty history: one interest, all zeros
    # the truncated row routes its first 10 items only: the 11th and 12th change nothing
    first10, _ = caps(others[:10], torch.tensor([0, 10]))
    changed = others.clone()
    changed[10:] = 100.0
    again, _ = caps(changed, torch.tensor([0, 12]))
    torch.testing.assert_close(again, caps(others, torch.tensor([0, 12]))[0])
    assert first10.shape == (1, 3, 5)


def test_routing_gradients_and_interests_differ() -> None:
    torch.manual_seed(1)
    caps = CapsuleRouting(6, max_k=3, max_seq_len=10, high_dim=5)
    values = torch.randn(8, 6, requires_grad=True)
    high, mask = caps(values, torch.tensor([0, 8]))
    assert mask.tolist() == [[True, True, True]]
    assert not torch.allclose(high[0, 0], high[0, 1])  # random routing logits break the symmetry
    high.sum().backward()
    assert values.grad is not None and caps.bilinear.grad is not None and caps.bilinear.grad.abs().sum() > 0


def test_label_aware_attention_picks_the_matching_interest() -> None:
    interests = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    mask = torch.tensor([[True, True, False]])  # the third is masked out, however well it matches
    out = label_aware_attention(interests, mask, torch.tensor([[0.0, 1.0]]), 20.0)
    torch.testing.assert_close(
        out, torch.tensor([[math.exp(-20) / (1 + math.exp(-20)), 1 / (1 + math.exp(-20))]])
    )


def test_model_shapes_masks_and_contract(rows) -> None:
    cfg = parse_config(_config())
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert isinstance(model, MIND) and isinstance(model, MultiInterestModel)
    assert not isinstance(model, RetrievalModel) and not isinstance(model, RankingModel)
    batch = rows_batch(FeatureGenerator(spec), rows.slice(0, 8))
    model.eval()
    interests, mask = model.user_interests(batch.dense, batch.sparse)
    assert interests.shape == (8, 4, 6) and mask.shape == (8, 4)
    lengths = batch.sparse["click_50_seq__adgroup_id"].lengths()
    expected = torch.log2(lengths.float()).clamp(1, 4).ceil()
    assert mask.sum(dim=1).tolist() == expected.tolist()
    norms = interests.norm(dim=2)
    torch.testing.assert_close(norms[mask], torch.ones(int(mask.sum())))  # cosine: unit interests
    assert norms[~mask].abs().sum() == 0
    # a row's interests do not depend on the batch: row 3 alone gives the same
    alone = rows_batch(FeatureGenerator(spec), rows.slice(3, 1))
    one, _ = model.user_interests(alone.dense, alone.sparse)
    torch.testing.assert_close(one[0], interests[3], atol=1e-6, rtol=1e-5)
    item = model.item_embedding(batch.dense, batch.sparse)
    assert item.shape == (8, 6)
    user = model.attend(interests, mask, item)
    torch.testing.assert_close(model(batch.dense, batch.sparse), (user * item).sum(1) / 0.1)
    assert all(layer.linear.bias is None for layer in model.user_tower.concat_mlp.layers)  # bias: false
    with pytest.raises(ValueError, match="retrieval model"):
        TrainModel(model)
    loss, logits = RetrievalTrainModel(model)(batch, negatives=batch)
    assert logits.shape == (8, 9) and math.isfinite(float(loss))


def test_top_k_scores_an_item_by_its_best_real_interest() -> None:
    interests = torch.tensor([[[1.0, 0.0], [0.0, 3.0]], [[1.0, 0.0], [0.0, 3.0]]])
    items = torch.tensor([[0.0, 1.0], [2.0, 0.0], [-1.0, -1.0]])
    both = torch.tensor([[True, True], [True, False]])
    assert top_k_items(interests, items, 2, mask=both).tolist() == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match="at least one real interest"):
        top_k_items(interests, items, 1, mask=torch.tensor([[True, True], [False, False]]))


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="needs a sequence group"):
        parse_config(_config(**{"user_tower": {**_config()["model"]["user_tower"], "history_group": "item"}}))
    with pytest.raises(ConfigError, match="both read group 'user'"):
        parse_config(_config(item_tower={"group": "user", "mlp": {"hidden_units": [8]}}))
    cfg = parse_config(_config(output_dim=0, item_tower={"group": "item", "mlp": {"hidden_units": [16, 5]}}))
    with pytest.raises(ValueError, match="interests end at width 8 and its items at 5"):
        build_model(build_feature_spec(cfg), cfg.model)
