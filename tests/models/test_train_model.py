from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.batch import Batch
from recpipe.models.blocks.multitask import TwoClassLogit
from recpipe.models.train_model import (
    TrainModel,
    bce_loss,
    focal_factor,
    jrc_session_loss,
    session_ids,
    task_space_weights,
)


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


# Eight rows in two sessions of two negatives and two positives each, as logits (l0, l1).
JRC_LOGITS = torch.tensor(
    [[0.9, 0.1], [0.5, 0.5], [0.3, 0.7], [0.2, 0.8], [0.8, 0.2], [0.55, 0.45], [0.33, 0.67], [0.55, 0.45]]
)
JRC_LABELS = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
JRC_SESSIONS = torch.tensor([1, 1, 1, 1, 2, 2, 2, 2], dtype=torch.int8)


def _tzrec_jrc(logits, labels, sessions, alpha=0.5) -> torch.Tensor:
    """TorchEasyRec's JRCLoss (reduction mean, tzrec/loss/jrc_loss.py) row by row: alpha · CE + (1 - alpha) ·
    (mean positive term · pos_num / B + mean negative term · neg_num / B), a positive's term its CE among the
    l1 of itself and its session's negatives, a negative's among the l0 of itself and its session's positives."""
    b = len(labels)
    parts = []
    for cls in (1, 0):
        terms = []
        for i in (i for i in range(b) if labels[i] == cls):
            rivals = [j for j in range(b) if sessions[j] == sessions[i] and (j == i or labels[j] != cls)]
            terms.append(torch.logsumexp(logits[rivals, cls], 0) - logits[i, cls])
        parts.append(torch.stack(terms).sum() / b if terms else torch.tensor(0.0))
    return alpha * F.cross_entropy(logits, labels.long()) + (1 - alpha) * (parts[0] + parts[1])


def test_jrc_loss_reproduces_torcheasyrecs_value() -> None:
    """TorchEasyRec's own check of JRCLoss (alpha 0.5) on these rows is 0.7199, reduced or the mean of its
    per-row losses; recpipe's is alpha · BCE on l1 - l0 + (1 - alpha) · the session terms' mean."""
    d = (JRC_LOGITS[:, 1] - JRC_LOGITS[:, 0]).unsqueeze(1)
    terms = jrc_session_loss(JRC_LOGITS, JRC_LABELS, JRC_SESSIONS)
    loss = bce_loss(d, JRC_LABELS.unsqueeze(1), jrc=(torch.tensor([0.5]), terms.unsqueeze(1)))
    assert round(loss.item(), 4) == 0.7199
    torch.testing.assert_close(loss, _tzrec_jrc(JRC_LOGITS, JRC_LABELS, JRC_SESSIONS))
    # row 0 (negative, session 1): its l0 0.9 among the positives' l0 0.3, 0.2
    torch.testing.assert_close(terms[0], torch.logsumexp(torch.tensor([0.9, 0.3, 0.2]), 0) - 0.9)


def test_jrc_session_terms_match_torcheasyrecs_on_uneven_sessions() -> None:
    """Sessions of one row, of positives only and mixed; alpha 0.2; sample weights give the weighted mean."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(12, 2, generator=g)
    labels = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0])
    sessions = torch.tensor([5, 5, 5, 5, 7, 7, 9, 3, 3, 3, 3, 4])
    terms = jrc_session_loss(logits, labels, sessions)
    assert terms[[4, 5, 6, 11]].abs().max() == 0  # nobody to compete with: -log softmax of one logit
    d = (logits[:, 1] - logits[:, 0]).unsqueeze(1)
    loss = bce_loss(d, labels.unsqueeze(1), jrc=(torch.tensor([0.2]), terms.unsqueeze(1)))
    torch.testing.assert_close(loss, _tzrec_jrc(logits, labels, sessions, alpha=0.2))
    w = torch.rand(12, generator=g)
    per_row = 0.2 * F.binary_cross_entropy_with_logits(d[:, 0], labels, reduction="none") + 0.8 * terms
    weighted = bce_loss(d, labels.unsqueeze(1), w, jrc=(torch.tensor([0.2]), terms.unsqueeze(1)))
    torch.testing.assert_close(weighted, (per_row * w).sum() / w.sum())
    # no positives at all: 0 (TorchEasyRec's mean over no positive rows is NaN)
    assert jrc_session_loss(logits, torch.zeros(12), sessions).abs().max() == 0


def test_session_ids_are_each_rows_first_id_and_0_without_one() -> None:
    kjt = KeyedJaggedTensor(keys=["s"], values=torch.tensor([4, 9, 6]), lengths=torch.tensor([2, 0, 1]))
    assert session_ids(kjt, "s").tolist() == [4, 0, 6]


class _TwoTasks(nn.Module):
    """ctr: one logit; cvr: a two-class tower over the same fixed rows."""

    task_names = ["ctr", "cvr"]

    def __init__(self, x: torch.Tensor) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.x = x
        self.ctr = nn.Linear(x.shape[1], 1)
        self.cvr = TwoClassLogit(x.shape[1], "cvr")

    def predict(self, batch: Batch) -> torch.Tensor:
        return torch.cat([self.ctr(self.x), self.cvr(self.x)], dim=1)


def test_train_model_gives_a_jrc_task_its_pair_and_sessions() -> None:
    """cvr's loss is TorchEasyRec's JRCLoss on its (l0, l1), sessions from feature sid (the empty row: 0);
    the eval logit is l1 - l0; the pair's two rows get gradients BCE on l1 - l0 alone would make opposite."""
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(1))
    model = _TwoTasks(x)
    model.task_weights, model.task_jrc = [1.0, 1.0], [None, ("sid", 0.3)]
    sparse = KeyedJaggedTensor(
        keys=["sid"], values=torch.tensor([1, 1, 2, 2, 0]), lengths=torch.tensor([1, 1, 1, 1, 1, 0])
    )
    labels = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    loss, logits = TrainModel(model)(
        Batch(dense=torch.zeros(6, 0), sparse=sparse, labels=labels, weights=None)
    )
    pair = model.cvr.pair(x)
    torch.testing.assert_close(logits[:, 1], (pair[:, 1] - pair[:, 0]).detach())
    sessions = torch.tensor([1, 1, 2, 2, 0, 0])
    want = F.binary_cross_entropy_with_logits(logits[:, 0], labels[:, 0]) + _tzrec_jrc(
        pair, labels[:, 1], sessions, alpha=0.3
    )
    torch.testing.assert_close(loss, want)
    loss.backward()
    grad = model.cvr.pair.weight.grad
    assert (grad[0] + grad[1]).abs().max() > 1e-3


def test_a_jrc_task_needs_a_two_class_tower() -> None:
    model = _Fixed(torch.zeros(2, 2))
    model.task_names, model.task_weights, model.task_jrc = ["a", "b"], [1.0, 1.0], [None, ("sid", 0.5)]
    with pytest.raises(ValueError, match=r"tasks \['b'\] have a jrc loss but their towers are not two-class"):
        TrainModel(model)
