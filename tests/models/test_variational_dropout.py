"""VariationalDropout (TorchEasyRec's feature-selection dropout) alone and in MultiTowerDIN's dense arch: the
training draw, the eval scaling that exports, the penalty and the training loss that adds it."""

from __future__ import annotations

import math

import pytest
import torch

from recpipe.batch import Batch
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.blocks.multitask import DbmtlHead, TowerSpec
from recpipe.models.blocks.variational_dropout import VariationalDropout
from recpipe.models.multi_tower_din.dense import DeepTower, DinTower, MultiTowerDinDense
from recpipe.models.multi_tower_din.model import dense_feature_widths
from recpipe.models.train_model import TrainModel, bce_loss

LN3 = math.log(3.0)  # sigmoid(ln 3) = 0.75


def _vd(lam: float = 0.01) -> VariationalDropout:
    vd = VariationalDropout([2, 1], lam)
    with torch.no_grad():
        vd.feature_p.copy_(torch.tensor([0.0, LN3]))  # dropout 0.5 and 0.75: keep 0.5 and 0.25
    return vd


def test_eval_scales_each_feature_by_its_keep_probability() -> None:
    x = torch.tensor([[1.0, 2.0, 4.0], [-2.0, 0.0, 8.0]])
    out = _vd().eval()(x)
    torch.testing.assert_close(out, torch.tensor([[0.5, 1.0, 1.0], [-1.0, 0.0, 2.0]]))


def test_penalty_is_lambda_over_batch_times_the_keep_probabilities() -> None:
    """0.01 / 4 · ((1 - 0.5) + (1 - 0.75)) = 0.001875; its gradient lowers the keep probabilities."""
    vd = _vd()
    penalty = vd.penalty(4)
    torch.testing.assert_close(penalty, torch.tensor(0.001875))
    penalty.backward()
    # d/dp (1 - sigmoid(p)) = -sigmoid(p)(1 - sigmoid(p)): -0.25 and -0.1875, times 0.01 / 4
    torch.testing.assert_close(vd.feature_p.grad, torch.tensor([-0.25, -0.1875]) * 0.01 / 4)


def test_training_draws_a_concrete_dropout_per_row_and_feature() -> None:
    """z = sigmoid((log d - log(1-d) + log u - log(1-u)) / 0.1) with u ~ U(0, 1), the same draw for a feature's
    columns (TorchEasyRec's concrete_dropout_neuron; its eps is negligible here)."""
    vd, x = _vd().train(), torch.tensor([[1.0, 2.0, 4.0], [3.0, 5.0, 7.0]])
    torch.manual_seed(3)
    out = vd(x)
    torch.manual_seed(3)
    u = torch.rand(2, 2)
    d = torch.tensor([0.5, 0.75])
    z = torch.sigmoid((torch.log(d) - torch.log(1 - d) + torch.log(u) - torch.log(1 - u)) / 0.1)
    torch.testing.assert_close(out, x * (1 - z[:, [0, 0, 1]]), atol=1e-5, rtol=1e-4)
    # nearly certain keeps and drops
    with torch.no_grad():
        vd.feature_p.copy_(torch.tensor([-30.0, 30.0]))
    torch.testing.assert_close(vd(x), x * torch.tensor([1.0, 1.0, 0.0]), atol=1e-4, rtol=0)


def test_dense_feature_widths_join_an_embedded_columns() -> None:
    assert dense_feature_widths(["age", "price__emb0", "price__emb1", "price__emb2", "ctr"]) == (1, 3, 1)
    assert dense_feature_widths([]) == ()


def _dense(variational_dropout: float | None, head: bool) -> MultiTowerDinDense:
    torch.manual_seed(0)
    towers = [DeepTower("all", ("a", "b"), None if head else MlpSpec((4,)), (0,))]
    din = [DinTower("seq", ("a",), ("h",), MlpSpec((4,)))] if head else []
    kwargs = {}
    if head:
        kwargs["head"] = lambda w: DbmtlHead(
            w, [TowerSpec("ctr", MlpSpec((4,))), TowerSpec("cvr", MlpSpec((4,)), ("ctr",), MlpSpec((4,)))]
        )
    else:
        kwargs["final"] = MlpSpec((4,))
    return MultiTowerDinDense(
        towers, din, kwargs.pop("final", None), {"a": 2, "b": 3, "h": 2}, 1, variational_dropout=variational_dropout,
        **kwargs,
    )  # fmt: skip


