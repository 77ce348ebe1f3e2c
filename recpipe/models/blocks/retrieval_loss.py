"""The retrieval losses: softmax cross-entropy of each row's positive item among negatives, in-batch or sampled
from an item table, with an optional log-Q (sampling-probability) correction.

TorchEasyRec's ``MatchModel`` (tzrec/models/match_model.py) scores ``[positive | shared sampled negatives]``
(label column 0) or, with ``in_batch_negative``, the ``(B, B)`` matrix of every row's user against every row's
item (label ``i`` for row ``i``), divides by the temperature and takes ``nn.CrossEntropyLoss``, the sample-weighted
mean when a weight is given. The log-Q correction (Yi et al., RecSys 2019, "Sampling-bias-corrected neural
modeling") is recpipe's addition, off unless log-probabilities are passed: an item drawn often as a negative
is otherwise pushed down for being popular, not for being wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def in_batch_logits(
    user: torch.Tensor, item: torch.Tensor, temperature: float = 1.0, log_q: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, B)`` logits of every row's user against every row's positive item: ``u_i · v_j / temperature``,
    minus ``log_q[j]`` when given; row ``i``'s label is column ``i``.

    Args:
        user (torch.Tensor): ``(B, D)`` user embeddings.
        item (torch.Tensor): ``(B, D)`` the rows' positive item embeddings.
        temperature (float): the similarity's divisor (> 0).
        log_q (torch.Tensor | None): ``(B,)`` log of the probability that row ``j``'s item is in a batch (its
            share of the training rows); None: no correction (TorchEasyRec's).

    Example::

        u = torch.tensor([[1.0, 0.0], [0.0, 1.0]]); v = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
        in_batch_logits(u, v)                                  # [[2, 1], [0, 1]]
        in_batch_logits(u, v, log_q=torch.log(torch.tensor([0.5, 0.25])))
        # [[2 + log 2, 1 + log 4], [log 2, 1 + log 4]]
    """
    _check_pair(user, item, "item")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = user @ item.T / temperature
    if log_q is not None:
        if log_q.shape != (item.shape[0],):
            raise ValueError(f"log_q must be ({item.shape[0]},), got {tuple(log_q.shape)}")
        logits = logits - log_q.to(logits.dtype).unsqueeze(0)
    return logits


def sampled_logits(
    user: torch.Tensor,
    positive: torch.Tensor,
    negatives: torch.Tensor,
    temperature: float = 1.0,
    positive_log_q: torch.Tensor | None = None,
    negative_log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, 1 + N)`` logits of every row's user against its positive (column 0) and the ``N`` sampled negatives
    all rows share (TorchEasyRec's ``_sim_with_sampler``), divided by ``temperature``; with log-Q, minus the log
    probability of drawing each item (sampled softmax: the positive's too, so the two sides are corrected alike).

    Args:
        user (torch.Tensor): ``(B, D)`` user embeddings.
        positive (torch.Tensor): ``(B, D)`` each row's positive item embedding.
        negatives (torch.Tensor): ``(N, D)`` sampled negative item embeddings.
        temperature (float): the similarity's divisor (> 0).
        positive_log_q (torch.Tensor | None): ``(B,)`` log probability of each row's item under the sampler.
        negative_log_q (torch.Tensor | None): ``(N,)`` the negatives'; give both or neither.

    Example::

        u = torch.tensor([[1.0, 0.0]]); pos = torch.tensor([[2.0, 0.0]]); neg = torch.tensor([[0.0, 3.0], [1.0, 0.0]])
        sampled_logits(u, pos, neg)                    # [[2, 0, 1]]
    """
    _check_pair(user, positive, "positive")
    if negatives.dim() != 2 or negatives.shape[1] != user.shape[1]:
        raise ValueError(f"negatives must be (N, {user.shape[1]}), got {tuple(negatives.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if (positive_log_q is None) != (negative_log_q is None):
        raise ValueError("log-Q correction needs both positive_log_q and negative_log_q, or neither")
    pos = (user * positive).sum(dim=1, keepdim=True)
    logits = torch.cat([pos, user @ negatives.T], dim=1) / temperature
    if positive_log_q is not None and negative_log_q is not None:
        if positive_log_q.shape != (user.shape[0],) or negative_log_q.shape != (negatives.shape[0],):
            raise ValueError(
                f"log_q must be ({user.shape[0]},) and ({negatives.shape[0]},), got "
                f"{tuple(positive_log_q.shape)} and {tuple(negative_log_q.shape)}"
            )
        rows = user.shape[0]
        log_q = torch.cat([positive_log_q.unsqueeze(1), negative_log_q.unsqueeze(0).expand(rows, -1)], dim=1)
        logits = logits - log_q.to(logits.dtype)
    return logits


def softmax_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of each row's label column; with ``weights`` the weighted mean ``Σ w·l / Σ w``
    (TorchEasyRec: ``mean(l · w) / mean(w)``, the same; 0 where every weight is 0).

    Args:
        logits (torch.Tensor): ``(B, C)``.
        labels (torch.Tensor): ``(B,)`` int64 column of each row's positive (0 for sampled negatives,
            ``arange(B)`` in batch).
        weights (torch.Tensor | None): ``(B,)`` sample weights.

    Example::

        softmax_cross_entropy(torch.tensor([[0.0, 0.0]]), torch.tensor([0]))   # log 2 = 0.6931
    """
    per_row = F.cross_entropy(logits.float(), labels, reduction="none")
    if weights is None:
        return per_row.mean()
    w = weights.to(per_row.dtype)
    return (per_row * w).sum() / w.sum().clamp_min(torch.finfo(per_row.dtype).tiny)


def in_batch_labels(logits: torch.Tensor) -> torch.Tensor:
    """``arange(B)``: row ``i``'s positive is column ``i`` of :func:`in_batch_logits`."""
    return torch.arange(logits.shape[0], device=logits.device)


def sampled_labels(logits: torch.Tensor) -> torch.Tensor:
    """Zeros: every row's positive is column 0 of :func:`sampled_logits`."""
    return torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)


def _check_pair(user: torch.Tensor, item: torch.Tensor, what: str) -> None:
    if user.dim() != 2 or item.shape != user.shape:
        raise ValueError(
            f"user and {what} embeddings must both be (B, D), got {tuple(user.shape)} and {tuple(item.shape)}"
        )
