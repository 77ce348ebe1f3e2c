from __future__ import annotations

import math

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.models.train_model import TrainModel, bce_loss


class _Fixed(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = nn.Parameter(logits)

    def predict(self, batch: Batch) -> torch.Tensor:
        return self.logits


def _batch(labels, weights=None) -> Batch:
    sparse = KeyedJaggedTensor(keys=["a"], values=torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    return Batch(dense=torch.zeros(2, 0), sparse=sparse, labels=torch.tensor(labels), weights=weights)


def test_bce_matches_formula() -> None:
    logits = torch.tensor([0.0, 2.0])
    expected = (math.log(2.0) + math.log1p(math.exp(-2.0))) / 2
    torch.testing.assert_close(bce_loss(logits, torch.tensor([1.0, 1.0])), torch.tensor(expected))


def test_weighted_mean() -> None:
    logits = torch.tensor([0.0, 2.0])
    per_row = torch.tensor([math.log(2.0), math.log1p(math.exp(2.0))])  # label 1, then label 0
    loss = bce_loss(logits, torch.tensor([1.0, 0.0]), torch.tensor([3.0, 1.0]))
    torch.testing.assert_close(loss, (3 * per_row[0] + per_row[1]) / 4)


def test_train_model_returns_loss_and_detached_logits() -> None:
    model = _Fixed(torch.tensor([0.5, -1.0]))
    loss, logits = TrainModel(model)(_batch([1.0, 0.0], torch.tensor([1.0, 0.0])))
    torch.testing.assert_close(loss, bce_loss(torch.tensor([0.5]), torch.tensor([1.0])))
    assert not logits.requires_grad and torch.equal(logits, torch.tensor([0.5, -1.0]))
    loss.backward()
    assert model.logits.grad[1] == 0  # zero weight: no gradient
