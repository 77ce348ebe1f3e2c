"""The retrieval losses, by hand: in-batch and sampled softmax cross-entropy, log-Q, sample weights."""

from __future__ import annotations

import math

import pytest
import torch

from recpipe.models.blocks.retrieval_loss import (
    in_batch_labels,
    in_batch_logits,
    sampled_labels,
    sampled_logits,
    softmax_cross_entropy,
)

U = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
V = torch.tensor([[2.0, 0.0], [1.0, 1.0]])


def test_in_batch_by_hand() -> None:
    logits = in_batch_logits(U, V, temperature=0.5)
    torch.testing.assert_close(logits, torch.tensor([[4.0, 2.0], [0.0, 2.0]]))
    loss = softmax_cross_entropy(logits, in_batch_labels(logits))
    # row 0: -log(e^4 / (e^4 + e^2)); row 1: -log(e^2 / (1 + e^2))
    want = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-2))) / 2
    assert float(loss) == pytest.approx(want, rel=1e-6)


def test_in_batch_log_q_lowers_popular_items() -> None:
    log_q = torch.log(torch.tensor([0.5, 0.25]))
    logits = in_batch_logits(U, V, log_q=log_q)
    torch.testing.assert_close(
        logits, torch.tensor([[2 + math.log(2), 1 + math.log(4)], [math.log(2), 1 + math.log(4)]])
    )


def test_sampled_by_hand_with_log_q_and_weights() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pos = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    neg = torch.tensor([[0.0, 3.0], [1.0, 0.0]])
    logits = sampled_logits(u, pos, neg)
    torch.testing.assert_close(logits, torch.tensor([[2.0, 0.0, 1.0], [1.0, 3.0, 0.0]]))
    pq, nq = torch.log(torch.tensor([0.5, 0.1])), torch.log(torch.tensor([0.2, 0.4]))
    corrected = sampled_logits(u, pos, neg, 2.0, pq, nq)
    want = torch.tensor(
        [
            [1 - math.log(0.5), -math.log(0.2), 0.5 - math.log(0.4)],
            [0.5 - math.log(0.1), 1.5 - math.log(0.2), -math.log(0.4)],
        ]
    )
    torch.testing.assert_close(corrected, want)
    per_row = [math.log(sum(math.exp(x) for x in r)) - r[0] for r in logits.tolist()]
    w = torch.tensor([1.0, 3.0])
    got = softmax_cross_entropy(logits, sampled_labels(logits), w)
    assert float(got) == pytest.approx((per_row[0] + 3 * per_row[1]) / 4, rel=1e-6)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="both positive_log_q and negative_log_q"):
        sampled_logits(U, V, V, positive_log_q=torch.zeros(2))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        in_batch_logits(U, V, temperature=0.0)
    with pytest.raises(ValueError, match=r"negatives must be \(N, 2\)"):
        sampled_logits(U, V, torch.zeros(3, 4))