def _inputs(b: int = 3) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    emb = {
        "a": torch.randn(b, 2, generator=g),
        "b": torch.randn(b, 3, generator=g),
        "seq__query": torch.randn(b, 2, generator=g),
        "seq__values": torch.randn(4, 2, generator=g),
        "seq__offsets": torch.tensor([0, 2, 2, 4]),
    }
    return torch.randn(b, 1, generator=g), emb


@pytest.mark.parametrize("head", [False, True])
def test_the_dense_arch_drops_the_deep_features_and_in_a_head_model_the_din_outputs(head) -> None:
    """The deep tower's features a (2), b (3) and its dense column (1); with a multi-task head the DIN tower's
    output (width 2) is one more feature (TorchEasyRec's one DEEP group with its sequence encoder)."""
    model = _dense(0.01, head)
    assert model.feature_dropout["all"].widths == [2, 3, 1]
    assert (model.din_dropout is not None) == head and (not head or model.din_dropout.widths == [2])
    plain = _dense(None, head)
    assert not list(plain.feature_dropout) and plain.din_dropout is None and plain.regularization(3) is None
    dense, emb = _inputs()
    model.eval()
    assert torch.equal(model(dense, emb), model(dense, emb))  # eval: deterministic
    model.train()
    torch.manual_seed(0)
    first = model(dense, emb)
    assert not torch.equal(first, model(dense, emb))  # training: a new draw each step


def test_eval_equals_the_model_without_dropout_on_inputs_scaled_by_the_keep_probabilities() -> None:
    model, plain = _dense(0.01, head=False).eval(), _dense(None, head=False).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "dropout" not in k})
    dense, emb = _inputs()
    keep = model.feature_dropout["all"].keep_probability()
    scaled = dict(emb, a=emb["a"] * keep[0], b=emb["b"] * keep[1])
    torch.testing.assert_close(model(dense, emb), plain(dense * keep[2], scaled))


def test_a_tower_of_one_feature_has_no_dropout() -> None:
    """TorchEasyRec skips a group of one feature (rank_model.py: len(feature_dim) > 1)."""
    towers = [DeepTower("one", ("a",), MlpSpec((4,)))]
    model = MultiTowerDinDense(towers, [], MlpSpec((4,)), {"a": 2}, variational_dropout=0.01)
    assert not list(model.feature_dropout) and model.regularization(8) is None


def test_training_loss_adds_the_penalty_of_every_site() -> None:
    """DBMTL-like dense arch with lambda 0.1: sites all (a, b, dense) and the DIN output; with every logit 0
    the penalty is 0.1 / 3 · (4 · 0.5) = 0.0667 over the tasks' BCE."""
    model = _dense(0.1, head=True)
    with torch.no_grad():
        for site in [model.feature_dropout["all"], model.din_dropout]:
            site.feature_p.zero_()

    class _Ranking(torch.nn.Module):
        def __init__(self, dense: MultiTowerDinDense) -> None:
            super().__init__()
            self.dense = dense
            self.task_weights = [1.0, 1.0]

        def predict(self, batch: Batch) -> torch.Tensor:
            return self.dense(batch.dense, _inputs()[1])

        def regularization(self, batch_size: int) -> torch.Tensor | None:
            return self.dense.regularization(batch_size)

    dense, _ = _inputs()
    labels = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    batch = Batch(dense=dense, sparse=None, labels=labels, weights=None)
    train = TrainModel(_Ranking(model)).train()
    loss, logits = train(batch)
    torch.testing.assert_close(loss - bce_loss(logits, labels), torch.tensor(0.1 / 3 * 2.0))
    loss.backward()
    assert model.feature_dropout["all"].feature_p.grad.abs().min() > 0


def test_eval_dense_arch_exports_and_matches_eager() -> None:
    """With the dropout, the served graph is the eval one: torch.export at another batch size, same logits."""
    model = _dense(0.01, head=False).eval()
    dense, emb = _inputs()
    batch = torch.export.Dim("batch", min=1, max=4096)
    emb = {k: emb[k] for k in ("a", "b")}
    program = torch.export.export(
        model, (dense, emb), dynamic_shapes=({0: batch}, {k: {0: batch} for k in emb})
    )
    d2, e2 = _inputs(3)
    e2 = {k: torch.cat([e2[k]] * 5) for k in ("a", "b")}
    torch.testing.assert_close(program.module()(torch.cat([d2] * 5), e2), model(torch.cat([d2] * 5), e2))
