"""DSSM: the two towers' shapes and similarity, its contract (retrieval, not ranking), its config errors, and
training on synthetic retrieval data with sampled negatives to a recall@50 near the oracle's."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import ConfigError, load_config
from recpipe.data.negative_sampler import ItemTable
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import evaluate_retrieval
from recpipe.features.build import build_feature_spec
from recpipe.models.dssm.model import DSSM
from recpipe.models.protocol import RankingModel, RetrievalModel
from recpipe.models.registry import build_model
from recpipe.models.retrieval_train import RetrievalTrainModel
from recpipe.models.train_model import TrainModel
from recpipe.train.retrieval import item_rows, rows_batch, train_retrieval

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("retrieval")
    report = generate("retrieval", 40_000, out, seed=0, users=400, items=500)
    rows = pq.read_table(report.files[0])
    items = ItemTable(pq.read_table(out / "_items.parquet"), "item_id", ["item_id", "cate_id"])
    return report, rows.slice(0, 36_000), rows.slice(36_000), items


def _batch(spec, rows):
    from recpipe.features.fg import FeatureGenerator

    return rows_batch(FeatureGenerator(spec), rows)


def test_towers_shapes_and_similarity(data) -> None:
    _, rows, _, items = data
    cfg = load_config(CONFIG)
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    assert (
        isinstance(model, DSSM) and isinstance(model, RetrievalModel) and not isinstance(model, RankingModel)
    )
    batch = _batch(spec, rows.slice(0, 6))
    user = model.user_embedding(batch.dense, batch.sparse)
    item = model.item_embedding(batch.dense, batch.sparse)
    assert user.shape == item.shape == (6, 16)
    torch.testing.assert_close(user.norm(dim=1), torch.ones(6))  # cosine: unit rows
    torch.testing.assert_close(model(batch.dense, batch.sparse), (user * item).sum(1) / 0.1)
    # the item tower reads only item columns: the catalogue's rows (user columns null) embed alike
    catalogue = _batch(spec, item_rows(items.attrs, rows.schema, ("clk",)))
    first = items.rows_of(rows.column("item_id").combine_chunks()[:6])
    torch.testing.assert_close(model.item_embedding(catalogue.dense, catalogue.sparse)[first], item)
    with pytest.raises(ValueError, match="retrieval model"):
        TrainModel(model)
    with pytest.raises(ValueError, match="none given"):
        RetrievalTrainModel(model)(batch)


def test_variational_dropout_drops_each_towers_features_in_training_and_adds_its_penalty(data) -> None:
    """TorchEasyRec's DSSM with ``variational_dropout``: each tower group of more than one feature gets one (both
    groups here: user_id + user_segment, item_id + cate_id); training draws a relaxed Bernoulli per row and feature,
    evaluation scales each feature by its keep probability, and the loss adds ``λ / B · Σ_f (1 - sigmoid(p_f))``."""
    _, rows, _, items = data
    cfg = load_config(CONFIG, {"model.variational_dropout": {"regularization_lambda": 0.5}})
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)
    model = build_model(spec, cfg.model)
    user, item = model.user_tower.dropout, model.item_tower.dropout
    assert user is not None and item is not None and user.widths == [16, 8] and item.widths == [16, 8]
    batch = _batch(spec, rows.slice(0, 8))
    model.eval()  # deterministic: each feature's columns scaled by its keep probability
    a, b = (model.user_embedding(batch.dense, batch.sparse) for _ in range(2))
    torch.testing.assert_close(a, b)
    model.train()
    assert not torch.equal(model.user_embedding(batch.dense, batch.sparse), a)  # drawn anew in training
    want = sum(0.5 / 8 * (1 - torch.sigmoid(t.feature_p)).sum() for t in (user, item))
    torch.testing.assert_close(model.regularization(8), want)
    negatives = _batch(spec, item_rows(items.attrs.slice(0, 16), rows.schema, ("clk",)))
    torch.manual_seed(1)
    loss, logits = RetrievalTrainModel(model)(batch, negatives=negatives)
    loss.backward()  # the penalty trains the drop logits
    assert user.feature_p.grad is not None and user.feature_p.grad.abs().sum() > 0
    # without it: no dropout module, no penalty
    plain = build_model(spec, load_config(CONFIG).model)
    assert plain.user_tower.dropout is None and plain.regularization(8) is None


def test_inner_product_has_no_norm_and_output_dim_zero_needs_equal_widths() -> None:
    cfg = load_config(CONFIG, {"model.similarity": "inner_product", "model.output_dim": 0})
    model = build_model(build_feature_spec(cfg), cfg.model)
    assert model.user_tower.output is None and model.embedding_dim == 32
    cfg = load_config(CONFIG, {"model.output_dim": 0, "model.item_tower.mlp.hidden_units": [64, 8]})
    with pytest.raises(ValueError, match="user tower ends at width 32 and the item tower at 8"):
        build_model(build_feature_spec(cfg), cfg.model)


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="both read group 'user'"):
        load_config(CONFIG, {"model.item_tower.group": "user"})
    with pytest.raises(ConfigError, match="temperature"):
        load_config(CONFIG, {"model.temperature": 0.0})
    with pytest.raises(ConfigError, match="similarity"):
        load_config(CONFIG, {"model.similarity": "euclid"})


@pytest.mark.parametrize(
    "overrides",
    [{}, {"model.log_q_correction": True}, {"model.in_batch_negative": True, "model.log_q_correction": True}],
    ids=["sampled", "sampled_log_q", "in_batch_log_q"],
)
def test_trains_to_near_the_oracle(data, overrides) -> None:
    report, train_rows, eval_rows, items = data
    cfg = load_config(CONFIG, overrides)
    spec = build_feature_spec(cfg)
    run = train_retrieval(cfg, spec, train_rows, items, num_sample=128, steps=300, item_log_q=True)
    assert sum(run.losses[-20:]) / 20 < 0.8 * run.losses[0]
    got = evaluate_retrieval(run.model, spec, eval_rows, items, (50,))[50]
    assert got.queries == 4000 and got.recall == got.hit_rate  # one target per row
    # random: 50 / 500 = 0.1; the oracle (all rows): report.oracle_recall[50]
    assert got.recall > 0.8 * report.oracle_recall[50], (got.recall, report.oracle_recall[50])
