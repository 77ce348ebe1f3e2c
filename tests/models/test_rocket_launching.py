"""RocketLaunching against TorchEasyRec's formulas (tzrec/models/rocket_launching.py) written out by hand:
the matched layers, the light net as the served forward, the distillation terms, and the training wrapper's
loss and gradients (the light net's input detached: the embeddings learn from the booster only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recpipe.models.blocks.distill import Distillation, distillation_terms
from recpipe.models.blocks.group_input import GroupColumns, GroupConcat
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.rocket_launching.dense import RocketDense, RocketSpec, matched_layers
from recpipe.models.train_model import TrainModel, bce_loss


def test_each_light_layer_matches_the_first_booster_layer_of_its_width():
    assert matched_layers((96, 64, 32), (256, 128, 64, 32)) == [(1, 2), (2, 3)]
    assert matched_layers((8, 8), (8, 4, 8)) == [(0, 0), (1, 0)]
    assert matched_layers((5,), (4, 3)) == []


def _arch(num_class: int = 2, feature_based: bool = True, similarity: str = "cosine") -> RocketDense:
    torch.manual_seed(0)
    group = GroupConcat(GroupColumns(("a", "b"), (0, 1)), {"a": 4, "b": 4}, 2)
    return RocketDense(
        group,
        RocketSpec(MlpSpec((16, 8)), MlpSpec((8,)), MlpSpec((12,)), num_class, feature_based, similarity),
    )


def _inputs(batch: int = 6) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(1)
    return torch.randn(batch, 2), {"a": torch.randn(batch, 4), "b": torch.randn(batch, 4)}


@pytest.mark.parametrize("num_class", [1, 2])
def test_forward_is_the_light_net_and_distill_gives_both_nets(num_class):
    arch = _arch(num_class)
    dense, emb = _inputs()
    x = arch.share(torch.cat([emb["a"], emb["b"], dense], dim=1))
    head = arch.light_logit(arch.light(x)).squeeze(-1)
    torch.testing.assert_close(arch(dense, emb), head)
    out = arch.distill(dense, emb)
    torch.testing.assert_close(out.light, head)
    booster = arch.booster_logit(arch.booster(x)).squeeze(-1)
    torch.testing.assert_close(out.booster, booster)
    assert out.light_raw.shape == out.booster_raw.shape == (6, num_class)
    if num_class == 2:  # TwoClassLogit: logit = l1 - l0, softmax(l0, l1)[1] = sigmoid(logit)
        torch.testing.assert_close(out.light, out.light_raw[:, 1] - out.light_raw[:, 0])
    # light layer 0 (8) <- booster layer 1 (8)
    ((light_h, booster_h),) = out.hidden
    torch.testing.assert_close(light_h, arch.light(x))
    torch.testing.assert_close(booster_h, arch.booster(x))


def test_the_hint_and_cosine_terms_are_torcheasyrecs():
    light_raw = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    booster_raw = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    light_h = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    booster_h = torch.tensor([[1.0, 1.0], [0.0, 3.0]])
    out = Distillation(light_raw[:, 1], booster_raw[:, 1], light_raw, booster_raw, ((light_h, booster_h),))
    # hint: mean of (1, 0, 4, 0) = 1.25; cosine: rows 1/sqrt(2) and 1, -0.1 · their mean
    expected = 1.25 - 0.1 * (2**-0.5 + 1.0) / 2
    torch.testing.assert_close(distillation_terms(out), torch.tensor(expected))
    euclid = out._replace(similarity="euclid")
    # sqrt(Σ ||b - l||²) = sqrt(1 + 1)
    torch.testing.assert_close(distillation_terms(euclid), torch.tensor(1.25 + 2**0.5))
    # weights 3 and 1, normalized to 1.5 and 0.5: hint rows 0.5 and 2 -> mean(0.75, 1) = 0.875
    weighted = distillation_terms(out._replace(hidden=()), torch.tensor([3.0, 1.0]))
    torch.testing.assert_close(weighted, torch.tensor(0.875))


def test_the_booster_side_gets_no_gradient_from_the_distillation_terms():
    booster = torch.randn(4, 2, requires_grad=True)
    booster_h = torch.randn(4, 3, requires_grad=True)
    light = torch.randn(4, 2, requires_grad=True)
    light_h = torch.randn(4, 3, requires_grad=True)
    distillation_terms(
        Distillation(light[:, 0], booster[:, 0], light, booster, ((light_h, booster_h),))
    ).backward()
    assert booster.grad is None and booster_h.grad is None
    assert light.grad.abs().sum() > 0 and light_h.grad.abs().sum() > 0


class _Rocket(torch.nn.Module):
    """The arch as a model over fixed embeddings (a leaf standing in for the lookups)."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = _arch()
        self.emb = torch.nn.Parameter(torch.randn(6, 4))

    def _embeddings(self) -> dict[str, torch.Tensor]:
        return {"a": self.emb, "b": self.emb * 2}

    def predict(self, batch):
        return self.dense(batch.dense, self._embeddings())

    def distillation(self, batch):
        return self.dense.distill(batch.dense, self._embeddings())


def test_the_training_loss_is_both_nets_bce_plus_the_distillation_and_only_the_booster_trains_the_embeddings():
    from types import SimpleNamespace

    model = _Rocket()
    dense, _ = _inputs()
    batch = SimpleNamespace(dense=dense, labels=torch.tensor([0.0, 1, 1, 0, 1, 0]), weights=None)
    train = TrainModel(model).train()
    loss, logits = train(batch)
    out = model.distillation(batch)
    expected = (
        bce_loss(out.light, batch.labels) + bce_loss(out.booster, batch.labels) + distillation_terms(out)
    )
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(logits, model.predict(batch))
    # the light net's part of the loss alone sends nothing to the embeddings
    model.zero_grad()
    (bce_loss(out.light, batch.labels) + distillation_terms(out)).backward()
    assert model.emb.grad is None or model.emb.grad.abs().sum() == 0
    assert model.dense.light.layers[0].linear.weight.grad.abs().sum() > 0
    model.zero_grad()
    train(batch)[0].backward()
    assert model.emb.grad.abs().sum() > 0  # through the booster
    # eval: the light net's BCE only
    train.eval()
    loss, _ = train(batch)
    torch.testing.assert_close(loss, bce_loss(model.predict(batch), batch.labels))


def test_the_light_logit_of_two_classes_trains_as_softmax_cross_entropy():
    raw = torch.tensor([[0.3, -0.2], [1.0, 2.0]])
    labels = torch.tensor([1, 0])
    ce = F.cross_entropy(raw, labels)
    torch.testing.assert_close(bce_loss(raw[:, 1] - raw[:, 0], labels.float()), ce)
