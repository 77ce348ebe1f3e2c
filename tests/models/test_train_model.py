from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.models.train_model import TrainModel, bce_loss, focal_factor, task_space_weights


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


def _tzrec_task_loss(logits, labels, task, weight=1.0, space=None, sample=None) -> torch.Tensor:
    """TorchEasyRec's MultiTaskRank.loss for one task, written out (tzrec/models/multi_task_rank.py): the loss
    weight is the sample weight (1 without), times in / out by the indicator label > 0, divided by its mean
    (div_no_nan), times the task's weight; the loss is mean(per-row BCE · loss weight) (RankModel._loss_impl)."""
    w = torch.ones(logits.shape[0]) if sample is None else sample.clone()
    if space is not None:
        indicator, w_in, w_out = space
        inside = (labels[:, indicator] > 0).float()
        w = w * (w_in * inside + w_out * (1 - inside))
    mean = w.mean()
    w = torch.zeros_like(w) if mean == 0 else w / mean
    per_row = F.binary_cross_entropy_with_logits(logits[:, task], labels[:, task], reduction="none")
    return (per_row * w).mean() * weight


def test_task_space_weights_give_torcheasyrecs_multi_task_loss() -> None:
    """mmoe.config's cvr task: task_space_indicator_label "clk", in 1, out 0 (only clicked rows count), and
    in 2 / out 0.5 with a sample weight; the ctr task has no task space."""
    logits = torch.tensor([[0.5, -1.0], [-2.0, 0.3], [1.0, 1.0], [0.2, -0.4]])
    labels = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    sample = torch.tensor([1.0, 2.0, 0.5, 1.0])
    for space, weights in (((0, 1.0, 0.0), None), ((0, 2.0, 0.5), sample)):
        model = _Fixed(logits)
        model.task_weights, model.task_spaces = [1.0, 3.0], [None, space]
        b = Batch(dense=torch.zeros(4, 0), sparse=_batch([0.0, 0.0]).sparse, labels=labels, weights=weights)
        loss, _ = TrainModel(model)(b)
        want = _tzrec_task_loss(logits, labels, 0, sample=weights) + _tzrec_task_loss(
            logits, labels, 1, 3.0, space, weights
        )
        torch.testing.assert_close(loss, want)
    # the out-of-space rows (out 0) give the cvr task no gradient
    model = _Fixed(logits)
    model.task_weights, model.task_spaces = [1.0, 1.0], [None, (0, 1.0, 0.0)]
    TrainModel(model)(Batch(dense=torch.zeros(4, 0), sparse=b.sparse, labels=labels, weights=None))[
        0
    ].backward()
    assert model.logits.grad[[1, 3], 1].abs().sum() == 0 and model.logits.grad[[0, 2], 1].abs().min() > 0


def test_a_batch_without_rows_in_the_task_space_gives_the_task_no_loss() -> None:
    """TorchEasyRec divides by the mean weight with div_no_nan: a batch whose weights are all 0 adds 0."""
    logits, labels = torch.tensor([[0.5, -1.0], [-2.0, 0.3]]), torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    weights = task_space_weights(labels, torch.tensor([[-1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    assert weights.tolist() == [[1.0, 0.0], [1.0, 0.0]]
    torch.testing.assert_close(bce_loss(logits, labels, weights), bce_loss(logits[:, 0], labels[:, 0]))


def test_focal_loss_matches_hand_computed_values() -> None:
    """TorchEasyRec's defaults gamma 2, alpha 0.5 (tzrec/loss/focal_loss.py): logits 0, 2, -1, labels 1, 0, 1:
    p = 0.5, 0.8808, 0.2689; weights 0.5·0.5² = 0.125, 0.5·0.8808² = 0.3879, 0.5·0.7311² = 0.2672; BCE ln 2,
    ln(1 + e²), ln(1 + e); mean of the products (0.0866 + 0.8250 + 0.3509) / 3 = 0.42087."""
    logits, labels = torch.tensor([0.0, 2.0, -1.0]), torch.tensor([1.0, 0.0, 1.0])
    focal = torch.tensor([[1.0, 2.0, 0.5]])
    torch.testing.assert_close(
        focal_factor(logits, labels, focal), torch.tensor([0.125, 0.3879017, 0.2672233])
    )
    torch.testing.assert_close(bce_loss(logits, labels, focal=focal), torch.tensor(0.4208722))
    # sample weights 2, 1, 1: TorchEasyRec's mean(l · w / mean(w)) = (2·0.0866 + 0.8250 + 0.3509) / 4
    loss = bce_loss(logits, labels, torch.tensor([2.0, 1.0, 1.0]), focal=focal)
    torch.testing.assert_close(loss, torch.tensor((2 * 0.0866434 + 0.8250391 + 0.3509342) / 4))


def test_focal_weight_is_constant_in_the_gradient() -> None:
    """d/dz of w·BCE with w detached is w·(p - y): row 0 (z 0, y 1) gives 0.125 · (0.5 - 1) / 3."""
    z = torch.tensor([0.0, 2.0, -1.0], requires_grad=True)
    bce_loss(z, torch.tensor([1.0, 0.0, 1.0]), focal=torch.tensor([[1.0, 2.0, 0.5]])).backward()
    torch.testing.assert_close(z.grad[0], torch.tensor(0.125 * -0.5 / 3))


def test_a_multi_task_model_mixes_bce_and_focal_tasks() -> None:
    """ctr BCE, cvr focal gamma 1, alpha 0.25 with task weight 2: Σ_t weight_t · loss_t, each as TorchEasyRec's
    MultiTaskRank.loss computes it."""
    logits = torch.tensor([[0.5, -1.0], [-2.0, 0.3]])
    labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    model = _Fixed(logits)
    model.task_weights, model.task_losses = [1.0, 2.0], [None, (1.0, 0.25)]
    batch = Batch(dense=torch.zeros(2, 0), sparse=_batch([0.0, 0.0]).sparse, labels=labels, weights=None)
    loss, _ = TrainModel(model)(batch)
    # cvr, p = sigmoid(z): row 0 (z -1, y 0) (1 - alpha)·p·BCE, row 1 (z 0.3, y 1) alpha·(1 - p)·BCE
    p = [1 / (1 + math.exp(1.0)), 1 / (1 + math.exp(-0.3))]
    cvr = (0.75 * p[0] * -math.log(1 - p[0]) + 0.25 * (1 - p[1]) * -math.log(p[1])) / 2
    torch.testing.assert_close(loss, _tzrec_task_loss(logits, labels, 0) + torch.tensor(2 * cvr))
